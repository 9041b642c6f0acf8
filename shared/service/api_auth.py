"""Bearer tokens, scopes and per-client rate limits for Hylo's HTTP APIs (query API, trainer).

Why one guard for both: the query API (its own FastAPI app) and the trainer (a router mounted by
the service runtime) must agree on the token file, the scopes and the limits, and an operator
configures them once (``HYLO_API_*``). The guard is a FastAPI dependency attached to each API's own
routes: ``/healthz``, ``/readyz`` and ``/metrics`` stay open because orchestrators and Prometheus
probe them without credentials.

Scopes: ``read`` (every GET data route), ``admin`` (implies read; ``POST /v1/retrain``).

Why the default depends on the address: the one-command ``hylo run`` and a developer's
``python -m shared.query`` bind 127.0.0.1, where only local users reach the API, and must keep
working with no setup; a service bound to any other address without tokens would be open to the
network, so it refuses to start and names the setting (``HYLO_API_AUTH=off`` opens it on purpose).

No ``from __future__ import annotations``: FastAPI reads the dependency's annotations at runtime.
"""

import ipaddress
import logging
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field

from shared.config import HyloBaseSettings
from shared.service.api_tokens import Scope, TokenFileError, TokenTable
from shared.service.rate_limit import TokenBuckets

log = logging.getLogger("hylo.api")

BEARER = HTTPBearer(
    auto_error=False,
    description="a token from `hylo tokens create` (scope read, or admin for POST routes)",
)

Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class ApiSecuritySettings(HyloBaseSettings):
    """Who may call an API's data routes, and how often (``HYLO_API_*``; docs/security.md)."""

    api_auth: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: tokens when HYLO_API_TOKENS_FILE is set, else open on 127.0.0.1 only (other "
        "addresses refuse to start); on: tokens required; off: no authentication anywhere",
    )
    api_tokens_file: Path | None = Field(
        default=None, description="file of hashed bearer tokens with their scopes (`hylo tokens create`)"
    )
    api_rate_per_s: float = Field(
        default=20.0, ge=0, description="requests per second per client, sustained (0: no limit)"
    )
    api_rate_burst: int = Field(default=100, ge=1, description="requests a client may make at once")
    api_rate_clients: int = Field(
        default=10_000, ge=1, description="clients whose buckets are kept (least recently seen dropped)"
    )


class ApiAuthError(ValueError):
    """The API cannot start with these settings; the message is one line naming the setting."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[] ")).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve to anything
        return False


class ApiGuard:
    """The dependency that checks a request's token, its client's rate and the route's scope."""

    def __init__(self, tokens: TokenTable | None, buckets: TokenBuckets | None) -> None:
        self.tokens = tokens  # None: no authentication
        self.buckets = buckets  # None: no rate limit

    def require(self, scope: Scope) -> Callable[..., Awaitable[str | None]]:
        """A dependency for routes that need ``scope``; it returns the token's name (None: open)."""

        async def guard(request: Request, credentials: Credentials) -> str | None:
            return self.check(request, credentials, scope)

        return guard

    def by_method(self) -> Callable[..., Awaitable[str | None]]:
        """A dependency for a whole router: reads (GET, HEAD) need ``read``, anything else ``admin``.

        Why by method: a service's own routes (the featurizer's predictor status, the prioritizer's
        model, the Slurm adapter's ``POST /v1/poll``) follow that rule, and a route added later is
        guarded without anyone remembering to."""

        async def guard(request: Request, credentials: Credentials) -> str | None:
            scope: Scope = "read" if request.method in ("GET", "HEAD") else "admin"
            return self.check(request, credentials, scope)

        return guard

    def check(
        self, request: Request, credentials: HTTPAuthorizationCredentials | None, scope: Scope
    ) -> str | None:
        token = credentials.credentials if credentials is not None else None
        entry = self.tokens.lookup(token) if self.tokens is not None and token else None
        address = request.client.host if request.client is not None else "unknown"
        self._limit(f"token:{entry.name}" if entry is not None else f"ip:{address}")
        if self.tokens is None:
            return None
        if token is None:
            raise HTTPException(
                401,
                "missing bearer token: send 'Authorization: Bearer <token>' (see `hylo tokens create`)",
                headers={"WWW-Authenticate": 'Bearer realm="hylo"'},
            )
        if entry is None:
            raise HTTPException(
                401,
                "invalid bearer token",
                headers={"WWW-Authenticate": 'Bearer realm="hylo", error="invalid_token"'},
            )
        if not entry.allows(scope):
            raise HTTPException(
                403,
                f"the token {entry.name!r} has scope {entry.scope!r}; this route needs {scope!r}",
                headers={
                    "WWW-Authenticate": f'Bearer realm="hylo", error="insufficient_scope", scope="{scope}"'
                },
            )
        return entry.name

    def _limit(self, client: str) -> None:
        if self.buckets is None:
            return
        wait = self.buckets.take(client)
        if wait > 0:
            b = self.buckets
            raise HTTPException(
                429,
                f"too many requests from this client: {b.rate:g} per second with bursts of {b.burst} "
                f"(HYLO_API_RATE_PER_S, HYLO_API_RATE_BURST); retry in {wait:.2f} s",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )

    @staticmethod
    def responses(model: Any = None) -> dict[int | str, dict[str, Any]]:
        """The guard's answers, for the OpenAPI document of the routes it protects."""
        extra: dict[str, Any] = {"model": model} if model is not None else {}
        return {
            401: {**extra, "description": "no bearer token, or one that is not in HYLO_API_TOKENS_FILE"},
            403: {**extra, "description": "the token's scope does not allow this route"},
            429: {**extra, "description": "this client's rate limit; `Retry-After` says when to retry"},
        }


def _tokens(settings: ApiSecuritySettings, host: str, api: str) -> TokenTable | None:
    """The token table the settings ask for (None: no authentication), or ApiAuthError saying why not."""
    path = settings.api_tokens_file
    if settings.api_auth == "off":
        log.warning(
            "%s: authentication is off (HYLO_API_AUTH=off): anyone who reaches %s may use it", api, host
        )
        return None
    if path is None:
        if settings.api_auth == "on":
            raise ApiAuthError(
                f"{api}: HYLO_API_AUTH=on needs HYLO_API_TOKENS_FILE (create one: hylo tokens create)"
            )
        if not is_loopback(host):
            raise ApiAuthError(
                f"{api} would serve on {host} without authentication: set HYLO_API_TOKENS_FILE (create one "
                "with `hylo tokens create --name NAME --scope read --file FILE`), or HYLO_API_AUTH=off to "
                "serve it unauthenticated on purpose"
            )
        log.warning(
            "%s: no API tokens (HYLO_API_TOKENS_FILE unset): unauthenticated, reachable from this host "
            "only (%s)",
            api,
            host,
        )
        return None
    try:
        table = TokenTable(path)
    except TokenFileError as err:
        raise ApiAuthError(f"{api}: HYLO_API_TOKENS_FILE: {err}") from None
    if not table.entries:
        log.warning("%s: no tokens in %s: every data request is refused until one is added", api, path)
    else:
        log.info("%s: bearer tokens required (%d in %s)", api, len(table.entries), path)
    return table


def api_guard(settings: ApiSecuritySettings, host: str, api: str) -> ApiGuard:
    """The guard of an API that will listen on ``host``; ApiAuthError (one line) when it must not start."""
    buckets = None
    if settings.api_rate_per_s > 0:
        buckets = TokenBuckets(settings.api_rate_per_s, settings.api_rate_burst, settings.api_rate_clients)
    return ApiGuard(_tokens(settings, host, api), buckets)
