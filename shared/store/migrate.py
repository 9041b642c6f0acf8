"""Programmatic Alembic: ``await upgrade(engine)`` brings any database to the newest schema.

Why programmatic and not an ``alembic.ini``: the migrations ship inside the package
(``shared/store/migrations``), services upgrade on start-up against whatever URL they are given, and
tests migrate fresh PostgreSQL and SQLite databases; no config file has to sit in a working directory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.store.engine import create_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config pointing at the packaged migrations (and at ``url`` when given)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    """The newest revision of the packaged migrations."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    """Migrate the database behind ``engine`` up to ``revision`` in one transaction."""

    def run(sync_conn: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = sync_conn
        command.upgrade(cfg, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def downgrade(engine: AsyncEngine, revision: str = "base") -> None:
    """Migrate down to ``revision`` (``base`` drops every table and view)."""

    def run(sync_conn: Connection) -> None:
        cfg = alembic_config()
        cfg.attributes["connection"] = sync_conn
        command.downgrade(cfg, revision)

    async with engine.begin() as conn:
        await conn.run_sync(run)


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (None before the first migration)."""

    def read(sync_conn: Connection) -> str | None:
        return MigrationContext.configure(sync_conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


def upgrade_url(url: str) -> None:
    """Synchronous entry point (command line, scripts): migrate the database at ``url`` to head."""

    async def main() -> None:
        engine = create_engine(url)
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

    asyncio.run(main())


if __name__ == "__main__":  # ``python -m shared.store.migrate``: upgrade HYLO_DATABASE_URL to head
    from shared.store.settings import StoreSettings

    upgrade_url(StoreSettings().database_url)
