"""Months of data (issue 22, item 4): ``decisions`` partitioned by snapshot time on PostgreSQL, the
idempotent writes still idempotent, migration 0007 up and down with rows, retention that rolls raw rows
up before dropping them (both databases), and every analyst recipe reading through an index.

PostgreSQL tests run on a database of their own (``fresh_postgres_url``): they create and drop
partitions, which a shared database's other tests would feel.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.schemas import JobOutcome, PlacementDecision
from shared.store import create_engine, current_revision, downgrade, record_decision, record_outcome, upgrade
from shared.store.maintain import main as maintain_main
from shared.store.maintain import maintain
from shared.store.partitions import DAY_S, SCHEMA, name_of, uncovered
from shared.store.settings import MaintenanceSettings
from tests.schemas.message_factories import decision
from tests.store.analyst_seed import seed_history
from tests.store.conftest import DIALECTS
from tests.store.derived_check import disagreements
from tests.store.store_helpers import url_for
from tests.store.test_analyst_recipes import recipes

#: a day far from the wall clock's now, so no partition the migration makes ahead covers it
DAY0 = 1000


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("fresh_postgres_url"))


def at(d: PlacementDecision, t: float) -> PlacementDecision:
    """The decision ``d`` made for a snapshot at time ``t``."""
    return d.model_copy(update={"snapshot_time": t})


async def where_rows_are(conn: AsyncConnection) -> dict[str, str]:
    """correlation id -> the partition holding its rows (PostgreSQL)."""
    rows = await conn.execute(text("SELECT DISTINCT correlation_id, tableoid::regclass::text FROM decisions"))
    return {c: where for c, where in rows}


async def decision_count(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT COUNT(*) FROM decisions"))).scalar_one())


# -- settings and partition arithmetic -----------------------------------------------------------------


def test_settings_read_the_environment_and_refuse_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYLO_DECISION_PARTITION_DAYS", "1")
    monkeypatch.setenv("HYLO_DECISION_RETENTION_DAYS", "30")
    settings = MaintenanceSettings()
    assert (settings.decision_partition_days, settings.decision_retention_days) == (1, 30.0)
    assert MaintenanceSettings(decision_partition_days=7).rollup_retention_days is None
    for bad in (
        {"decision_partition_days": 0},
        {"decision_retention_days": -1},
        {"decision_partitions_ahead": -1},
    ):
        with pytest.raises(ValueError):
            MaintenanceSettings(**bad)  # type: ignore[arg-type]


def test_only_the_uncovered_parts_of_a_span_become_partitions() -> None:
    from shared.store.partitions import Partition

    week = 7 * DAY_S
    have = [
        Partition(name_of(0, DAY_S), 0.0, DAY_S),
        Partition(name_of(3 * DAY_S, 4 * DAY_S), 3 * DAY_S, 4 * DAY_S),
    ]
    # a span changed from a day to a week leaves the days between and after the old partitions
    assert uncovered([(0.0, week), (0.0, week)], have) == [(DAY_S, 3 * DAY_S), (4 * DAY_S, week)]
    assert uncovered([(0.0, DAY_S)], have) == []
    assert name_of(-DAY_S, 0.0) == "decisions_m86400_0"


# -- the write path --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_redelivered_decision_is_stored_once_on_a_partitioned_store(fresh_postgres_url: str) -> None:
    engine = create_engine(fresh_postgres_url)
    try:
        await upgrade(engine)
        t = DAY0 * DAY_S + 100.0
        report = await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=t)
        assert name_of(DAY0 * DAY_S, (DAY0 + 1) * DAY_S) in report.created
        in_partition = at(decision("p", "p-1", ("j0", "j1", "j2")), t)
        in_default = at(decision("p", "p-2", ("j0", "j1")), (DAY0 + 50) * DAY_S)
        for _ in range(2):  # delivered, then redelivered
            async with engine.begin() as conn:
                await record_decision(conn, in_partition)
                await record_decision(conn, in_default)
        async with engine.connect() as conn:
            assert await decision_count(conn) == 5
            where = await where_rows_are(conn)
            assert where["p-1"] == f"{SCHEMA}.{name_of(DAY0 * DAY_S, (DAY0 + 1) * DAY_S)}"
            assert where["p-2"] == f"{SCHEMA}.decisions_default"
        # the next maintenance moves the default partition's rows into a partition of their own: a
        # redelivery after that still finds them
        report = await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=t)
        assert name_of((DAY0 + 50) * DAY_S, (DAY0 + 51) * DAY_S) in report.created
        async with engine.begin() as conn:
            assert await record_decision(conn, in_default) == 0
            assert await record_decision(conn, in_partition) == 0
        async with engine.connect() as conn:
            assert await decision_count(conn) == 5
            assert (await where_rows_are(conn))["p-2"].endswith(
                name_of((DAY0 + 50) * DAY_S, (DAY0 + 51) * DAY_S)
            )
        assert (await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=t)).created == []
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_two_maintenance_runs_at_once_take_turns(fresh_postgres_url: str) -> None:
    """The second run waits for the first (an advisory lock) and finds its work done, rather than
    failing on a partition the first created."""
    import asyncio

    engine = create_engine(fresh_postgres_url)
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            for k in range(3):
                await record_decision(conn, at(decision("m", f"m-{k}", ("j0",)), (DAY0 + 9 * k) * DAY_S))
        daily = MaintenanceSettings(decision_partition_days=1)
        first, second = await asyncio.gather(maintain(engine, daily), maintain(engine, daily))
        created = first.created + second.created
        assert len(created) == len(set(created)) == 3 + 2  # the three days with rows, two ahead
        async with engine.connect() as conn:
            assert all("default" not in where for where in (await where_rows_are(conn)).values())
    finally:
        await engine.dispose()


# -- migration 0007 with rows ------------------------------------------------------------------------

_OLD_DECISION = (
    "INSERT INTO decisions (correlation_id, cluster, job_id, snapshot_time, sequence, rank, priority, nodes, "
    "placed, policy, model_version, fallback, features, latencies_ms, latency_ms, score, placer_status) "
    "VALUES (:c, 'old', :j, :t, :s, :r, 1.0, '[]', :placed, 'model', 'v1', NULL, '{\"wait\": 0.5}', "
    "'{\"place\": 1.5}', 1.5, 0.25, 'waiting')"
)
_VIEWS = ("decision_outcomes", "latest_decision_per_job", "model_version_outcomes", "shadow_vs_applied")


async def _write_at_0006(engine: AsyncEngine) -> None:
    """Three snapshots a week apart, two jobs each, one outcome and one shadow rank, as 0006 stored them."""
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO clusters (name) VALUES ('old')"))
        for k in range(3):
            for r in range(2):
                params = {"c": f"c{k}", "j": f"j{k + r}", "t": (DAY0 + 7 * k) * DAY_S + 5, "s": k, "r": r}
                await conn.execute(text(_OLD_DECISION), {**params, "placed": r == 0})
        await conn.execute(
            text(
                "INSERT INTO outcomes (cluster, job_id, correlation_id, submit_s, start_s, end_s, wait_s, jct_s, "
                "bsld, gpus, status) VALUES ('old', 'j1', 'c1', 0, :t, :end, :t, :end, 1, 1, 'completed')"
            ),
            {"t": (DAY0 + 7) * DAY_S + 5, "end": (DAY0 + 7) * DAY_S + 15},
        )
        await conn.execute(
            text(
                "INSERT INTO shadow_priorities (cluster, correlation_id, job_id, model_version, snapshot_time, "
                "sequence, rank, priority, applied_policy, applied_model_version) "
                "VALUES ('old', 'c1', 'j2', 'v2', :t, 1, 0, 2.0, 'model', 'v1')"
            ),
            {"t": (DAY0 + 7) * DAY_S + 5},
        )


async def _snapshot_of(conn: AsyncConnection) -> dict[str, list[Any]]:
    """Every row of ``decisions`` and of each view that reads it, in a fixed order, as plain values."""
    out: dict[str, list[Any]] = {}
    for name in ("decisions", *_VIEWS):
        rows = (await conn.execute(text(f"SELECT * FROM {name}"))).all()
        plain = [
            tuple(json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v for v in r) for r in rows
        ]
        out[name] = sorted(plain, key=repr)
    return out


@pytest.mark.asyncio
async def test_migration_0007_moves_a_store_with_rows_forward_and_back(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade(engine, "0006")
        await _write_at_0006(engine)
        async with engine.connect() as conn:
            before = await _snapshot_of(conn)
        await upgrade(engine, "0007")
        async with engine.connect() as conn:
            assert await _snapshot_of(conn) == before
            if engine.dialect.name == "postgresql":
                where = await where_rows_are(conn)
                assert where == {
                    f"c{k}": f"{SCHEMA}.{name_of(*_week((DAY0 + 7 * k) * DAY_S))}" for k in range(3)
                }
        await upgrade(engine)  # today's writes fill the tables of later revisions too (0008)
        async with engine.begin() as conn:  # the writes at once, and the ids go on from the old ones
            assert await record_decision(conn, at(decision("old", "c9", ("j9",)), (DAY0 + 1) * DAY_S)) == 1
            ids = (await conn.execute(text("SELECT id FROM decisions ORDER BY id"))).scalars().all()
            assert ids == list(range(1, 8))
            await conn.execute(text("DELETE FROM decisions WHERE correlation_id = 'c9'"))
        await downgrade(engine, "0006")
        assert await current_revision(engine) == "0006"
        async with engine.connect() as conn:
            assert await _snapshot_of(conn) == before
            if engine.dialect.name == "postgresql":
                kind = await conn.execute(
                    text("SELECT relkind::text FROM pg_class WHERE relname = 'decisions'")
                )
                assert kind.scalar_one() == "r"
                assert (await conn.execute(text(f"SELECT to_regnamespace('{SCHEMA}')"))).scalar() is None
    finally:
        await engine.dispose()


def _week(t: float) -> tuple[float, float]:
    from shared.store.partitions import span_of

    return span_of(t, MaintenanceSettings().decision_partition_days)


# -- retention and roll-ups ------------------------------------------------------------------------


def _history() -> tuple[list[PlacementDecision], list[JobOutcome]]:
    """Ten days of two snapshots a day, three jobs each (the first started by that decision: a V100 or
    not reported); every third snapshot decided by the FCFS fallback."""
    decisions, outcomes = [], []
    for day in range(10):
        for half in range(2):
            k = 2 * day + half
            t = (DAY0 + day) * DAY_S + 3600.0 * (1 + 11 * half)
            jobs = (f"j{k}", f"j{k}-b", f"j{k}-c")
            d = at(decision("r", f"r-{k}", jobs, None if k % 3 == 0 else "m-1", k), t)
            if k % 3 == 0:
                d = d.model_copy(update={"fallback": "no model loaded"})
            decisions.append(d)
            outcomes.append(
                JobOutcome(
                    cluster="r", correlation_id=f"r-{k}", job_id=jobs[0], submit_s=t - 50.0 * k, start_s=t,
                    end_s=t + 100.0, gpus=1, gpu_type="V100" if k % 2 else None,
                )
            )  # fmt: skip
    return decisions, outcomes


def _expected_rollups(
    decisions: list[PlacementDecision], outcomes: list[JobOutcome], before_day: int
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The roll-up rows of the days before ``before_day``, computed from the messages."""
    done = {o.job_id: o for o in outcomes}
    out: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for d in decisions:
        day = math.floor(d.snapshot_time / DAY_S)
        if day >= before_day:
            continue
        total = sum(d.latencies_ms.values())
        for p in d.placements:
            o = done.get(p.job_id)
            key = (
                "r",
                day,
                d.model_version or f"policy:{d.policy}",
                (o.gpu_type if o else None) or "unknown",
            )
            row = out[key]
            started = o is not None and o.correlation_id == d.correlation_id
            row["snapshots"] += p.rank == 0
            row["decision_rows"] += 1
            row["placed_rows"] += bool(p.nodes)
            row["fallback_rows"] += d.fallback is not None
            row["started_jobs"] += started
            row["started_wait_s_sum"] += o.wait_s if started and o else 0.0
            row["started_bsld_sum"] += o.bsld() if started and o else 0.0
            row["latency_snapshots"] += p.rank == 0
            row["latency_ms_sum"] += total if p.rank == 0 else 0.0
    return {k: dict(v) for k, v in out.items()}


