"""Report tests run against real PostgreSQL and SQLite databases (see tests/conftest_services.py)."""

from tests.conftest_services import fresh_postgres_url, pg_admin_dsn, postgres_url

__all__ = ["fresh_postgres_url", "pg_admin_dsn", "postgres_url"]
