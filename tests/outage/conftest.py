"""Outage tests run against real NATS and PostgreSQL servers (tests/conftest_services.py); the
PostgreSQL that goes down is a throwaway one each test starts and stops itself (``pg_outage.py``),
never the machine's shared server."""

from tests.conftest_services import bus, nats_url, pg_admin_dsn, postgres_url

__all__ = ["bus", "nats_url", "pg_admin_dsn", "postgres_url"]