async def _rollups(conn: AsyncConnection) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = await conn.execute(text("SELECT * FROM decision_rollups"))
    out = {}
    for r in rows:
        m = dict(r._mapping)
        out[(m["cluster"], m["day"], m["decided_by"], m["gpu_type"])] = m
    return out


def months_of_data_queries() -> list[str]:
    """The SQL blocks of ``docs/analysts.md``'s "Months of data" section."""
    from shared.config import PROJECT_ROOT

    page = (PROJECT_ROOT / "docs" / "analysts.md").read_text(encoding="utf-8")
    section = page.split("\n## Months of data", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


async def _rollup_queries_answer(engine: AsyncEngine, want: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """The page's roll-up queries give the roll-ups' totals per decider and per day (and the list of
    partitions runs on PostgreSQL)."""
    listing, per_decider, per_day = months_of_data_queries()
    by: dict[str, dict[Any, dict[str, float]]] = {"decider": defaultdict(lambda: defaultdict(float))}
    by["day"] = defaultdict(lambda: defaultdict(float))
    for (_, day, decider, _), row in want.items():
        for column, value in row.items():
            by["decider"][decider][column] += value
            by["day"][day][column] += value
    async with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            assert (await conn.execute(text(listing))).all()
        rows = (await conn.execute(text(per_decider), {"cluster": "r"})).all()
        assert [r[0] for r in rows] == sorted(by["decider"])
        for decider, jobs, mean_wait, _, _, fallbacks, n in rows:
            w = by["decider"][decider]
            assert (jobs, fallbacks, n) == (w["started_jobs"], w["fallback_rows"], w["decision_rows"])
            assert math.isclose(mean_wait, w["started_wait_s_sum"] / w["started_jobs"])
        rows = (await conn.execute(text(per_day), {"cluster": "r"})).all()
        assert [r[0] for r in rows] == sorted(by["day"])
        for day, snapshots, n, latency in rows:
            w = by["day"][day]
            assert (snapshots, n) == (w["snapshots"], w["decision_rows"])
            assert math.isclose(latency, w["latency_ms_sum"] / w["latency_snapshots"])


@pytest.mark.asyncio
async def test_retention_rolls_raw_rows_up_then_drops_them(empty_url: str) -> None:
    engine = create_engine(empty_url)
    pg = engine.dialect.name == "postgresql"
    daily = MaintenanceSettings(decision_partition_days=1, decision_partitions_ahead=0)
    keep = daily.model_copy(update={"decision_retention_days": 4.0})
    decisions, outcomes = _history()
    try:
        await upgrade(engine)
        async with engine.begin() as conn:
            for d in decisions[:12]:
                await record_decision(conn, d)
        await maintain(engine, daily)  # days 0-5 get partitions; the later ones will land in the default
        async with engine.begin() as conn:
            for d in decisions[12:]:
                await record_decision(conn, d)
            for o in outcomes:
                await record_outcome(conn, o)
        newest = decisions[-1].snapshot_time  # day 9: the cut is the start of day 5
        report = await maintain(engine, keep)
        assert report.newest == newest and report.cut == (DAY0 + 5) * DAY_S
        assert report.rolled_up_rows == 30
        if pg:  # whole partitions dropped; nothing left to delete row by row
            assert report.dropped == [name_of((DAY0 + d) * DAY_S, (DAY0 + d + 1) * DAY_S) for d in range(5)]
            assert report.deleted_rows == 0
        else:
            assert report.deleted_rows == 30
        assert report.snapshots_deleted == 10
        async with engine.connect() as conn:
            left = (await conn.execute(text("SELECT MIN(snapshot_time), COUNT(*) FROM decisions"))).one()
            assert left[0] >= (DAY0 + 5) * DAY_S and left[1] == 30
            # the snapshots' summaries went with their rows (migration 0008); the outcomes of the jobs
            # their decisions started keep who started them
            assert await disagreements(conn, kept_after_retention=True) == []
            kept = await conn.execute(
                text(
                    "SELECT COUNT(*) FROM outcomes WHERE decision_time < :cut AND decision_policy IS NOT NULL"
                ),
                {"cut": report.cut},
            )
            assert kept.scalar_one() == 10
            got = await _rollups(conn)
        want = _expected_rollups(decisions, outcomes, DAY0 + 5)
        assert set(got) == set(want)
        for key, row in want.items():
            for column, value in row.items():
                assert math.isclose(got[key][column], value, abs_tol=1e-9), (
                    key,
                    column,
                    got[key][column],
                    value,
                )
        await _rollup_queries_answer(engine, want)
        again = await maintain(engine, keep)
        assert again.rolled_up_rows == again.deleted_rows == 0 and again.dropped == []
        # roll-ups outlive raw rows, and have a retention of their own
        trimmed = await maintain(engine, keep.model_copy(update={"rollup_retention_days": 7.0}))
        async with engine.connect() as conn:
            assert trimmed.rollups_deleted == sum(1 for k in want if k[1] < DAY0 + 2)
            assert min(k[1] for k in await _rollups(conn)) == DAY0 + 2
    finally:
        await engine.dispose()


def test_the_command_maintains_a_store_and_says_what_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = url_for("sqlite", tmp_path, "")

    async def seed() -> None:
        engine = create_engine(url)
        await upgrade(engine)
        async with engine.begin() as conn:
            for d in _history()[0]:
                await record_decision(conn, d)
        await engine.dispose()

    import asyncio

    asyncio.run(seed())
    assert maintain_main(["--database", url]) == 0
    assert "decisions not partitioned" in capsys.readouterr().out
    assert maintain_main(["--database", url, "--now", str((DAY0 + 20) * DAY_S)]) == 0
    assert "retention" not in capsys.readouterr().out  # no retention set: nothing dropped
    assert maintain_main(["--database", "mysql://u@h/db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


# -- indexes ---------------------------------------------------------------------------------------


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, relation) of every node of a JSON plan that reads a table."""
    out = []
    if "Relation Name" in plan:
        out.append((plan["Node Type"], plan["Relation Name"]))
    for child in plan.get("Plans", []):
        out += _scans(child)
    return out


@pytest.mark.asyncio
async def test_every_recipe_reads_through_indexes(fresh_postgres_url: str) -> None:
    """With sequential scans priced out, a plan that still scans a table sequentially has no index for
    it: every table each recipe reads, every partition of ``decisions`` included, must be read through
    an index."""
    engine = create_engine(fresh_postgres_url)
    try:
        await upgrade(engine)
        history = await seed_history(engine, "ix")
        await maintain(engine, MaintenanceSettings(decision_partition_days=1), now=DAY0 * DAY_S)
        async with engine.begin() as conn:
            await conn.execute(text("ANALYZE"))
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            for heading, sql in recipes().items():
                params = {"cluster": history.cluster, "job_id": "j1", "since": 0.0, "until": 1e12}
                params = {k: v for k, v in params.items() if f":{k}" in sql}
                plan = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), params)).scalar_one()
                plan = plan if isinstance(plan, list) else json.loads(plan)
                scans = _scans(plan[0]["Plan"])
                assert scans, heading
                sequential = [s for s in scans if s[0] == "Seq Scan"]
                assert not sequential, f"{heading}: no index for {sequential}"
    finally:
        await engine.dispose()
