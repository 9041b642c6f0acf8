"""Opening a NATS connection from BusSettings.

Why a helper: credentials come in three shapes (token, user/password, .creds file) and every service
must pass them the same way; secrets stay ``SecretStr`` until this call. The first connect retries as
reconnects do (``nats_max_reconnect_attempts``), so a service started before NATS waits for it, but
a wrong credential fails in bounded time instead of looping forever.
"""

from __future__ import annotations

from typing import Any

import nats
from nats.aio.client import Client

from shared.bus.settings import BusSettings


async def connect(settings: BusSettings) -> Client:
    """Connect to the servers in ``settings.nats_url`` with its credentials."""
    options: dict[str, Any] = {
        "servers": [u.strip() for u in settings.nats_url.split(",") if u.strip()],
        "name": settings.nats_name,
        "connect_timeout": settings.nats_connect_timeout_s,
        "allow_reconnect": True,
        "max_reconnect_attempts": settings.nats_max_reconnect_attempts,
        "reconnect_time_wait": settings.nats_reconnect_wait_s,
    }
    if settings.nats_token is not None:
        options["token"] = settings.nats_token.get_secret_value()
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
        if settings.nats_password is not None:
            options["password"] = settings.nats_password.get_secret_value()
    if settings.nats_creds is not None:
        options["user_credentials"] = str(settings.nats_creds)
    return await nats.connect(**options)
