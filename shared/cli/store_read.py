"""Reading the decisions database from the admin commands (``hylo jobs``, ``hylo job``, ``hylo status``).

Why not ``migrated_engine``: these commands only read. They open an existing store as it is (a SQLite
file that does not exist is an error, never a new empty file), run one read function on one
connection, and turn any failure (an unreachable server, a file that is not a database, a store
never migrated) into one line. The SQL lives with the query API (``shared.query.queries``) where it
exists; ``jobs_query`` holds the one listing it lacks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.cli.common import existing_database, fail

T = TypeVar("T")


def read_store(database: str | None, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """``work`` on a connection to the existing store named by ``--database`` (or HYLO_DATABASE_URL)."""
    from shared.store import create_engine
    from shared.store.settings import safe_url

    url = existing_database(database)

    async def main() -> T:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return await work(conn)
        except typer.Exit:
            raise
        except Exception as err:  # unreachable, not a database, never migrated
            raise fail(
                f"cannot read the database {safe_url(url)}: {type(err).__name__}: {err} (a store "
                "written by hylo run/up, or migrated with python -m shared.store.migrate)"
            ) from None
        finally:
            await engine.dispose()

    return asyncio.run(main())


async def choose_cluster(conn: AsyncConnection, cluster: str | None) -> str | None:
    """``--cluster`` checked against the store, or else the store's only cluster (None when it has
    none); a store with several asks for ``--cluster``."""
    from shared.query.queries import cluster_exists, known_clusters

    if cluster is not None:
        if not await cluster_exists(conn, cluster):
            known = await known_clusters(conn)
            raise fail(f"--cluster {cluster!r}: not in the store (known: {', '.join(known) or 'none'})")
        return cluster
    known = await known_clusters(conn)
    if len(known) > 1:
        raise fail(f"the store holds several clusters ({', '.join(known)}): pass --cluster NAME")
    return known[0] if known else None
