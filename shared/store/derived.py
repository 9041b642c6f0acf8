"""Facts of the decision and job rows kept where long-range reads want them: on the outcome a decision
started, and in one row per decided snapshot (``decision_snapshots``).

Why (issue 22, item 4): on PostgreSQL ``decisions`` is partitioned by snapshot time, which makes reads
of a recent window cheap. Two reads were not about a window of decisions but about every finished job
or every snapshot of a long range: who decided the order that started each job (one lookup of a
decision row per job, in every partition, 10-15 s for the 400,000 jobs of a 10M-row store's 69 days),
and each snapshot's first row with its count of rows (one lookup per snapshot: together 27-37 s per
report over the whole range, ``docs/results/store-scale.md``). So the store writes those facts once,
where they are read:

- ``outcomes.decision_*``: the snapshot time, policy, model version, fallback and rank of the decision
  row that started the job (the row of the outcome's ``correlation_id`` and job). The outcome and the
  decision are recorded by separate consumers, usually the decision first, but after an outage or a
  replay of dead letters either may come first; so whichever is recorded second fills the columns:
  ``insert_outcome`` inserts a new outcome with the decision already in it (looked up where the
  decision can be, between the job's submission and start with an hour of slack, then anywhere), so
  the usual order writes each outcome row once; ``fill_outcomes_of`` after a new decision (the
  outcomes naming its snapshot that are still without one, through a partial index that holds only
  those). On PostgreSQL both first take a transaction lock on the snapshot's correlation id, so the
  two cannot both run before the other commits and each miss the other's row;
- ``decision_snapshots``: per snapshot, its rows and placed rows, its first row's id, and what its rows
  share (sequence, policy, model version, fallback, latencies): ``record_snapshot``, computed from the
  stored rows in the same transaction, so it says what the rows say;
- ``outcomes.user_name`` and ``outcomes.partition`` (migration 0009): the job's user and partition, from
  its ``jobs`` row, so that "Waits per user and virtual cluster" groups finished jobs without joining
  ``jobs``. Over a whole 10M-row store that join hashed all 400,000 jobs, and after repeated runs of one
  prepared statement PostgreSQL's generic plan did so in every worker and sorted on disk: 5.3 s
  (``docs/results/store-scale.md``). The job's row is written when the job is first seen pending, so
  it is almost always stored before the outcome, but not after an outage or a replay of dead letters;
  again whichever is recorded second fills the columns: ``insert_outcome`` reads the job's row as it
  inserts, and ``fill_outcomes_of_jobs`` after new job rows fills the outcomes of those jobs still
  without one (a partial index holds only those: usually none). On PostgreSQL the outcome's insert
  takes a shared transaction lock on its cluster and a write of new jobs the exclusive one, after its
  insert: whichever runs second sees what the first committed (two outcome writes do not wait for
  each other; a job write waits for the outcome writes in flight, which are single-row transactions).

All are idempotent: a redelivered message inserts no row and so runs none; run again, they write
the same values. Their cost to the recorder, measured beside a 1,024-row decision (load average
about 10): 1.6 ms of the process's CPU on PostgreSQL (against 13 ms for the whole write) and 2.3 ms on
SQLite (against 37 ms): three statements on PostgreSQL, two on SQLite, after each new decision.

``backfill`` computes the first two for a store written before migration 0008,
``backfill_job_columns`` the third for one written before 0009 (the migrations, and the benchmark's
generated store, call them). The decision's columns are read by the analyst recipe "Waits per model
version" and by the report (``shared.report.sql``), which no longer read decision rows for finished
jobs or per snapshot; the job's by the recipe "Waits per user and virtual cluster (partition)".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.store import partitions

#: slack (s) around "the decision that started a job was made while it was pending" (the report's
#: ``PENDING_SLACK_S``): where ``insert_outcome`` looks first, in the partitions of that span only
SLACK_S = 3600.0
#: the first key of PostgreSQL's two-key advisory locks that ``fill_*`` take per correlation id
LOCK_CLASS = 22
#: the first key of the advisory lock per cluster that outcome writes take shared and job writes
#: exclusive (the job's user and partition on its outcome)
JOBS_LOCK_CLASS = 23

#: what the outcome takes from the decision row ``d`` that started it
_SET = (
    "decision_time = d.snapshot_time, decision_policy = d.policy, decision_model_version = d.model_version, "
    "decision_fallback = d.fallback, decision_rank = d.rank"
)

# The statements of the write path are sent as the driver's SQL (``exec_driver_sql``, as
# ``shared.store.bulk`` does), with ``$n`` parameters (``?n`` on SQLite): they run with every new
# decision, and SQLAlchemy's per-statement work was a third of their cost to the recorder's CPU
# (2.2 ms against 1.6 ms per decision on PostgreSQL).
_FILL_OUTCOME = (
    f"UPDATE outcomes SET {_SET} FROM decisions d "
    "WHERE outcomes.cluster = $1 AND outcomes.job_id = $2 "
    "AND d.cluster = $1 AND d.correlation_id = $3 AND d.job_id = $2"
)

_FILL_OUTCOMES_OF = (
    f"UPDATE outcomes SET {_SET} FROM decisions d "
    "WHERE outcomes.correlation_id = $2 AND outcomes.decision_policy IS NULL "
    "AND outcomes.cluster = $1 AND d.cluster = $1 AND d.correlation_id = $2 "
    "AND d.snapshot_time = $3 AND d.job_id = outcomes.job_id"
)
_LOCK = f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, hashtext($1))"
#: an outcome's two locks in one round trip: its cluster's (shared), then its snapshot's
_LOCK_OUTCOME = (
    f"SELECT pg_advisory_xact_lock_shared({JOBS_LOCK_CLASS}, hashtext($1)), "
    f"pg_advisory_xact_lock({LOCK_CLASS}, hashtext($2))"
)
_LOCK_JOBS = f"SELECT pg_advisory_xact_lock({JOBS_LOCK_CLASS}, hashtext($1))"

#: what the outcome takes from its job's row ``j``
_SET_JOB = "user_name = j.user_name, partition = j.partition"
#: the outcomes of jobs just stored (``$2``: their ids) that were recorded before them; on SQLite the
#: ids come as a JSON list (``json_each``), SQLite having no arrays
_FILL_OUTCOMES_OF_JOBS = {
    dialect: (
        f"UPDATE outcomes SET {_SET_JOB} FROM jobs j "
        f"WHERE outcomes.cluster = $1 AND outcomes.job_id {ids} AND outcomes.user_name IS NULL "
        "AND j.cluster = $1 AND j.job_id = outcomes.job_id"
    )
    for dialect, ids in (
        ("postgresql", "= ANY($2::text[])"),
        ("sqlite", "IN (SELECT value FROM json_each($2))"),
    )
}

_COLUMNS = (
    "cluster, snapshot_time, correlation_id, sequence, policy, model_version, fallback, latencies_ms, "
    "latency_ms, decision_rows, placed_rows, first_decision_id"
)
_FIRST_ROW = (
    "f.cluster, f.snapshot_time, f.correlation_id, f.sequence, f.policy, f.model_version, f.fallback, "
    "f.latencies_ms, f.latency_ms, g.n, g.placed, g.first_id"
)
_PER_SNAPSHOT = "COUNT(*) AS n, SUM(CASE WHEN placed THEN 1 ELSE 0 END) AS placed, MIN(id) AS first_id"
_REFRESH = ", ".join(
    f"{c} = excluded.{c}"
    for c in (
        "sequence",
        "policy",
        "model_version",
        "fallback",
        "latencies_ms",
        "latency_ms",
        "decision_rows",
        "placed_rows",
        "first_decision_id",
    )
)
# ``WHERE 1 = 1``: SQLite reads ``ON CONFLICT`` after a join as the join's constraint without it
_RECORD_SNAPSHOT = (
    f"INSERT INTO decision_snapshots ({_COLUMNS}) SELECT {_FIRST_ROW} FROM ("
    f"SELECT {_PER_SNAPSHOT} FROM decisions "
    "WHERE cluster = $1 AND correlation_id = $2 AND snapshot_time = $3) g "
    "JOIN decisions f ON f.id = g.first_id AND f.snapshot_time = $3 WHERE 1 = 1 "
    f"ON CONFLICT (cluster, snapshot_time, correlation_id) DO UPDATE SET {_REFRESH}"
)


async def _run(conn: AsyncConnection, sql: str, *params: object) -> int:
    """Run one write-path statement with positional parameters; returns the rows it changed."""
    dialect = conn.dialect.name
    if dialect not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"the derived writes are written for PostgreSQL and SQLite, not {dialect}")
    statement = sql if dialect == "postgresql" else sql.replace("$", "?")
    result = await conn.exec_driver_sql(statement, params)
    return max(int(result.rowcount), 0)


async def _lock(conn: AsyncConnection, correlation_id: str) -> None:
    """PostgreSQL: hold the snapshot's lock until the transaction ends (module docstring). SQLite needs
    none: its writers take turns for whole transactions."""
    if conn.dialect.name == "postgresql":
        await conn.exec_driver_sql(_LOCK, (correlation_id,))


#: an outcome's columns as ``insert_outcome`` takes them, with their PostgreSQL types
OUTCOME_COLUMNS = (
    ("cluster", "text"),
    ("job_id", "text"),
    ("correlation_id", "text"),
    ("submit_s", "float8"),
    ("start_s", "float8"),
    ("end_s", "float8"),
    ("wait_s", "float8"),
    ("jct_s", "float8"),
    ("bsld", "float8"),
    ("gpus", "int4"),
    ("status", "text"),
    ("nodes", "jsonb"),
    ("node_gpus", "jsonb"),
    ("gpu_type", "text"),
)


def _insert_outcome(dialect: str) -> str:
    """The outcome's row, with the decision that started it when that is stored and was made while the
    job was pending (``$15``, ``$16``: the span) and its job's user and partition when its job row is
    stored, in one statement: no second version of the row."""
    n = len(OUTCOME_COLUMNS)
    values = [
        f"${i + 1}::{kind}" if dialect == "postgresql" else f"${i + 1}"
        for i, (_, kind) in enumerate(OUTCOME_COLUMNS)
    ]
    names = ", ".join(name for name, _ in OUTCOME_COLUMNS)
    return (
        f"INSERT INTO outcomes ({names}, decision_time, decision_policy, decision_model_version, "
        "decision_fallback, decision_rank, user_name, partition) "
        f"SELECT {', '.join(values)}, d.snapshot_time, d.policy, d.model_version, d.fallback, d.rank, "
        "j.user_name, j.partition "
        "FROM (SELECT 1 AS one) AS x LEFT JOIN decisions d ON d.cluster = $1 AND d.correlation_id = $3 "
        f"AND d.job_id = $2 AND d.snapshot_time >= ${n + 1} AND d.snapshot_time <= ${n + 2} "
        "LEFT JOIN jobs j ON j.cluster = $1 AND j.job_id = $2 WHERE 1 = 1 "
        "ON CONFLICT (cluster, job_id) DO NOTHING RETURNING decision_policy"
    )


_INSERT_OUTCOME = {dialect: _insert_outcome(dialect) for dialect in ("postgresql", "sqlite")}


async def insert_outcome(conn: AsyncConnection, values: Sequence[Any]) -> bool:
    """Insert a finished job (``values``: ``OUTCOME_COLUMNS``, JSON as text) unless stored; True if new.

    The row takes the decision that started the job (``decision_*``) as it is inserted, looked up where
    the decision lies when the clocks agree (made while the job was pending, give or take ``SLACK_S``:
    a span PostgreSQL plans into a few partitions); a decision stored outside that span is then looked
    up anywhere (the join by correlation id and job that the readers used to make), and one not stored
    yet fills the row when it is (``fill_outcomes_of``). Likewise the job's user and partition: from
    its stored row, or, when that is written later, by ``fill_outcomes_of_jobs``."""
    cluster, job_id, correlation_id = (str(v) for v in values[:3])
    submit_s, start_s = float(values[3]), float(values[4])
    if conn.dialect.name == "postgresql":
        await conn.exec_driver_sql(_LOCK_OUTCOME, (cluster, correlation_id))
    dialect = conn.dialect.name
    sql = _INSERT_OUTCOME[dialect] if dialect == "postgresql" else _INSERT_OUTCOME[dialect].replace("$", "?")
    params = (*values, submit_s - SLACK_S, start_s + SLACK_S)
    inserted = (await conn.exec_driver_sql(sql, params)).first()
    if inserted is None:
        return False
    if inserted[0] is None:
        await _run(conn, _FILL_OUTCOME, cluster, job_id, correlation_id)
    return True


async def fill_outcomes_of(conn: AsyncConnection, cluster: str, correlation_id: str, t: float) -> int:
    """After new rows of a decision: copy it onto the outcomes recorded before it that name its snapshot
    (usually none); returns how many."""
    await _lock(conn, correlation_id)
    return await _run(conn, _FILL_OUTCOMES_OF, cluster, correlation_id, t)


async def fill_outcomes_of_jobs(conn: AsyncConnection, cluster: str, job_ids: Sequence[str]) -> int:
    """After new rows of ``jobs``: copy each job's user and partition onto its outcome when that was
    recorded first (usually none; ``job_ids`` may include jobs stored before, whose outcomes already
    have them); returns how many outcomes.

    On PostgreSQL it first takes its cluster's lock exclusively, after the jobs' insert: an outcome
    write that read ``jobs`` before those rows were committed holds the lock shared until it commits,
    so this waits for it and then sees its row; one that starts later waits for this transaction and
    then reads the new rows itself (module docstring)."""
    if not job_ids:
        return 0
    dialect = conn.dialect.name
    if dialect == "postgresql":
        await conn.exec_driver_sql(_LOCK_JOBS, (cluster,))
        ids: object = list(job_ids)
    else:
        ids = json.dumps(list(job_ids))
    sql = _FILL_OUTCOMES_OF_JOBS["postgresql" if dialect == "postgresql" else "sqlite"]
    return await _run(conn, sql, cluster, ids)


async def record_snapshot(conn: AsyncConnection, cluster: str, correlation_id: str, t: float) -> None:
    """Write (or bring up to date) the ``decision_snapshots`` row of one snapshot from its stored rows."""
    await _run(conn, _RECORD_SNAPSHOT, cluster, correlation_id, t)


# --- a store written before migration 0008 -----------------------------------------------------------

_BACKFILL_OUTCOMES = (
    f"UPDATE outcomes SET {_SET} FROM decisions d "
    "WHERE d.cluster = outcomes.cluster AND d.correlation_id = outcomes.correlation_id "
    "AND d.job_id = outcomes.job_id"
)


def _backfill_snapshots(source: str) -> str:
    """Every snapshot of ``source`` (``decisions``, or one partition: a snapshot's rows share its time,
    so they are in one partition) into ``decision_snapshots``."""
    return (
        f"INSERT INTO decision_snapshots ({_COLUMNS}) SELECT {_FIRST_ROW} FROM ("
        f"SELECT snapshot_time AS t, {_PER_SNAPSHOT} FROM {source} "
        "GROUP BY cluster, snapshot_time, correlation_id) g "
        f"JOIN {source} f ON f.id = g.first_id AND f.snapshot_time = g.t WHERE 1 = 1 "
        f"ON CONFLICT (cluster, snapshot_time, correlation_id) DO UPDATE SET {_REFRESH}"
    )


def backfill(conn: Connection) -> tuple[int, int]:
    """Fill ``decision_snapshots`` and the outcomes' ``decision_*`` columns from the stored decision rows
    (in the caller's transaction); returns (snapshots, outcomes) written.

    On a partitioned PostgreSQL store each partition's snapshots are read on their own, so the lookup
    of each snapshot's first row by (id, time) is a plain index lookup in that partition; the outcomes
    are joined to the decisions in one statement (PostgreSQL hashes them against the covering index
    ``ix_decisions_report_jobs``, which holds every column copied)."""
    if conn.dialect.name == "postgresql" and partitions.partitioned(conn):
        sources = [p.qualified for p in partitions.partitions(conn)]
    else:
        sources = ["decisions"]
    snapshots = 0
    for source in sources:
        snapshots += int(conn.execute(text(_backfill_snapshots(source))).rowcount)
    outcomes = int(conn.execute(text(_BACKFILL_OUTCOMES)).rowcount)
    return snapshots, outcomes


_BACKFILL_JOB_COLUMNS = (
    f"UPDATE outcomes SET {_SET_JOB} FROM jobs j "
    "WHERE j.cluster = outcomes.cluster AND j.job_id = outcomes.job_id"
)


def backfill_job_columns(conn: Connection) -> int:
    """Fill the outcomes' ``user_name`` and ``partition`` from their jobs' rows (in the caller's
    transaction; migration 0009); returns how many outcomes have a job row. One join: PostgreSQL hashes
    ``jobs`` (one row per job, as ``outcomes``) against the outcomes."""
    return int(conn.execute(text(_BACKFILL_JOB_COLUMNS)).rowcount)


def forget_snapshots(conn: Connection, source: str, lo: float, hi: float) -> int:
    """Delete the ``decision_snapshots`` rows of the snapshots ``source`` (``decisions``, or one of its
    partitions) holds in ``[lo, hi)``: called just before those raw rows are removed, so the summary
    never outlives what it summarizes. Returns how many."""
    sql = (
        "DELETE FROM decision_snapshots WHERE snapshot_time >= :lo AND snapshot_time < :hi "
        f"AND EXISTS (SELECT 1 FROM {source} d WHERE d.cluster = decision_snapshots.cluster "
        "AND d.correlation_id = decision_snapshots.correlation_id "
        "AND d.snapshot_time = decision_snapshots.snapshot_time)"
    )
    return int(conn.execute(text(sql), {"lo": lo, "hi": hi}).rowcount)
