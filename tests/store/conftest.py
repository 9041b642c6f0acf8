"""Store tests run against real PostgreSQL and SQLite databases (see tests/conftest_services.py)."""

from pathlib import Path

import pytest

from tests.conftest_services import fresh_postgres_url, pg_admin_dsn, postgres_url
from tests.store.store_helpers import url_for

__all__ = ["fresh_postgres_url", "pg_admin_dsn", "postgres_url", "store_url"]

DIALECTS = ["sqlite", "postgresql"]


@pytest.fixture(params=DIALECTS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL per dialect. A synchronous fixture on purpose: the session's PostgreSQL is set
    up with ``asyncio.run``, which cannot run inside an async test's event loop."""
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("postgres_url"))
