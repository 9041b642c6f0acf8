"""Registry tests run against a real PostgreSQL (and SQLite) and a real NATS (tests/conftest_services.py)."""

from pathlib import Path

import pytest

from tests.conftest_services import bus, nats_url, pg_admin_dsn, postgres_url
from tests.registry.registry_helpers import store_url

__all__ = ["bus", "nats_url", "pg_admin_dsn", "postgres_url", "url"]


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL of each dialect: the registry must behave the same on both."""
    if request.param == "sqlite":
        return store_url("sqlite", tmp_path, "")
    return str(request.getfixturevalue("postgres_url"))
