"""Bus tests run against a private nats-server for the session (its hostile-input probes must not touch
the machine's server; ``tests/security/nats_server.py``), and PostgreSQL for storage
(tests/conftest_services.py)."""

from tests.conftest_services import bus, pg_admin_dsn, postgres_url
from tests.security.nats_server import private_nats_url

__all__ = ["bus", "pg_admin_dsn", "postgres_url", "private_nats_url"]
