"""Alembic environment: runs on the connection handed over by ``shared.store.migrate``.

Why a handed-over connection: the services and tests are async (asyncpg, aiosqlite); ``migrate``
opens the async engine and runs Alembic inside ``run_sync`` on that connection. Run directly by the
``alembic`` command, the environment builds its own async engine from ``sqlalchemy.url``.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from shared.store.engine import create_engine
from shared.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_url(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection and no sqlalchemy.url: use shared.store.migrate.upgrade")
    asyncio.run(_run_with_url(url))


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run against a database")
run_migrations()
