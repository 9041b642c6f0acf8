"""``python -m shared.query``: serve the query API with uvicorn on HYLO_HTTP_HOST:HYLO_HTTP_PORT (8100).

Why tracing is set up here and not in ``create_app``: the global tracer provider belongs to the
process; tests build several apps in one process and must not install one each.

Settings the API cannot start with (invalid values; a non-loopback address without API tokens, a
bad token file) exit 2 with one line that names the setting, before anything listens.
"""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from shared.query.app import create_app
from shared.query.settings import QuerySettings
from shared.service.api_auth import ApiAuthError, ApiSecuritySettings
from shared.store.settings import StoreSettings
from shared.telemetry import TelemetrySettings, setup_tracing, shutdown_tracing


def main() -> int:
    try:
        settings = QuerySettings()
        store = StoreSettings()
        telemetry = TelemetrySettings()
        security = ApiSecuritySettings()
    except ValidationError as err:
        print(f"hylo query: invalid settings:\n{err}", file=sys.stderr)
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
