"""The security and fault suite runs against servers it starts itself, never the machine's (issue 20,
item 7): a private nats-server and a throwaway PostgreSQL for the session. Why: a probe that
forges, floods or stops a server must not touch what other tests and sessions share, and a result
must not depend on how the machine's servers happen to be configured.

The fixtures keep the names of ``tests/conftest_services.py`` (``nats_url``, ``pg_admin_dsn``), so
``bus``, ``postgres_url`` and the probes use the private servers without knowing it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest_services import _throwaway_postgres, bus, postgres_url
from tests.security.nats_server import private_nats_url

__all__ = ["bus", "pg_admin_dsn", "postgres_url", "private_nats_url"]


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL for this session, stopped and deleted at its end."""
    with _throwaway_postgres() as dsn:
        yield dsn
