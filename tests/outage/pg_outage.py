"""A private PostgreSQL server a test can stop and start again: a real database outage.

Why not the shared server (127.0.0.1:5432): other tests and sessions use it; stopping it would fail
them. The server is ``bench/support/postgres.py``'s ``ThrowawayPostgres`` (a temporary directory, a
free port, removed afterwards); this module only turns "no server can be made here" into a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bench.support.postgres import PostgresUnavailable, ThrowawayPostgres


@contextmanager
def outage_postgres() -> Iterator[ThrowawayPostgres]:
    """A started throwaway server (``stop()`` takes it away, ``start()`` brings it back on the same
    port with the same data), stopped and deleted on the way out."""
    try:
        server = ThrowawayPostgres(prefix="hylo-outage-pg-")
    except PostgresUnavailable as err:
        pytest.skip(f"cannot start a throwaway PostgreSQL: {err}")
    with server:
        yield server
