"""``store_unavailable`` on real errors: an outage is retried, a bad write is not."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import text

from services.adapter_sim.stack import free_port
from shared.store import create_engine
from shared.store.outage import store_unavailable


async def _error(url: str, sql: str) -> BaseException:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    except Exception as err:
        return err
    finally:
        await engine.dispose()
    raise AssertionError("no error")


@pytest.mark.asyncio
async def test_a_refused_connection_is_an_outage() -> None:
    err = await _error(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/x", "SELECT 1")
    assert store_unavailable(err), repr(err)


def test_a_locked_sqlite_file_is_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (a INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the file
    engine = sqlalchemy.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught, engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        assert store_unavailable(caught.value)
    finally:
        engine.dispose()
        holder.close()


@pytest.mark.asyncio
async def test_bad_writes_are_not_outages(tmp_path: Path, postgres_url: str) -> None:
    sqlite_url = f"sqlite+aiosqlite:///{tmp_path / 'bad.db'}"
    missing = await _error(sqlite_url, "INSERT INTO nowhere VALUES (1)")  # an OperationalError too
    assert isinstance(missing, sqlalchemy.exc.OperationalError) and not store_unavailable(missing)
    engine = create_engine(postgres_url)
    table = f"t_{free_port()}"
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"CREATE TABLE {table} (a INTEGER UNIQUE)"))
            await conn.execute(text(f"INSERT INTO {table} VALUES (1)"))
    finally:
        await engine.dispose()
    try:
        duplicate = await _error(postgres_url, f"INSERT INTO {table} VALUES (1)")
        assert isinstance(duplicate, sqlalchemy.exc.IntegrityError) and not store_unavailable(duplicate)
        syntax = await _error(postgres_url, "SELEC 1")
        assert not store_unavailable(syntax)
    finally:
        await _drop(postgres_url, table)


async def _drop(url: str, table: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
    finally:
        await engine.dispose()
