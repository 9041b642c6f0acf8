"""What the store keeps beside the decision and job rows (migrations 0008, 0009), recomputed from them.

``disagreements`` compares ``outcomes.decision_*`` with the decision row each outcome names (the join
the readers made before 0008), ``outcomes.user_name`` and ``partition`` with the job's row (the join
the recipe made before 0009) and ``decision_snapshots`` with the grouped rows of ``decisions`` and
each group's first row (what the report computed before 0008); empty when they agree.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_OUTCOME_COPY = (
    "decision_time",
    "decision_policy",
    "decision_model_version",
    "decision_fallback",
    "decision_rank",
    "user_name",
    "partition",
)
_JOINED = (
    "SELECT o.cluster, o.job_id, o.decision_time, o.decision_policy, o.decision_model_version, "
    "o.decision_fallback, o.decision_rank, d.snapshot_time, d.policy, d.model_version, d.fallback, d.rank "
    "FROM outcomes o LEFT JOIN decisions d "
    "ON d.cluster = o.cluster AND d.correlation_id = o.correlation_id AND d.job_id = o.job_id "
    "WHERE o.cluster LIKE :cluster"
)
_JOB_JOINED = (
    "SELECT o.cluster, o.job_id, o.user_name, o.partition, j.user_name, j.partition "
    "FROM outcomes o LEFT JOIN jobs j ON j.cluster = o.cluster AND j.job_id = o.job_id "
    "WHERE o.cluster LIKE :cluster"
)
_GROUPED = (
    "SELECT g.cluster, g.snapshot_time, g.correlation_id, f.sequence, f.policy, f.model_version, f.fallback, "
    "f.latencies_ms, f.latency_ms, g.n, g.placed, g.first_id FROM ("
    "SELECT cluster, snapshot_time, correlation_id, COUNT(*) AS n, "
    "SUM(CASE WHEN placed THEN 1 ELSE 0 END) AS placed, MIN(id) AS first_id FROM decisions "
    "WHERE cluster LIKE :cluster GROUP BY cluster, snapshot_time, correlation_id) g "
    "JOIN decisions f ON f.id = g.first_id"
)
_SUMMARIES = (
    "SELECT cluster, snapshot_time, correlation_id, sequence, policy, model_version, fallback, latencies_ms, "
    "latency_ms, decision_rows, placed_rows, first_decision_id FROM decision_snapshots WHERE cluster LIKE :cluster"
)


def _plain(row: Any) -> tuple[Any, ...]:
    """A row with JSON parsed (SQLite returns text, PostgreSQL a dict) and numbers as Python's."""
    out = []
    for v in row:
        if isinstance(v, str) and v.startswith("{"):
            v = json.loads(v)
        out.append(json.dumps(v, sort_keys=True) if isinstance(v, dict) else v)
    return tuple(out)


async def disagreements(
    conn: AsyncConnection, *, cluster: str = "%", kept_after_retention: bool = False
) -> list[str]:
    """Where the copies differ from the decision rows, for ``cluster`` (a LIKE pattern: every cluster by
    default, for a database of the test's own). ``kept_after_retention``: an outcome whose decision row
    is gone (retention) may keep its copy."""
    out = []
    where = {"cluster": cluster}
    for r in (await conn.execute(text(_JOINED), where)).all():
        copy, row = tuple(r[2:7]), tuple(r[7:12])
        if row == (None,) * 5 and kept_after_retention:
            continue
        if copy != row:
            out.append(f"outcome {r[0]}/{r[1]}: copy {copy}, decision row {row}")
    for r in (await conn.execute(text(_JOB_JOINED), where)).all():
        if tuple(r[2:4]) != tuple(r[4:6]):
            out.append(f"outcome {r[0]}/{r[1]}: copy {tuple(r[2:4])}, job row {tuple(r[4:6])}")
    grouped = {tuple(r[:3]): _plain(r) for r in (await conn.execute(text(_GROUPED), where)).all()}
    summaries = {tuple(r[:3]): _plain(r) for r in (await conn.execute(text(_SUMMARIES), where)).all()}
    for key in sorted(set(grouped) | set(summaries), key=repr):
        if grouped.get(key) != summaries.get(key):
            out.append(f"snapshot {key}: summary {summaries.get(key)}, rows {grouped.get(key)}")
    return out


async def copies(
    conn: AsyncConnection, cluster: str = "%"
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The outcomes' copies and the summaries (of ``cluster``, a LIKE pattern), sorted: to compare two
    states of one store."""
    columns = ", ".join(_OUTCOME_COPY)
    where = {"cluster": cluster}
    sql = f"SELECT cluster, job_id, {columns} FROM outcomes WHERE cluster LIKE :cluster"
    outcomes = (await conn.execute(text(sql), where)).all()
    summaries = (await conn.execute(text(_SUMMARIES), where)).all()
    return sorted((tuple(r) for r in outcomes), key=repr), sorted((_plain(r) for r in summaries), key=repr)
