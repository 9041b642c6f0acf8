"""The SQL behind each endpoint, read-only, written once for PostgreSQL and SQLite.

Why Core queries on the ORM tables: the API reads rows and maps them to response models; it never
needs identity maps or lazy loading, and Core statements show exactly which index each query uses
(``ix_decisions_cluster_time`` for pages, ``ix_decisions_cluster_job`` for a job's history).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from shared.query.cursor import Cursor, Order
from shared.store.models import Cluster, Decision, Job, ModelVersionRow, Outcome, table_of

CLUSTERS = table_of(Cluster)
JOBS = table_of(Job)
DECISIONS = table_of(Decision)
OUTCOMES = table_of(Outcome)
MODELS = table_of(ModelVersionRow)


async def cluster_exists(conn: AsyncConnection, name: str) -> bool:
    row = await conn.execute(select(CLUSTERS.c.name).where(CLUSTERS.c.name == name))
    return row.first() is not None


async def known_clusters(conn: AsyncConnection, most: int = 20) -> list[str]:
    rows = await conn.execute(select(CLUSTERS.c.name).order_by(CLUSTERS.c.name).limit(most))
    return [r[0] for r in rows]


async def list_clusters(conn: AsyncConnection, limit: int, after: str | None = None) -> list[dict[str, Any]]:
    """Clusters by name, after ``after``, at most ``limit`` + 1 of them (the extra one says a next page
    exists), each with the time and sequence of its newest decided snapshot."""
    page = select(CLUSTERS.c.name, CLUSTERS.c.created_at, CLUSTERS.c.spec).order_by(CLUSTERS.c.name)
    if after is not None:
        page = page.where(CLUSTERS.c.name > after)
    named = page.limit(limit + 1).subquery()
    newest = (
        select(
            DECISIONS.c.cluster,
            func.max(DECISIONS.c.snapshot_time).label("last_snapshot_time"),
            func.max(DECISIONS.c.sequence).label("last_sequence"),
        )
        .where(DECISIONS.c.cluster.in_(select(named.c.name)))
        .group_by(DECISIONS.c.cluster)
        .subquery()
    )
    stmt = (
        select(
            named.c.name,
            named.c.created_at,
            named.c.spec,
            newest.c.last_snapshot_time,
            newest.c.last_sequence,
        )
        .outerjoin(newest, newest.c.cluster == named.c.name)
        .order_by(named.c.name)
    )
    return [dict(r._mapping) for r in await conn.execute(stmt)]


async def decision_page(
    conn: AsyncConnection,
    *,
    cluster: str | None,
    job_id: str | None,
    correlation_id: str | None,
    since: float | None,
    until: float | None,
    order: Order,
    after: Cursor | None,
    limit: int,
) -> tuple[list[Row[Any]], Cursor | None]:
    """One page of decision rows and the cursor of the next page (None on the last page).

    ``since`` is inclusive and ``until`` exclusive, so consecutive windows never share a row.
    """
    t, rid = DECISIONS.c.snapshot_time, DECISIONS.c.id
    where: list[ColumnElement[bool]] = []
    if cluster is not None:
        where.append(DECISIONS.c.cluster == cluster)
    if job_id is not None:
        where.append(DECISIONS.c.job_id == job_id)
    if correlation_id is not None:
        where.append(DECISIONS.c.correlation_id == correlation_id)
    if since is not None:
        where.append(t >= since)
    if until is not None:
        where.append(t < until)
    if after is not None:
        if order == "asc":
            where.append(or_(t > after.snapshot_time, and_(t == after.snapshot_time, rid > after.row_id)))
        else:
            where.append(or_(t < after.snapshot_time, and_(t == after.snapshot_time, rid < after.row_id)))
    keys = (t.asc(), rid.asc()) if order == "asc" else (t.desc(), rid.desc())
    stmt = select(DECISIONS).where(*where).order_by(*keys).limit(limit + 1)
    rows = list(await conn.execute(stmt))
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    last = rows[-1]
    return rows, Cursor(float(last.snapshot_time), int(last.id), order)


async def job_row(conn: AsyncConnection, cluster: str, job_id: str) -> Row[Any] | None:
    stmt = select(JOBS).where(JOBS.c.cluster == cluster, JOBS.c.job_id == job_id)
    return (await conn.execute(stmt)).first()


async def outcome_row(conn: AsyncConnection, cluster: str, job_id: str) -> Row[Any] | None:
    stmt = select(OUTCOMES).where(OUTCOMES.c.cluster == cluster, OUTCOMES.c.job_id == job_id)
    return (await conn.execute(stmt)).first()


async def job_history(
    conn: AsyncConnection, cluster: str, job_id: str, most: int
) -> tuple[int, Sequence[Row[Any]]]:
    """How many decisions mention the job, and the newest ``most`` of them, oldest first."""
    match = (DECISIONS.c.cluster == cluster, DECISIONS.c.job_id == job_id)
    count = (await conn.execute(select(func.count()).select_from(DECISIONS).where(*match))).scalar_one()
    stmt = (
        select(DECISIONS)
        .where(*match)
        .order_by(DECISIONS.c.sequence.desc(), DECISIONS.c.snapshot_time.desc(), DECISIONS.c.id.desc())
        .limit(most)
    )
    rows = list(await conn.execute(stmt))
    rows.reverse()
    return int(count), rows


async def list_models(
    conn: AsyncConnection,
    cluster: str | None,
    status: str | None,
    limit: int,
    after: tuple[datetime, str] | None = None,
) -> list[Row[Any]]:
    """Model versions newest first (ties by version), after the (created_at, version) ``after``, at
    most ``limit`` + 1 of them (the extra one says a next page exists)."""
    created, version = MODELS.c.created_at, MODELS.c.version
    stmt = select(MODELS).order_by(created.desc(), version).limit(limit + 1)
    if cluster is not None:
        stmt = stmt.where(MODELS.c.cluster == cluster)
    if status is not None:
        stmt = stmt.where(MODELS.c.status == status)
    if after is not None:
        stmt = stmt.where(or_(created < after[0], and_(created == after[0], version > after[1])))
    return list(await conn.execute(stmt))


async def model_row(conn: AsyncConnection, version: str) -> Row[Any] | None:
    return (await conn.execute(select(MODELS).where(MODELS.c.version == version))).first()


async def model_usage(conn: AsyncConnection, version: str) -> tuple[int, dict[str, Any] | None]:
    """Decision rows carrying the version, and its outcome summary from the analyst view."""
    count = (
        await conn.execute(
            select(func.count()).select_from(DECISIONS).where(DECISIONS.c.model_version == version)
        )
    ).scalar_one()
    summary = (
        await conn.execute(
            text(
                "SELECT jobs, mean_wait_s, mean_jct_s, mean_bsld, max_bsld, fallbacks "
                "FROM model_version_outcomes WHERE decided_by = :version"
            ),
            {"version": version},
        )
    ).first()
    return int(count), (dict(summary._mapping) if summary is not None else None)


async def ping(conn: AsyncConnection) -> None:
    await conn.execute(text("SELECT 1"))
