"""Deploy tests use the machine's (or a throwaway) PostgreSQL for the read-only role (tests/conftest_services.py)."""

from tests.conftest_services import pg_admin_dsn

__all__ = ["pg_admin_dsn"]
