"""Async engines for PostgreSQL (asyncpg) and SQLite (aiosqlite).

Why the SQLite pragmas: SQLite ignores foreign keys unless asked, and its default rollback journal
blocks readers during writes; WAL lets the query API read while the services write.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def create_engine(url: str, echo: bool = False) -> AsyncEngine:
    """An AsyncEngine for ``url``; SQLite connections get foreign keys, WAL and a busy timeout."""
    engine = create_async_engine(url, echo=echo)
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
