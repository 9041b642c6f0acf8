"""Opening a NATS connection from BusSettings.

Why a helper: credentials come in four shapes (token, user/password, .creds file, NKEY seed) and
every service must pass them the same way; secrets stay ``SecretStr`` (or in their files) until this
call. TLS, when asked for, is enforced here (``shared.bus.tls``). The first connect retries as
reconnects do (``nats_max_reconnect_attempts``), so a service started before NATS waits for it, but
a wrong credential fails in bounded time instead of looping forever.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats
from nats.aio.client import Client

from shared.bus.settings import BusSettings
from shared.bus.tls import BusConfigError, client_ssl_context, server_urls


class _QuietTlsClose(logging.Filter):
    """Drop asyncio's "returning true from eof_received() has no effect when using ssl" warning.

    nats-py's protocol returns True from ``eof_received`` for plain and TLS transports alike; over
    TLS asyncio logs this warning at every close of every connection, which says nothing to an
    operator (the connection is closed either way)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "eof_received() has no effect when using ssl" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_QuietTlsClose())
log = logging.getLogger("hylo.bus")


class PlaintextRefused(ConnectionError):
    """TLS was asked for but the server did not offer it: the connection was closed."""


def connect_options(settings: BusSettings) -> dict[str, Any]:
    """The keyword arguments of ``nats.connect`` for ``settings`` (BusConfigError names a bad one)."""
    options: dict[str, Any] = {
        "servers": server_urls(settings),
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
    if settings.nats_nkey_seed is not None:
        if not settings.nats_nkey_seed.is_file():
            raise BusConfigError(f"HYLO_NATS_NKEY_SEED={settings.nats_nkey_seed}: no such file")
        options["nkeys_seed"] = str(settings.nats_nkey_seed)
    context = client_ssl_context(settings)
    if context is not None:
        options["tls"] = context
        options["tls_handshake_first"] = settings.nats_tls_handshake_first
    return options


def first_connect_budget_s(settings: BusSettings, servers: int) -> float | None:
    """How long the first connect may take: every allowed attempt on every server, plus slack
    (None when ``nats_max_reconnect_attempts`` is -1: retry forever)."""
    if settings.nats_max_reconnect_attempts < 0:
        return None
    attempts = (settings.nats_max_reconnect_attempts + 1) * max(1, servers)
    return attempts * (settings.nats_connect_timeout_s + settings.nats_reconnect_wait_s) + 2.0


async def connect(settings: BusSettings) -> Client:
    """Connect to the servers in ``settings.nats_url`` with its credentials (and TLS if asked for).

    The first connect is bounded by ``first_connect_budget_s``: nats-py does not always give up by
    itself (a failed TLS handshake against a plaintext server was retried for ever), and a service
    must fail with one clear line rather than hang."""
    options = connect_options(settings)
    errors: list[BaseException] = []

    async def remember(err: Exception) -> None:
        # one line per error (nats-py's default logs a traceback for each): a refused publish
        # (a permissions violation) or a failed reconnect attempt shows up in the service's log
        errors[:] = [err]
        log.warning("nats: %s: %s", type(err).__name__, err)

    options["error_cb"] = remember
    budget = first_connect_budget_s(settings, len(options["servers"]))
    try:
        async with asyncio.timeout(budget):
            client = await nats.connect(**options)
    except TimeoutError:
        last = f": last error {type(errors[-1]).__name__}: {errors[-1]}" if errors else ""
        raise ConnectionError(
            f"could not connect to NATS at {settings.nats_url} within {budget:g} s{last}"
        ) from None
    # nats-py upgrades only when the server requires TLS; a server that does not is refused here
    # (with handshake-first, such a server already failed the handshake)
    upgraded_only_if_offered = "tls" in options and not options["tls_handshake_first"]
    if upgraded_only_if_offered and not client._server_info.get("tls_required", False):
        await client.close()
        raise PlaintextRefused(
            f"TLS was asked for (tls:// or HYLO_NATS_TLS_*) but the server at {settings.nats_url} "
            "does not offer it: refusing to talk in plaintext"
        )
    return client
