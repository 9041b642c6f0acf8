"""Forged-message and exit tests run against real NATS (and SQLite/PostgreSQL) servers: never mocks."""

from tests.conftest_services import bus, nats_url, pg_admin_dsn, postgres_url

__all__ = ["bus", "nats_url", "pg_admin_dsn", "postgres_url"]
