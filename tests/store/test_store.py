"""Migrations, insert-or-ignore idempotence and the analyst views, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, inspect, select, text

from shared.store import (
    Base,
    Decision,
    ModelVersionRow,
    Outcome,
    create_engine,
    current_revision,
    downgrade,
    head_revision,
    record_decision,
    record_model_version,
    record_outcome,
    upgrade,
    upgrade_url,
)
from tests.schemas.message_factories import decision, model_version, outcome
from tests.store.conftest import DIALECTS
from tests.store.store_helpers import migrated, seed, url_for

TABLES = {"clusters", "jobs", "decisions", "outcomes", "model_versions"}
VIEWS = {"decision_outcomes", "latest_decision_per_job", "model_version_outcomes", "shadow_vs_applied"}


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("fresh_postgres_url"))


def unique_cluster() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


@pytest.mark.asyncio
async def test_migrations_up_down_up_match_the_models(empty_url: str) -> None:
    engine = create_engine(empty_url)
    assert await current_revision(engine) is None
    await upgrade(engine)
    await upgrade(engine)  # already at head: nothing to do
    assert await current_revision(engine) == head_revision()

    def schema(sync_conn: object) -> tuple[set[str], set[str], list[object]]:
        insp = inspect(sync_conn)
        diff = compare_metadata(MigrationContext.configure(sync_conn), Base.metadata)  # type: ignore[arg-type]
        return set(insp.get_table_names()), set(insp.get_view_names()), diff

    async with engine.connect() as conn:
        tables, views, diff = await conn.run_sync(schema)
    assert tables >= TABLES and views == VIEWS
    assert diff == [], f"migration and ORM models disagree: {diff}"
    await downgrade(engine)
    async with engine.connect() as conn:
        tables, views, _ = await conn.run_sync(schema)
    assert not (TABLES & tables) and not views
    await upgrade(engine)
    assert await current_revision(engine) == head_revision()
    await engine.dispose()


@pytest.mark.asyncio
async def test_insert_or_ignore_makes_every_write_idempotent(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = unique_cluster()
    d = decision(cluster=cluster, correlation_id=f"{cluster}-a")
    o = outcome(cluster=cluster, job_id="j0", correlation_id=f"{cluster}-a")
    m = model_version(cluster=cluster, version=f"{cluster}-v")
    async with engine.begin() as conn:
        assert await record_decision(conn, d) == 3
        assert await record_outcome(conn, o) is True
        assert await record_model_version(conn, m) is True
    async with engine.begin() as conn:  # a redelivery after a restart
        assert await record_decision(conn, d) == 0
        assert await record_outcome(conn, o) is False
        promoted = m.model_copy(update={"status": "current", "promoted_at": m.created_at})
        assert await record_model_version(conn, promoted) is False
    async with engine.connect() as conn:
        n_dec = await conn.scalar(
            select(func.count()).select_from(Decision).where(Decision.cluster == cluster)
        )
        n_out = await conn.scalar(select(func.count()).select_from(Outcome).where(Outcome.cluster == cluster))
        status = await conn.scalar(select(ModelVersionRow.status).where(ModelVersionRow.version == m.version))
    assert (n_dec, n_out, status) == (3, 1, "current")
    await engine.dispose()


@pytest.mark.asyncio
async def test_concurrent_duplicate_writers_store_one_copy(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = unique_cluster()
    d = decision(cluster=cluster, correlation_id=f"{cluster}-a", jobs=tuple(f"j{i}" for i in range(200)))

    async def write() -> int:
        async with engine.begin() as conn:
            return await record_decision(conn, d)

    results = await asyncio.gather(*(write() for _ in range(4)))
    assert sorted(results) == [0, 0, 0, 200]
    async with engine.connect() as conn:
        n = await conn.scalar(select(func.count()).select_from(Decision).where(Decision.cluster == cluster))
    assert n == 200
    await engine.dispose()


@pytest.mark.asyncio
async def test_views_join_decisions_to_outcomes(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = unique_cluster()
    await seed(engine, cluster)
    params = {"c": cluster}
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT job_id, sequence, started_job, wait_s FROM decision_outcomes "
                    "WHERE cluster = :c ORDER BY job_id, sequence"
                ),
                params,
            )
        ).all()
        latest = (
            await conn.execute(
                text(
                    "SELECT job_id, sequence, policy FROM latest_decision_per_job WHERE cluster = :c ORDER BY job_id"
                ),
                params,
            )
        ).all()
        summary = (
            await conn.execute(
                text(
                    "SELECT decided_by, jobs, mean_wait_s FROM model_version_outcomes "
                    "WHERE decided_by = :m OR decided_by = 'policy:fcfs'"
                ),
                {"m": f"{cluster}-m1"},
            )
        ).all()
    assert [(r.job_id, r.sequence, r.started_job, r.wait_s) for r in rows] == [
        ("j0", 1, 1, 101.0),
        ("j1", 1, 1, 101.0),
        ("j2", 1, 0, 101.0),
        ("j2", 2, 1, 101.0),
        ("j3", 1, 0, None),
        ("j3", 2, 0, None),
    ]
    assert [(r.job_id, r.sequence, r.policy) for r in latest] == [
        ("j0", 1, "model"),
        ("j1", 1, "model"),
        ("j2", 2, "fcfs"),
        ("j3", 2, "fcfs"),
    ]
    by = {r.decided_by: r for r in summary}
    assert by[f"{cluster}-m1"].jobs == 2 and by[f"{cluster}-m1"].mean_wait_s == pytest.approx(101.0)
    assert by["policy:fcfs"].jobs >= 1
    await engine.dispose()


def test_synchronous_upgrade_for_scripts(tmp_path: Path) -> None:
    url = url_for("sqlite", tmp_path, "")
    upgrade_url(url)
    upgrade_url(url)  # idempotent

    async def revision() -> str | None:
        engine = create_engine(url)
        try:
            return await current_revision(engine)
        finally:
            await engine.dispose()

    assert asyncio.run(revision()) == head_revision()
