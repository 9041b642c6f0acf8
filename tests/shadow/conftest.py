"""Shadow mode tests run against a real NATS, PostgreSQL and SQLite (tests/conftest_services.py)."""

from tests.conftest_services import bus, nats_url, pg_admin_dsn, postgres_url

__all__ = ["bus", "nats_url", "pg_admin_dsn", "postgres_url"]
