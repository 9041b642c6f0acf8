"""Outage tests run against servers they start themselves, never the machine's shared ones: a private
nats-server for the session (``tests/security/nats_server.py``), and a throwaway PostgreSQL that each
test starts and stops itself (``pg_outage.py``); ``postgres_url`` (the machine's or a throwaway
server, tests/conftest_services.py) only holds the stores that stay up."""

from tests.conftest_services import bus, pg_admin_dsn, postgres_url
from tests.security.nats_server import private_nats_url

__all__ = ["bus", "pg_admin_dsn", "postgres_url", "private_nats_url"]
