"""``python -m shared.query``: serve the query API with uvicorn on HYLO_HTTP_HOST:HYLO_HTTP_PORT (8100).

``--help`` prints the options and the settings it reads, and exits (it used to start the server:
the module took no arguments). ``--host``, ``--port`` and ``--database`` (a SQLite file path or any
SQLAlchemy URL, read as every ``hylo`` command reads it) override the settings; ``hylo serve query``
runs the same ``main``.

Why tracing is set up here and not in ``create_app``: the global tracer provider belongs to the
process; tests build several apps in one process and must not install one each.

Settings the API cannot start with (invalid values; a non-loopback address without API tokens, a
bad token file, a database Hylo cannot open) exit 2 with one line that names the setting, before
anything listens.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from shared.query.settings import DEFAULT_PORT, QuerySettings
from shared.service.api_auth import ApiAuthError, ApiSecuritySettings
from shared.store.settings import StoreSettings
from shared.store.urls import DatabaseUrlError, database_url
from shared.telemetry import TelemetrySettings, setup_tracing, shutdown_tracing

DESCRIPTION = (
    "Serve Hylo's read-only query API over the decisions database (decisions, outcomes, model "
    "versions, the report). Settings come from HYLO_* variables over hylo.toml: HYLO_HTTP_HOST, "
    f"HYLO_HTTP_PORT (default {DEFAULT_PORT}), HYLO_DATABASE_URL, HYLO_API_TOKENS_FILE, "
    "HYLO_QUERY_PAGE_MAX, ...; the options below override them (docs/query-api.md)."
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: ``--help`` exits here, before any setting is read or socket opened."""
    parser = argparse.ArgumentParser(prog="python -m shared.query", description=DESCRIPTION)
    parser.add_argument("--host", help="bind address (default: HYLO_HTTP_HOST, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port (default: HYLO_HTTP_PORT, else {DEFAULT_PORT})")
    parser.add_argument(
        "--database",
        "--database-url",
        dest="database",
        help="a SQLite file path or a SQLAlchemy URL (default: HYLO_DATABASE_URL, else ./hylo.db)",
    )
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> tuple[QuerySettings, StoreSettings]:
    """The settings with the options applied; ``ValueError`` (one line) when one is unusable."""
    settings = QuerySettings()
    updates: dict[str, object] = {}
    if args.host is not None:
        updates["http_host"] = args.host
    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port {args.port}: expected 0-65535")
        updates["http_port"] = args.port
    store = StoreSettings()
    try:
        url = database_url(args.database if args.database is not None else store.database_url)
    except DatabaseUrlError as err:
        raise ValueError(
            f"{'--database' if args.database is not None else 'HYLO_DATABASE_URL'}: {err}"
        ) from None
    return settings.model_copy(update=updates), store.model_copy(update={"database_url": url})


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    from shared.query.app import create_app

    args = parse_args(argv)
    try:
        settings, store = _settings(args)
        telemetry = TelemetrySettings()
        security = ApiSecuritySettings()
    except ValidationError as err:
        print(f"hylo query: invalid settings:\n{err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"hylo query: {err}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    # /readyz reads the schema revision through Alembic, which logs each time at INFO
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        app = create_app(store, settings, security)
    except ApiAuthError as err:
        print(f"hylo query: {err}", file=sys.stderr)
        return 2
    setup_tracing("query", telemetry)
    try:
        uvicorn.run(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_level=settings.log_level.lower(),
            proxy_headers=True,
        )
    finally:
        shutdown_tracing()
    return 0


if __name__ == "__main__":
    sys.exit(main())
