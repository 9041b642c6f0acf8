"""The decision's facts kept where long reads look (migration 0008, ``shared.store.derived``): each
outcome's copy of the decision that started it and ``decision_snapshots`` agree with the decision rows,
and its copy of its job's user and partition (migration 0009) with the job's row, whichever of
decision, outcome and job is recorded first, after redeliveries, after migrations 0008 and 0009 filled
them in an existing store (and back), and after retention removed raw rows. Both databases; on
PostgreSQL also an outcome and its job written by two transactions at once.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.schemas import JobOutcome, PendingJob, PendingJobs
from shared.store import (
    create_engine,
    current_revision,
    downgrade,
    ensure_cluster,
    head_revision,
    record_decision,
    record_outcome,
    record_pending,
    upgrade,
)
from shared.store.models import PER_MODEL_READ, PER_USER_READ
from tests.store.analyst_seed import JOBS, seed_history
from tests.store.conftest import DIALECTS
from tests.store.derived_check import copies, disagreements
from tests.store.store_helpers import migrated, url_for


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("fresh_postgres_url"))


#: the orders the seed's messages are recorded in: (outcomes before decisions, jobs after both)
ORDERS = pytest.mark.parametrize(
    ("outcomes_first", "jobs_last"),
    [(False, False), (True, False), (True, True)],
    ids=["decisions-first", "outcomes-first", "jobs-last"],
)


@pytest.mark.asyncio
@ORDERS
async def test_the_copies_agree_with_the_decision_rows(
    store_url: str, outcomes_first: bool, jobs_last: bool
) -> None:
    engine = await migrated(store_url)
    cluster = f"d-{uuid.uuid4().hex[:10]}"
    try:
        history = await seed_history(engine, cluster, outcomes_first=outcomes_first, jobs_last=jobs_last)
        async with engine.connect() as conn:
            assert await disagreements(conn, cluster=cluster) == []
            users = (
                await conn.execute(
                    text(
                        "SELECT job_id, user_name, partition FROM outcomes WHERE cluster = :c ORDER BY job_id"
                    ),
                    {"c": cluster},
                )
            ).all()
            started = (
                await conn.execute(
                    text(
                        "SELECT job_id, decision_model_version, decision_policy, decision_rank FROM outcomes "
                        "WHERE cluster = :c ORDER BY job_id"
                    ),
                    {"c": cluster},
                )
            ).all()
            snapshots = (
                await conn.execute(
                    text(
                        "SELECT correlation_id, decision_rows, placed_rows FROM decision_snapshots "
                        "WHERE cluster = :c ORDER BY snapshot_time"
                    ),
                    {"c": cluster},
                )
            ).all()
            before = await copies(conn, cluster)
        # what the seed says (tests/store/analyst_seed.py): j4, j7 and j9 were started by s4, which
        # has no stored decision; j3 ranked first by the registered model in s1, j1 first in s3
        assert [tuple(r) for r in started] == [
            ("j0", f"m-{cluster}", "model", 2),
            ("j1", None, "fcfs", 0),
            ("j2", f"file-{cluster}", "model", 0),
            ("j3", f"m-{cluster}", "model", 0),
            ("j4", None, None, None),
            ("j5", f"file-{cluster}", "model", 3),
            ("j6", None, "fcfs", 2),
            ("j7", None, None, None),
            ("j9", None, None, None),
        ]
        assert [tuple(r) for r in snapshots] == [
            (history.corr("s1"), 4, 2),
            (history.corr("s2"), 4, 2),
            (history.corr("s3"), 5, 2),
        ]
        # every finished job has its user and partition (j8 is still waiting), as the seed wrote them
        assert [tuple(r) for r in users] == [
            (job, JOBS[job][2], JOBS[job][3]) for job in sorted(JOBS) if job in history.outcomes
        ]
        # every message again (a redelivery): nothing new, nothing changed
        async with engine.begin() as conn:
            assert await record_pending(conn, cluster, history.jobs) == 0
            for d in history.decisions.values():
                assert await record_decision(conn, d) == 0
            for o in history.outcomes.values():
                assert not await record_outcome(conn, o)
        async with engine.connect() as conn:
            assert await copies(conn, cluster) == before
    finally:
        await engine.dispose()


def _covered(conn: Connection) -> dict[str, list[str]]:
    """The columns the indexes of ``outcomes`` on a period hold besides their key (PostgreSQL's
    ``INCLUDE``)."""
    names = ("ix_outcomes_cluster_start", "ix_outcomes_cluster_decision")
    return {
        x["name"]: list(x.get("dialect_options", {}).get("postgresql_include", []))
        for x in conn.dialect.get_indexes(conn, "outcomes")
        if x["name"] in names
    }


@pytest.mark.asyncio
async def test_migration_0008_fills_an_existing_store_and_goes_back(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade(engine)
        await seed_history(engine, "migrated-first")
        await seed_history(engine, "migrated-second", outcomes_first=True)
        await seed_history(engine, "migrated-third", outcomes_first=True, jobs_last=True)
        async with engine.connect() as conn:
            written = await copies(conn)
        await downgrade(engine, "0008")  # a store of 0008 with rows: 0009 copies the jobs' columns
        async with engine.connect() as conn:
            columns = await conn.run_sync(lambda c: [x["name"] for x in c.dialect.get_columns(c, "outcomes")])
            indexes = await conn.run_sync(lambda c: [x["name"] for x in c.dialect.get_indexes(c, "outcomes")])
        assert "user_name" not in columns and "partition" not in columns and "decision_time" in columns
        assert "ix_outcomes_unnamed" not in indexes
        async with engine.connect() as conn:
            assert await conn.run_sync(_covered) == {
                "ix_outcomes_cluster_start": [],
                "ix_outcomes_cluster_decision": [],
            }
        await upgrade(engine)
        async with engine.connect() as conn:
            assert await copies(conn) == written
            assert await disagreements(conn) == []
            # PostgreSQL: the recipes per user and per model version read an index alone
            pg = conn.dialect.name == "postgresql"
            assert await conn.run_sync(_covered) == {
                "ix_outcomes_cluster_start": list(PER_USER_READ) if pg else [],
                "ix_outcomes_cluster_decision": list(PER_MODEL_READ) if pg else [],
            }
        await downgrade(engine, "0007")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: c.dialect.get_table_names(c))
            columns = await conn.run_sync(lambda c: [x["name"] for x in c.dialect.get_columns(c, "outcomes")])
        assert "decision_snapshots" not in tables and "decision_time" not in columns
        await upgrade(engine)  # a store of 0007 with rows: the migration computes what the writes wrote
        assert await current_revision(engine) == head_revision() == "0009"
        async with engine.connect() as conn:
            assert await copies(conn) == written
            assert await disagreements(conn) == []
            assert len(written[1]) == 9 and sum(r[2] is not None for r in written[0]) == 18
            # every outcome has a job row in the seed: each got its user
            assert sum(r[-2] is not None for r in written[0]) == 27
    finally:
        await engine.dispose()


@pytest.mark.asyncio
@pytest.mark.parametrize("outcome_first", [True, False], ids=["outcome-in-flight", "job-in-flight"])
async def test_an_outcome_and_its_job_written_at_once_meet(postgres_url: str, outcome_first: bool) -> None:
    """PostgreSQL: the outcome and its job's row written by two transactions at once, the second
    started while the first is uncommitted. Each reads the other's table before the other commits, so
    without the cluster's lock (``derived.JOBS_LOCK_CLASS``) neither sees the other's row and the
    outcome keeps no user; with it the second waits for the first and then fills the columns."""
    engine = await migrated(postgres_url)
    cluster = f"l-{uuid.uuid4().hex[:10]}"
    jobs = PendingJobs.of(
        [PendingJob(job_id="j0", submit_s=100.0, gpus=1, est_runtime_s=60.0, user="alice", partition="gpu")]
    )
    done = JobOutcome(
        cluster=cluster,
        correlation_id=f"{cluster}-s1",
        job_id="j0",
        submit_s=100.0,
        start_s=200.0,
        end_s=300.0,
        gpus=1,
    )

    async def write_outcome(conn: AsyncConnection) -> None:
        assert await record_outcome(conn, done)

    async def write_job(conn: AsyncConnection) -> None:
        assert await record_pending(conn, cluster, jobs) == 1

    first, second = (write_outcome, write_job) if outcome_first else (write_job, write_outcome)
    try:
        # the cluster's row committed first: both writes insert it (ignored), and an uncommitted one
        # would make the second wait on its key whatever the lock
        async with engine.begin() as conn:
            await ensure_cluster(conn, cluster)
        async with engine.connect() as conn:
            transaction = await conn.begin()
            await first(conn)

            async def later() -> None:
                async with engine.begin() as other:
                    await second(other)

            task = asyncio.create_task(later())
            await asyncio.sleep(0.5)
            assert not task.done(), "the second write did not wait for the first"
            await transaction.commit()
        await asyncio.wait_for(task, 30)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT user_name, partition FROM outcomes WHERE cluster = :c AND job_id = 'j0'"),
                    {"c": cluster},
                )
            ).one()
        assert tuple(row) == ("alice", "gpu")
    finally:
        await engine.dispose()
