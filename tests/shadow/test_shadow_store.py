"""Shadow priorities in the store: written exactly once, and the view ``shadow_vs_applied``.

Real SQLite and PostgreSQL; the recorder test runs the placer's ``record`` role as in production
(``ServiceRuntime``) on a real NATS and delivers one message twice under different message ids (the
stream keeps both, as after a crash between the write and the ack), which must store one copy.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.placer.service import DEFINITION as PLACER
from shared.schemas import ShadowPriorities, encode
from shared.store import (
    ShadowPriority,
    create_engine,
    record_decision,
    record_outcome,
    record_shadow,
    shadow_ranks,
    upgrade,
)
from shared.store.models import table_of
from tests.conftest_services import Bus
from tests.schemas.message_factories import decision, outcome
from tests.shadow.shadow_helpers import running, spec_file

DIALECTS = ["sqlite", "postgresql"]
SHADOWS = table_of(ShadowPriority)


@pytest.fixture(params=DIALECTS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


async def migrated(url: str) -> AsyncEngine:
    engine = create_engine(url)
    await upgrade(engine)
    return engine


def shadow(
    cluster: str,
    correlation_id: str,
    job_ids: tuple[str, ...],
    priorities: tuple[float, ...],
    version: str = "m-shadow",
    fallback: str | None = None,
    sequence: int = 1,
) -> ShadowPriorities:
    return ShadowPriorities(
        cluster=cluster,
        correlation_id=correlation_id,
        snapshot_time=100.0 + sequence,
        sequence=sequence,
        model_version=version,
        applied_policy="model",
        applied_model_version="m-1",
        job_ids=job_ids,
        priorities=priorities,
        fallback=fallback,
        latencies_ms={"shadow": 1.5},
    )


def test_shadow_ranks_are_priority_descending_with_ties_in_row_order() -> None:
    assert shadow_ranks([1.0, 4.0, 2.0, 3.0]) == [3, 0, 2, 1]
    assert shadow_ranks([2.0, 5.0, 2.0]) == [1, 0, 2]
    assert shadow_ranks([]) == []


def test_a_shadow_message_is_priorities_or_a_reason_never_both() -> None:
    with pytest.raises(ValueError, match="priorities has 2 entries, expected 3"):
        shadow("c1", "s1", ("a", "b", "c"), (1.0, 2.0))
    with pytest.raises(ValueError, match="expected none with a fallback"):
        shadow("c1", "s1", ("a",), (1.0,), fallback="model m busy")
    with pytest.raises(ValueError, match="job_ids must be unique"):
        shadow("c1", "s1", ("a", "a"), (1.0, 2.0))
    assert shadow("c1", "s1", ("a", "b"), (), fallback="no model loaded").priorities == ()


@pytest.mark.asyncio
async def test_view_puts_each_shadow_rank_beside_the_applied_rank_and_the_outcome(store_url: str) -> None:
    cluster = f"c-{uuid.uuid4().hex[:10]}"
    engine = await migrated(store_url)
    try:
        jobs = ("j0", "j1", "j2", "j3")
        async with engine.begin() as conn:
            # applied order of snapshot s1: j0, j1, j2, j3 (ranks 0..3; the factory's decision)
            await record_decision(conn, decision(cluster, f"{cluster}-s1", jobs, "m-1", 1))
            # shadow priorities 1, 4, 2, 3 -> shadow order j1, j3, j2, j0
            assert (
                await record_shadow(conn, shadow(cluster, f"{cluster}-s1", jobs, (1.0, 4.0, 2.0, 3.0))) == 4
            )
            assert (
                await record_shadow(conn, shadow(cluster, f"{cluster}-s1", jobs, (1.0, 4.0, 2.0, 3.0))) == 0
            )
            # a second shadow version of the same snapshot keeps rows of its own
            assert (
                await record_shadow(conn, shadow(cluster, f"{cluster}-s1", ("j0",), (7.0,), "m-other")) == 1
            )
            # a shadow that could not score stores nothing
            fell = shadow(cluster, f"{cluster}-s1", jobs, (), "m-third", fallback="model m-third busy")
            assert await record_shadow(conn, fell) == 0
            # a snapshot whose applied decision was never stored (a stale vector): applied rank NULL
            assert (
                await record_shadow(conn, shadow(cluster, f"{cluster}-s9", ("j5",), (1.0,), sequence=9)) == 1
            )
            # j0 started by s1's decision (wait 101 s); j1 finished, started by another snapshot
            await record_outcome(conn, outcome(cluster=cluster, job_id="j0", correlation_id=f"{cluster}-s1"))
            await record_outcome(conn, outcome(cluster=cluster, job_id="j1", correlation_id=f"{cluster}-s2"))
        sql = text(
            "SELECT correlation_id, job_id, shadow_version, shadow_rank, applied_rank, rank_shift, "
            "applied_policy, applied_model_version, wait_s, started_job FROM shadow_vs_applied "
            "WHERE cluster = :cluster ORDER BY shadow_version, correlation_id, shadow_rank"
        )
        async with engine.connect() as conn:
            rows = [tuple(r) for r in await conn.execute(sql, {"cluster": cluster})]
        s1, s9 = f"{cluster}-s1", f"{cluster}-s9"
        assert rows == [
            (s1, "j0", "m-other", 0, 0, 0, "model", "m-1", 101.0, 1),
            (s1, "j1", "m-shadow", 0, 1, 1, "model", "m-1", 101.0, 0),
            (s1, "j3", "m-shadow", 1, 3, 2, "model", "m-1", None, 0),
            (s1, "j2", "m-shadow", 2, 2, 0, "model", "m-1", None, 0),
            (s1, "j0", "m-shadow", 3, 0, -3, "model", "m-1", 101.0, 1),
            (s9, "j5", "m-shadow", 0, None, None, "model", "m-1", None, 0),
        ]
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_recorder_stores_shadow_rows_exactly_once_under_redelivery(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYLO_PLACER_ROLE", "record")
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    engine = await migrated(url)
    message = shadow("c1", "s1", ("a", "b", "c"), (2.0, 3.0, 1.0))
    subject = bus.subjects.of("c1", "shadows")

    async def rows() -> list[tuple[Any, ...]]:
        stmt = select(SHADOWS.c.job_id, SHADOWS.c.rank, SHADOWS.c.priority).order_by(SHADOWS.c.rank)
        async with engine.connect() as conn:
            return [tuple(r) for r in await conn.execute(stmt)]

    async def count() -> int:
        async with engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(SHADOWS))).scalar_one())

    try:
        async with running((PLACER,), bus.settings, bus.subjects, spec_file(tmp_path), database_url=url):
            await bus.publisher.publish(message)
            # the same payload again under another message id: the stream keeps it, the recorder
            # sees it a second time (as after a crash between its write and its ack)
            ack = await bus.js.publish(subject, encode(message), headers={"Nats-Msg-Id": "again-1"})
            assert not ack.duplicate
            # and a later message, so we know when the recorder is past the redelivered one
            await bus.publisher.publish(shadow("c1", "s2", ("z",), (1.0,), sequence=2))
            for _ in range(300):
                if await count() >= 4:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
        assert await count() == 4
        assert [r for r in await rows() if r[0] != "z"] == [("b", 0, 3.0), ("a", 1, 2.0), ("c", 2, 1.0)]
    finally:
        await engine.dispose()
