"""Simulated-adapter tests run against a real NATS server and PostgreSQL (tests/conftest_services.py)."""

from tests.conftest_services import bus, fresh_postgres_url, nats_url, pg_admin_dsn, postgres_url

__all__ = ["bus", "fresh_postgres_url", "nats_url", "pg_admin_dsn", "postgres_url"]
