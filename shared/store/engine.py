"""Async engines for PostgreSQL (asyncpg) and SQLite (aiosqlite).

Why the SQLite pragmas: SQLite ignores foreign keys unless asked, and its default rollback journal
blocks readers during writes; WAL lets the query API read while the services write.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

#: seconds to open a PostgreSQL connection before the attempt counts as the store being unavailable
CONNECT_TIMEOUT_S = 10.0


def create_engine(url: str, echo: bool = False) -> AsyncEngine:
    """An AsyncEngine for ``url``; SQLite connections get foreign keys, WAL and a busy timeout."""
    connect_args: dict[str, Any] = {}
    if url.startswith("postgresql+asyncpg"):
        # asyncpg waits 60 s for a server that does not answer (a network partition, not a refusal):
        # a recorder's write then holds its batch for a minute instead of going back to JetStream
        connect_args["timeout"] = CONNECT_TIMEOUT_S
    engine = create_async_engine(url, echo=echo, connect_args=connect_args)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            if ":memory:" not in url:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()

    return engine
