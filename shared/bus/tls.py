"""TLS for the NATS connection: when it is asked for, and the SSL context that enforces it.

Why its own module: a ``tls://`` URL used to connect in plaintext whenever the server did not offer
TLS (nats-py upgrades only when the server's INFO says ``tls_required``), so an operator who asked
for TLS could run without it and never know. Here TLS is asked for by a ``tls://`` URL or any
``HYLO_NATS_TLS_*`` file; when it is, every URL is dialled as ``tls://``, certificates are verified
against the configured CA (the system's when none is given) with the host name checked, and by
default the TLS handshake comes first (``nats_tls_handshake_first``): a server that answers in
plaintext fails the handshake before any credential is sent.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from shared.bus.settings import BusSettings


class BusConfigError(ValueError):
    """A bus setting that cannot be used (a missing file, half a key pair); the message names it."""


def server_urls(settings: BusSettings) -> list[str]:
    """The URLs in ``nats_url``, each as ``tls://`` when TLS is asked for."""
    urls = [u.strip() for u in settings.nats_url.split(",") if u.strip()]
    if not tls_requested(settings):
        return urls
    return ["tls://" + u.split("://", 1)[1] if "://" in u else "tls://" + u for u in urls]


def tls_requested(settings: BusSettings) -> bool:
    """TLS is asked for by a ``tls://`` URL or by any of the TLS files."""
    if any(u.strip().startswith("tls://") for u in settings.nats_url.split(",")):
        return True
    return any(p is not None for p in (settings.nats_tls_ca, settings.nats_tls_cert, settings.nats_tls_key))


def _readable(path: Path, setting: str) -> str:
    if not path.is_file():
        raise BusConfigError(f"{setting}={path}: no such file")
    return str(path)


def client_ssl_context(settings: BusSettings) -> ssl.SSLContext | None:
    """The verifying SSL context for ``settings`` (None when TLS is not asked for)."""
    if not tls_requested(settings):
        return None
    cafile = None if settings.nats_tls_ca is None else _readable(settings.nats_tls_ca, "HYLO_NATS_TLS_CA")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    cert, key = settings.nats_tls_cert, settings.nats_tls_key
    if (cert is None) != (key is None):
        raise BusConfigError("HYLO_NATS_TLS_CERT and HYLO_NATS_TLS_KEY go together: set both or neither")
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(
                _readable(cert, "HYLO_NATS_TLS_CERT"), _readable(key, "HYLO_NATS_TLS_KEY")
            )
        except ssl.SSLError as err:
            raise BusConfigError(
                f"HYLO_NATS_TLS_CERT/KEY ({cert}, {key}): not a usable pair: {err}"
            ) from None
    return context
