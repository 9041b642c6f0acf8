"""Requests for the same report share work; nothing is kept past the moment it is true.

- Two reads of the same report at the same time (same database, cluster, window) are one read: the
  second waits for the first and gets the same ``ReportData``, and the database sees the statements of
  one read. A read that ends is not kept: the next call reads again.
- A read that is cancelled (its client gone, its time limit hit) hands nothing stale to the others:
  they read for themselves.
- Figures are drawn once per distinct input: drawing the same data again takes every figure from the
  cache, and a change to one figure's numbers draws that figure alone again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from shared.report import data as report_data
from shared.report import load_report_data, render_report
from shared.report.figures import CACHE
from tests.report.report_helpers import CAPACITY, migrated, read_page, seed, unique_cluster


async def seeded(tmp_path: Path) -> tuple[Any, str]:
    engine = await migrated(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    c = unique_cluster()
    await seed(engine, c)
    return engine, c


def statements(engine: Any) -> list[str]:
    seen: list[str] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    return seen


@pytest.mark.asyncio
async def test_concurrent_reads_of_the_same_report_are_one_read(tmp_path: Path) -> None:
    engine, c = await seeded(tmp_path)

    async def read() -> report_data.ReportData:
        async with engine.connect() as conn:
            return await load_report_data(conn, cluster=c)

    seen = statements(engine)
    alone = await read()
    one_read = len(seen)
    seen.clear()
    first, second, third = await asyncio.gather(read(), read(), read())
    assert first is second is third
    assert len(seen) == one_read  # three callers, the statements of one read
    assert not report_data._IN_PROGRESS
    again = await read()  # the read ended: nothing kept
    assert again is not first and again.snapshots.count == alone.snapshots.count == 10
    _, other = await asyncio.gather(read(), _read_window(engine, c))
    assert other.snapshots.count == 3  # another window is another read
    await engine.dispose()


async def _read_window(engine: Any, c: str) -> report_data.ReportData:
    async with engine.connect() as conn:
        return await load_report_data(conn, cluster=c, since=300.0, until=600.0)


@pytest.mark.asyncio
async def test_a_cancelled_read_leaves_the_others_to_read_for_themselves(tmp_path: Path) -> None:
    engine, c = await seeded(tmp_path)

    async def read() -> report_data.ReportData:
        async with engine.connect() as conn:
            return await load_report_data(conn, cluster=c)

    leader = asyncio.ensure_future(read())
    while not report_data._IN_PROGRESS:
        await asyncio.sleep(0)
    follower = asyncio.ensure_future(read())
    await asyncio.sleep(0)
    leader.cancel()
    data = await follower
    assert leader.cancelled()
    assert data.cluster == c and data.snapshots.count == 10
    assert not report_data._IN_PROGRESS
    await engine.dispose()


@pytest.mark.asyncio
async def test_figures_are_drawn_once_per_distinct_input(tmp_path: Path) -> None:
    engine, c = await seeded(tmp_path)
    async with engine.connect() as conn:
        data = await load_report_data(conn, cluster=c)
    await engine.dispose()
    CACHE.clear()
    page = render_report(data)
    figures = len(read_page(page).images)
    assert figures == 6 and (CACHE.hits, CACHE.misses) == (0, 6)
    assert render_report(data) == page
    assert (CACHE.hits, CACHE.misses) == (6, 6)
    # a different capacity changes the utilization figure only
    other = read_page(render_report(dataclasses.replace(data, capacity_gpus=CAPACITY * 2)))
    assert (CACHE.hits, CACHE.misses) == (11, 7)
    assert other.images["fig-utilization"] != read_page(page).images["fig-utilization"]
