"""The one listing ``hylo jobs`` needs that the query API's SQL (``shared.query.queries``) lacks.

Why a job's state is derived, not stored: the store records what the pipeline saw (a job in a
queue: ``jobs``), decided (``decisions``, ``placed`` when its nodes were given) and what the cluster
reported at the end (``outcomes``). A job with an outcome is done (its status: completed, failed,
cancelled, timeout); without one it is running once a decision placed it, else pending. The
placement and the decision count are correlated subqueries on ``ix_decisions_cluster_job``, so a
listing costs one index probe per job listed, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from shared.query.queries import DECISIONS, JOBS, OUTCOMES

#: what a finished job's outcome may say (``JobOutcome.status``)
OUTCOME_STATES = ("completed", "failed", "cancelled", "timeout")
#: every ``--state`` value: the derived ones, ``done`` (any outcome) and the outcome statuses
STATES = ("pending", "running", "done", *OUTCOME_STATES)


@dataclass(frozen=True)
class JobFilter:
    """What ``hylo jobs`` selects; None = no restriction. ``since``/``until`` bound the arrival
    (cluster-clock seconds, inclusive/exclusive); ``limit`` 0 = every match."""

    cluster: str | None = None
    states: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    limit: int = 100


def _same_job(table: Any) -> ColumnElement[bool]:
    return and_(table.c.cluster == JOBS.c.cluster, table.c.job_id == JOBS.c.job_id)


def _state_clause(state: str, placed: ColumnElement[bool]) -> ColumnElement[bool]:
    status = OUTCOMES.c.status
    if state == "pending":
        return and_(status.is_(None), ~placed)
    if state == "running":
        return and_(status.is_(None), placed)
    if state == "done":
        return status.is_not(None)
    return status == state


def state_of(row: dict[str, Any]) -> str:
    """A listed row's state (see the module docstring)."""
    if row.get("status"):
        return str(row["status"])
    return "running" if row.get("placed") else "pending"


async def list_jobs(conn: AsyncConnection, where: JobFilter) -> tuple[list[dict[str, Any]], bool]:
    """The newest ``where.limit`` matching jobs, oldest first, and whether more match."""
    placed = exists().where(_same_job(DECISIONS), DECISIONS.c.placed.is_(True))
    decisions = select(func.count()).where(_same_job(DECISIONS)).scalar_subquery()
    stmt = select(
        JOBS.c.cluster,
        JOBS.c.job_id,
        JOBS.c.submit_s,
        JOBS.c.user_name,
        JOBS.c.partition,
        JOBS.c.qos,
        JOBS.c.gpus,
        JOBS.c.gpu_milli,
        JOBS.c.gpu_types,
        JOBS.c.cpus_milli,
        JOBS.c.mem_mib,
        JOBS.c.est_runtime_s,
        OUTCOMES.c.start_s,
        OUTCOMES.c.end_s,
        OUTCOMES.c.wait_s,
        OUTCOMES.c.jct_s,
        OUTCOMES.c.status,
        placed.label("placed"),
        decisions.label("decisions"),
    ).select_from(JOBS.outerjoin(OUTCOMES, _same_job(OUTCOMES)))
    if where.cluster is not None:
        stmt = stmt.where(JOBS.c.cluster == where.cluster)
    if where.users:
        stmt = stmt.where(JOBS.c.user_name.in_(where.users))
    if where.since is not None:
        stmt = stmt.where(JOBS.c.submit_s >= where.since)
    if where.until is not None:
        stmt = stmt.where(JOBS.c.submit_s < where.until)
    if where.states:
        stmt = stmt.where(or_(*(_state_clause(s, placed) for s in where.states)))
    stmt = stmt.order_by(JOBS.c.submit_s.desc(), JOBS.c.job_id.desc())
    if where.limit:
        stmt = stmt.limit(where.limit + 1)
    rows = [dict(r._mapping) for r in await conn.execute(stmt)]
    more = bool(where.limit) and len(rows) > where.limit
    rows = rows[: where.limit] if where.limit else rows
    rows.reverse()
    for row in rows:
        row["placed"] = bool(row["placed"])
        row["state"] = state_of(row)
    return rows, more


async def clusters_of_job(conn: AsyncConnection, job_id: str) -> list[str]:
    """The clusters whose store has a job of that id (ids are unique per cluster only)."""
    rows = await conn.execute(select(JOBS.c.cluster).where(JOBS.c.job_id == job_id).order_by(JOBS.c.cluster))
    return [r[0] for r in rows]
