"""The recorder's bulk writes (``shared.store.bulk``, issue 22 item 2) store exactly what the SQLAlchemy
insert-or-ignore stored before them, count only the rows really inserted, stay idempotent on a
redelivery, and route rows to their partition on a partitioned PostgreSQL store. Real databases: a
SQLite file and PostgreSQL.

The reference is the former write, kept here: each row as a dict through ``insert_or_ignore``, whose
JSON columns SQLAlchemy encodes value by value. Both writes run on the same store, under different
correlation ids (or clusters), and every column of their rows is compared, the JSON columns as the
text the database holds.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.schemas import JobPlacement, PlacementDecision, Placements, ShadowPriorities
from shared.schemas.snapshot import PendingJobs
from shared.store import (
    create_engine,
    ensure_cluster,
    insert_or_ignore,
    record_decision,
    record_pending,
    record_shadow,
    shadow_ranks,
    upgrade,
)
from shared.store.bulk import BulkInsert, json_rows
from shared.store.maintain import maintain
from shared.store.models import DECISION_KEY, Decision, Job, ShadowPriority, table_of
from shared.store.partitions import DAY_S, SCHEMA, name_of
from shared.store.settings import MaintenanceSettings
from shared.store.writes import placer_status
from tests.schemas.message_factories import snapshot
from tests.store.store_helpers import migrated

FEATURES = ("gpus", "wait", "cpus", "mem", "urgency", "ways")
RAW = ("pool_gpus", "pool_free_gpus")


def rich_decision(
    cluster: str, correlation_id: str, n: int, seed: int = 0, t: float = 5000.0
) -> PlacementDecision:
    """``n`` jobs with every column a decision can fill: nodes (several per job), modes, reservations,
    scores for the first half (the model's window), features and raw features with awkward floats."""
    rng = random.Random(seed)
    awkward = [0.0, -0.0, 1e-300, 5e-324, 1.7976931348623157e308, 0.1, 1 / 3, 1e16, 123456789.125]
    rows = []
    for r in range(n):
        placed = rng.random() < 0.3
        nodes = tuple(f"node-{rng.randrange(500)}" for _ in range(rng.randint(1, 3))) if placed else ()
        rows.append(
            JobPlacement(
                job_id=f"job-{seed}-{r}",
                rank=r,
                priority=float(n - r),
                nodes=tuple(dict.fromkeys(nodes)),
                mode=rng.choice(("pack", "spread")) if placed else None,
                reserved_s=None if placed or rng.random() < 0.5 else 1000.0 + rng.random() * 1e4,
                score=rng.gauss(0.0, 3.0) if r < n // 2 else None,
                features={f: rng.choice(awkward) if rng.random() < 0.3 else rng.random() for f in FEATURES},
                raw_features={f: float(rng.randrange(64)) for f in RAW},
            )
        )
    return PlacementDecision(
        cluster=cluster,
        correlation_id=correlation_id,
        snapshot_time=t,
        sequence=7,
        policy="model",
        model_version="m-bulk",
        fallback=None,
        placements=Placements.of(rows),
        placer="cp-sat",
        placer_status="OPTIMAL",
        latencies_ms={"featurize": 1.25, "prioritize": 0.5, "place": 17.0},
    )


async def former_decision_write(conn: AsyncConnection, decision: PlacementDecision) -> int:
    """The write of ``record_decision`` before the bulk path: a dict per row through SQLAlchemy."""
    cols = decision.placements
    n = len(cols)
    features: Sequence[Sequence[float]] = cols.features or ((),) * n
    raws: Sequence[Sequence[float] | None] = cols.raw_features or (None,) * n
    scores: Sequence[float | None] = cols.score or (None,) * n
    reserved: Sequence[float | None] = cols.reserved_s or (None,) * n
    fixed = {
        "correlation_id": decision.correlation_id,
        "cluster": decision.cluster,
        "snapshot_time": decision.snapshot_time,
        "sequence": decision.sequence,
        "policy": decision.policy,
        "model_version": decision.model_version,
        "fallback": decision.fallback,
        "latencies_ms": dict(decision.latencies_ms),
        "latency_ms": sum(decision.latencies_ms.values()) if decision.latencies_ms else None,
        "placer": decision.placer,
        "solver_status": decision.placer_status,
    }
    rows = [
        {
            **fixed,
            "job_id": job_id,
            "rank": rank,
            "priority": priority,
            "nodes": list(on),
            "placed": bool(on),
            "mode": mode,
            "features": dict(zip(cols.feature_columns, values, strict=True)),
            "score": score,
            "placer_status": placer_status(bool(on), when),
            "reserved_s": when,
            "raw_features": None if raw is None else dict(zip(cols.raw_feature_columns, raw, strict=True)),
        }
        for job_id, rank, priority, on, mode, values, score, when, raw in zip(
            *(cols.job_id, cols.rank, cols.priority, cols.node_lists(), cols.mode, features),
            *(scores, reserved, raws),
            strict=True,
        )
    ]
    return await insert_or_ignore(conn, table_of(Decision), rows, DECISION_KEY)


#: the JSON columns, compared as the text the database holds (PostgreSQL: jsonb's own printing)
JSON_COLUMNS = {"nodes", "features", "raw_features", "latencies_ms", "gpu_types"}


async def stored(
    conn: AsyncConnection, model: type[Any], where: str, params: dict[str, Any], skip: set[str]
) -> list[dict[str, Any]]:
    """The rows of ``model``'s table matching ``where``, by job id: every column but ``skip``."""
    table = table_of(model)
    picked = [
        f"CAST({c.name} AS TEXT) AS {c.name}" if c.name in JSON_COLUMNS else c.name
        for c in table.c
        if c.name not in skip
    ]
    query = f"SELECT {', '.join(picked)} FROM {table.name} WHERE {where} ORDER BY job_id"
    return [dict(r._mapping) for r in await conn.execute(text(query), params)]


def floats(doc: str) -> dict[str, float]:
    """A JSON object of numbers as floats (PostgreSQL prints a huge float as a long integer)."""
    return {k: float(v) for k, v in json.loads(doc).items()}


@pytest.mark.asyncio
async def test_a_decision_is_stored_as_the_sqlalchemy_write_stored_it(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = f"bulk-{uuid.uuid4().hex[:6]}"
    try:
        decision = rich_decision(cluster, f"{cluster}-a", 300)
        former = decision.model_copy(update={"correlation_id": f"{cluster}-b"})
        async with engine.begin() as conn:
            assert await record_decision(conn, decision) == 300
            assert await former_decision_write(conn, former) == 300
        async with engine.connect() as conn:
            skip = {"id", "correlation_id", "decided_at"}
            new = await stored(conn, Decision, "correlation_id = :c", {"c": f"{cluster}-a"}, skip)
            old = await stored(conn, Decision, "correlation_id = :c", {"c": f"{cluster}-b"}, skip)
        assert len(new) == len(old) == 300
        for a, b in zip(new, old, strict=True):
            assert a == b
        # what the columns hold, not only that both writes agree
        by_job = {r["job_id"]: r for r in new}
        for row in decision.placements:
            got = by_job[row.job_id]
            assert floats(got["features"]) == row.features
            assert floats(got["raw_features"]) == row.raw_features
            assert json.loads(got["nodes"]) == list(row.nodes)
            assert bool(got["placed"]) == bool(row.nodes)
            assert got["score"] == row.score and got["reserved_s"] == row.reserved_s
            assert got["placer_status"] == placer_status(bool(row.nodes), row.reserved_s)
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_an_empty_feature_table_and_no_scores_store_as_before(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = f"bare-{uuid.uuid4().hex[:6]}"
    try:
        rows = [JobPlacement(job_id=f"j{r}", rank=r, priority=float(5 - r)) for r in range(5)]
        decision = PlacementDecision(
            cluster=cluster,
            correlation_id=f"{cluster}-a",
            snapshot_time=10.0,
            sequence=1,
            policy="fcfs",
            fallback="no model loaded",
            placements=Placements.of(rows),
        )
        async with engine.begin() as conn:
            assert await record_decision(conn, decision) == 5
            former = decision.model_copy(update={"correlation_id": f"{cluster}-b"})
            assert await former_decision_write(conn, former) == 5
        async with engine.connect() as conn:
            skip = {"id", "correlation_id", "decided_at"}
            new = await stored(conn, Decision, "correlation_id = :c", {"c": f"{cluster}-a"}, skip)
            old = await stored(conn, Decision, "correlation_id = :c", {"c": f"{cluster}-b"}, skip)
        assert new == old
        assert new[0]["raw_features"] is None and new[0]["latency_ms"] is None and new[0]["score"] is None
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_jobs_and_shadow_ranks_are_stored_as_before(store_url: str) -> None:
    engine = await migrated(store_url)
    tag = uuid.uuid4().hex[:6]
    try:
        jobs = snapshot(cluster=f"new-{tag}", n_jobs=40).pending
        typed = [("A100",), (), ("V100", "T4")]
        jobs = jobs.model_copy(update={"gpu_types": tuple(typed[i % 3] for i in range(len(jobs.job_id)))})
        shadow = ShadowPriorities(
            cluster=f"new-{tag}",
            correlation_id=f"{tag}-s",
            snapshot_time=101.0,
            sequence=1,
            model_version="shadow-1",
            applied_policy="model",
            applied_model_version="m-1",
            job_ids=jobs.job_id,
            priorities=tuple(float(np.sin(i)) for i in range(len(jobs.job_id))),
        )
        async with engine.begin() as conn:
            assert await record_pending(conn, f"new-{tag}", jobs) == 40
            assert await record_pending(conn, f"new-{tag}", jobs) == 0
            assert await record_shadow(conn, shadow) == 40
            assert await record_shadow(conn, shadow) == 0
            await former_jobs_write(conn, f"old-{tag}", jobs)
            await former_shadow_write(conn, shadow.model_copy(update={"model_version": "shadow-2"}))
        async with engine.connect() as conn:
            skip = {"id", "cluster", "first_seen_at"}
            new = await stored(conn, Job, "cluster = :c", {"c": f"new-{tag}"}, skip)
            old = await stored(conn, Job, "cluster = :c", {"c": f"old-{tag}"}, skip)
            assert new == old and len(new) == 40
            skip = {"id", "model_version", "recorded_at"}
            where = "correlation_id = :c AND model_version = :m"
            ranks = await stored(conn, ShadowPriority, where, {"c": f"{tag}-s", "m": "shadow-1"}, skip)
            former = await stored(conn, ShadowPriority, where, {"c": f"{tag}-s", "m": "shadow-2"}, skip)
            assert ranks == former and len(ranks) == 40
    finally:
        await engine.dispose()


async def former_jobs_write(conn: AsyncConnection, cluster: str, jobs: PendingJobs) -> int:
    columns = ("job_id", "submit_s", "gpus", "gpu_milli", "cpus_milli", "mem_mib", "est_runtime_s")
    rows = [
        {
            "cluster": cluster,
            **{c: getattr(jobs, c)[i] for c in columns},
            "user_name": jobs.user[i],
            "partition": jobs.partition[i],
            "qos": jobs.qos[i],
            "gpu_types": list(jobs.gpu_types[i]),
        }
        for i in range(len(jobs.job_id))
    ]
    await ensure_cluster(conn, cluster)
    return await insert_or_ignore(conn, table_of(Job), rows, ["cluster", "job_id"])


async def former_shadow_write(conn: AsyncConnection, shadow: ShadowPriorities) -> int:
    ranks = shadow_ranks(shadow.priorities)
    rows = [
        {
            "cluster": shadow.cluster,
            "correlation_id": shadow.correlation_id,
            "job_id": job_id,
            "model_version": shadow.model_version,
            "snapshot_time": shadow.snapshot_time,
            "sequence": shadow.sequence,
            "rank": rank,
            "priority": priority,
            "applied_policy": shadow.applied_policy,
            "applied_model_version": shadow.applied_model_version,
        }
        for job_id, priority, rank in zip(shadow.job_ids, shadow.priorities, ranks, strict=True)
    ]
    return await insert_or_ignore(
        conn, table_of(ShadowPriority), rows, ["correlation_id", "job_id", "model_version"]
    )


@pytest.mark.asyncio
async def test_only_the_rows_the_key_does_not_turn_away_are_counted(store_url: str) -> None:
    """A redelivered decision inserts nothing; one that shares some rows with a stored one (the same
    snapshot, more jobs) inserts and counts only the others; a concurrent writer's rows stay one."""
    engine = await migrated(store_url)
    cluster = f"part-{uuid.uuid4().hex[:6]}"
    try:
        first = rich_decision(cluster, f"{cluster}-1", 10)
        wider = rich_decision(cluster, f"{cluster}-1", 25)  # same job ids for ranks 0-9, same time
        async with engine.begin() as conn:
            assert await record_decision(conn, first) == 10
        async with engine.begin() as conn:
            assert await record_decision(conn, first) == 0
            assert await record_decision(conn, wider) == 15
        async with engine.connect() as conn:
            count = await conn.execute(
                text("SELECT COUNT(*), COUNT(DISTINCT job_id) FROM decisions WHERE correlation_id = :c"),
                {"c": f"{cluster}-1"},
            )
            assert tuple(count.one()) == (25, 25)
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_a_failed_transaction_leaves_no_bulk_rows(store_url: str) -> None:
    """The bulk statement runs in the caller's transaction: rolled back with it, and a retry stores all."""
    engine = await migrated(store_url)
    cluster = f"roll-{uuid.uuid4().hex[:6]}"
    decision = rich_decision(cluster, f"{cluster}-1", 50)
    try:
        with pytest.raises(RuntimeError):
            async with engine.begin() as conn:
                assert await record_decision(conn, decision) == 50
                raise RuntimeError("the recorder's process died before the commit")
        async with engine.begin() as conn:
            assert await record_decision(conn, decision) == 50
    finally:
        await engine.dispose()


DAY0 = 2000  # a day far from the wall clock, so no partition made ahead of now covers it


@pytest.mark.asyncio
async def test_bulk_rows_land_in_their_partition_and_redeliveries_meet_them(fresh_postgres_url: str) -> None:
    engine = create_engine(fresh_postgres_url)
    try:
        await upgrade(engine)
        t = DAY0 * DAY_S + 60.0
        await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=t)
        inside = rich_decision("pt", "pt-1", 1024, seed=1, t=t)
        later = rich_decision("pt", "pt-2", 1024, seed=2, t=(DAY0 + 50) * DAY_S)
        async with engine.begin() as conn:  # two partitions' rows in one transaction
            assert await record_decision(conn, inside) == 1024
            assert await record_decision(conn, later) == 1024
        async with engine.begin() as conn:
            assert await record_decision(conn, inside) == 0
            assert await record_decision(conn, later) == 0
            query = text("SELECT DISTINCT correlation_id, tableoid::regclass::text FROM decisions")
            where: dict[str, str] = {c: p for c, p in await conn.execute(query)}
        assert where["pt-1"] == f"{SCHEMA}.{name_of(DAY0 * DAY_S, (DAY0 + 1) * DAY_S)}"
        assert where["pt-2"] == f"{SCHEMA}.decisions_default"
        # maintenance moves the default partition's rows to a partition of their own; a redelivery
        # after the move still meets them there
        await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=t)
        async with engine.begin() as conn:
            assert await record_decision(conn, later) == 0
            total = (await conn.execute(text("SELECT COUNT(*) FROM decisions"))).scalar_one()
            moved = (
                await conn.execute(
                    text(
                        "SELECT DISTINCT tableoid::regclass::text FROM decisions WHERE correlation_id = 'pt-2'"
                    )
                )
            ).scalar_one()
        assert total == 2048
        assert moved == f"{SCHEMA}.{name_of((DAY0 + 50) * DAY_S, (DAY0 + 51) * DAY_S)}"
    finally:
        await engine.dispose()


# -- the pieces ----------------------------------------------------------------------------------------


def test_json_rows_prints_what_json_dumps_prints() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal((200, 6)) * 10.0 ** rng.integers(-300, 300, (200, 6))
    values[:, 1] = np.round(values[:, 1] * 4) / 4  # a column of few distinct values
    values[0, :] = [0.0, -0.0, 5e-324, 1.7976931348623157e308, -1e16, 1 / 3]
    names = ["gpus", "100% share", 'quote"d', "caf\u00e9", "back\\slash", "wait"]
    expected = [json.dumps(dict(zip(names, row, strict=True))) for row in values.tolist()]
    assert json_rows(names, values) == expected
    assert json_rows(names, tuple(map(tuple, values.tolist()))) == expected
    assert json.loads(json_rows(names, values)[0])["100% share"] == -0.0
    assert math.copysign(1.0, json.loads(json_rows(names, values)[0])["100% share"]) == -1.0
    bad = values.copy()
    bad[3, 2] = np.inf  # never in a validated message; printed as json.dumps prints it
    assert json_rows(names, bad) == [json.dumps(dict(zip(names, r, strict=True))) for r in bad.tolist()]
    assert json_rows([], np.zeros((3, 0))) == ["{}"] * 3
    with pytest.raises(ValueError):
        json_rows(["a"], values)


@pytest.mark.asyncio
async def test_a_bulk_insert_refuses_misaligned_columns(store_url: str) -> None:
    engine = await migrated(store_url)
    spec = BulkInsert(table="clusters", key=("name",), shared=(), per_row=(("name", "text"),))
    try:
        async with engine.begin() as conn:
            assert await spec.insert(conn, (), ([],)) == 0  # nothing to write: no statement
            with pytest.raises(ValueError):
                await spec.insert(conn, ("x",), (["a"],))
            other = BulkInsert(
                table="clusters", key=("name",), shared=(), per_row=(("name", "text"), ("spec", "jsonb"))
            )
            with pytest.raises(ValueError):
                await other.insert(conn, (), (["a", "b"], [None]))
            name = f"bulk-{uuid.uuid4().hex[:6]}"
            assert await other.insert(conn, (), ([name, name + "-2"], [None, '{"nodes": 3}'])) == 2
            assert await other.insert(conn, (), ([name], [None])) == 0
            spec_of = await conn.execute(
                text("SELECT CAST(spec AS TEXT) FROM clusters WHERE name = :n"), {"n": name + "-2"}
            )
            assert json.loads(spec_of.scalar_one()) == {"nodes": 3}
    finally:
        await engine.dispose()


def test_the_bulk_writes_fill_every_column_of_their_tables() -> None:
    """A column added to a table (a migration) without its bulk write filling it fails here, instead
    of being left NULL on every row; only the key and the times the database fills are left out."""
    from shared.store.writes import DECISIONS_INSERT, JOBS_INSERT, SHADOW_INSERT

    for spec, model in ((DECISIONS_INSERT, Decision), (JOBS_INSERT, Job), (SHADOW_INSERT, ShadowPriority)):
        table = table_of(model)
        filled_by_database = {c.name for c in table.c if c.primary_key or c.server_default is not None}
        assert spec.table == table.name
        assert sorted(spec.columns) == sorted(c.name for c in table.c if c.name not in filled_by_database)
        unique = {tuple(c.name for c in u.columns) for u in table.constraints if hasattr(u, "columns")}
        assert spec.key in unique, f"{spec.table}: {spec.key} is not a unique key"
