"""What a report is made of, read from the store with async SQLAlchemy: aggregates, not rows.

Why aggregates: the figures and tables are computed in a worker thread (matplotlib is CPU-bound and
synchronous), so everything they need is fetched first on the async connection and handed over as
immutable data; and what is fetched must not grow with the store. A million decision rows is tens of
thousands of finished jobs and a hundred thousand shadow ranks: reading them took 20 s and hundreds
of MB per report (issue 20). The database now groups, counts and picks the order statistics
(``shared.report.sql``), through covering indexes (migration 0005), and Python receives numbers per
group, per stage and per time bin (``shared.report.aggregates``).

What is read, for one cluster and an optional window ``since <= t < until`` of the cluster clock:

- the decided snapshots (each is its first decision row, plus how many rows and placements it had):
  counted per policy / model version, their fallbacks per model version in charge and reason, and the
  per-stage latencies' distribution, overall and per time bin;
- for every finished job that *started* in the window, grouped by the decision that started it (same
  join as the view ``model_version_outcomes``; jobs whose outcome names no stored decision are
  "unattributed"): counts, means, maxima and percentiles of wait, JCT and bounded slowdown, and their
  p50 and p90 per time bin;
- for the GPU timeline, every finished job that *ran* during the window (start < until, end > since),
  as the step function of busy GPUs (or its bins, when it changes too often to draw);
- model versions of the cluster and their registry events (``model_version_events``), which are
  wall-clock and not cut by the window;
- the cluster's GPU capacity, when its spec was stored with it (``clusters.spec``);
- shadow mode (migration 0004, optional): per shadow model version, the rank agreement with the
  applied order of each compared snapshot and the waits of each order's first jobs.

Identical reads at the same time are made once: a request for the report that another request of
the same process is already reading (same engine, cluster, window) waits for that read and gets its
result (``load_report_data``), so many clients asking for the same page cost one read. On PostgreSQL
one read runs its statements on two connections of the engine side by side (``_two_sides``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy import inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.domain.cluster import ClusterSpec, SpecError, parse_cluster_spec
from shared.report import sql
from shared.report.aggregates import (
    BinnedBusy,
    BusyTimeline,
    FloatArray,
    OutcomeStats,
    ShadowSummary,
    SnapshotStats,
    time_edges_over,
)
from shared.report.sql import UNATTRIBUTED
from shared.store.models import Cluster, Decision, ModelVersionEvent, ModelVersionRow, table_of

__all__ = ["UNATTRIBUTED", "FloatArray"]

#: tables a report needs (``decision_snapshots``: migration 0008); ``model_version_events`` (migration
#: 0002) is optional
REQUIRED_TABLES = ("clusters", "decisions", "decision_snapshots", "outcomes", "model_versions")

CLUSTERS = table_of(Cluster)
DECISIONS = table_of(Decision)
MODELS = table_of(ModelVersionRow)
EVENTS = table_of(ModelVersionEvent)


class ReportError(Exception):
    """The report cannot be made as asked (unknown or ambiguous cluster, bad window)."""

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class UnknownCluster(ReportError):
    """The store does not know the cluster asked for."""


class NotMigrated(ReportError):
    """The database has no Hylo tables (never migrated): nothing to report, and nothing was created."""


def decided_by(policy: str, model_version: str | None) -> str:
    """The label used by the view ``model_version_outcomes``: the model version, else ``policy:<name>``."""
    return model_version if model_version is not None else f"policy:{policy}"


@dataclass(frozen=True)
class ModelVersionRecord:
    version: str
    status: str
    created_at: datetime
    promoted_at: datetime | None
    promoted_by: str | None
    forced: bool | None
    reason: str | None


@dataclass(frozen=True)
class ModelEventRecord:
    """One registry event; ``announced``: inferred from ``promoted_at`` of a version with no history."""

    at: datetime
    version: str
    event: str
    from_status: str | None
    to_status: str
    actor: str
    forced: bool
    reason: str | None
    announced: bool = False


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, for one cluster and window; ``cluster`` is None for an empty store."""

    cluster: str | None
    since: float | None
    until: float | None
    generated_at: datetime
    known_clusters: tuple[str, ...] = ()
    capacity_gpus: int | None = None
    capacity_source: str | None = None
    #: decided snapshots, counted and grouped (``len``: how many)
    snapshots: SnapshotStats = field(default_factory=SnapshotStats)
    #: edges of the time bins of the figures over time (``aggregates.time_edges_over``)
    edges: FloatArray = field(default_factory=lambda: np.linspace(0.0, 1.0, 2))
    #: finished jobs that started in the window, by who decided to start them
    outcomes: OutcomeStats = field(default_factory=OutcomeStats)
    #: finished jobs that ran during the window, and their busy GPUs cut to it (None: none ran in it)
    running_jobs: int = 0
    busy: BusyTimeline | BinnedBusy | None = None
    versions: tuple[ModelVersionRecord, ...] = ()
    events: tuple[ModelEventRecord, ...] = ()
    has_event_table: bool = True
    #: shadow models' rankings of the window's snapshots (empty without shadow mode or migration 0004)
    shadows: tuple[ShadowSummary, ...] = ()
    #: why there is nothing to show, when the store itself is the reason (e.g. never migrated)
    note: str | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing to draw: no decision, no finished job and no model version."""
        return not self.snapshots and not len(self.outcomes) and not self.running_jobs and not self.versions


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive timestamps (stored in UTC): make every timestamp aware."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


async def table_names(conn: AsyncConnection) -> set[str]:
    def read(sync_conn: Connection) -> set[str]:
        return set(inspect(sync_conn).get_table_names())

    return await conn.run_sync(read)


async def resolve_cluster(conn: AsyncConnection, cluster: str | None) -> tuple[str | None, tuple[str, ...]]:
    """The cluster to report on and every cluster the store knows.

    With no cluster named: the only one the store knows, or None when it knows none (an empty report);
    several is an error that lists them. A named cluster the store does not know is an error too.
    """
    known = tuple(r[0] for r in await conn.execute(select(CLUSTERS.c.name).order_by(CLUSTERS.c.name)))
    listed = ", ".join(known) if known else "none yet"
    if cluster is None:
        if len(known) > 1:
            raise ReportError(f"the store has several clusters ({listed}): name one", parameter="cluster")
        return (known[0] if known else None), known
    if cluster not in known:
        raise UnknownCluster(f"unknown cluster {cluster!r} (known: {listed})", parameter="cluster")
    return cluster, known


def capacity_of(spec: dict[str, Any] | None) -> int | None:
    """Total GPUs of a stored cluster spec (None when there is none or it cannot be read)."""
    if not spec:
        return None
    try:
        parsed: ClusterSpec = parse_cluster_spec(spec, "clusters.spec")
    except (SpecError, ValidationError, TypeError, ValueError):
        return None
    return parsed.total_gpus


async def _versions(conn: AsyncConnection, cluster: str) -> tuple[ModelVersionRecord, ...]:
    m = MODELS
    stmt = select(m).where(m.c.cluster == cluster).order_by(m.c.created_at, m.c.version)
    return tuple(
        ModelVersionRecord(
            version=r.version,
            status=r.status,
            created_at=as_utc(r.created_at),
            promoted_at=None if r.promoted_at is None else as_utc(r.promoted_at),
            promoted_by=r.promoted_by,
            forced=r.forced,
            reason=r.reason,
        )
        for r in await conn.execute(stmt)
    )


async def _events(
    conn: AsyncConnection, cluster: str, versions: tuple[ModelVersionRecord, ...], has_table: bool
) -> tuple[ModelEventRecord, ...]:
    events: list[ModelEventRecord] = []
    if has_table:
        e = EVENTS
        stmt = select(e).where(e.c.cluster == cluster).order_by(e.c.at, e.c.id)
        for r in await conn.execute(stmt):
            events.append(
                ModelEventRecord(
                    at=as_utc(r.at),
                    version=r.version,
                    event=r.event,
                    from_status=r.from_status,
                    to_status=r.to_status,
                    actor=r.actor,
                    forced=bool(r.forced),
                    reason=r.reason,
                )
            )
    # versions recorded only from announcements (no registry history) still show their promotion
    with_history = {ev.version for ev in events}
    for v in versions:
        if v.version not in with_history and v.promoted_at is not None:
            events.append(
                ModelEventRecord(
                    at=v.promoted_at,
                    version=v.version,
                    event="promoted",
                    from_status=None,
                    to_status="current",
                    actor=v.promoted_by or "(announced)",
                    forced=bool(v.forced),
                    reason=v.reason,
                    announced=True,
                )
            )
    events.sort(key=lambda ev: ev.at)
    return tuple(events)


async def load_report_data(
    conn: AsyncConnection,
    *,
    cluster: str | None = None,
    since: float | None = None,
    until: float | None = None,
    capacity_gpus: int | None = None,
    capacity_source: str | None = None,
    now: datetime | None = None,
) -> ReportData:
    """Read everything a report shows. ``capacity_gpus`` overrides the capacity of the stored spec.

    Raises ``NotMigrated`` when the database has no Hylo tables, ``UnknownCluster`` or ``ReportError``
    when the cluster cannot be chosen, and ``ReportError`` when ``until <= since``.

    While the same read (same engine, cluster, window, capacity) is in progress in this event loop,
    another call waits for it and returns its result instead of reading again; the result is never
    kept after the read ends. A read given up on (its caller cancelled) hands nothing to those waiting:
    they read for themselves.
    """
    key = (conn.engine.sync_engine, cluster, since, until, capacity_gpus, capacity_source, now)
    loop = asyncio.get_running_loop()
    while True:
        shared = _IN_PROGRESS.get(key)
        if shared is None or shared.get_loop() is not loop:
            break
        try:
            return await asyncio.shield(shared)
        except _GivenUp:
            continue
    future: asyncio.Future[ReportData] = loop.create_future()
    _IN_PROGRESS[key] = future
    try:
        data = await _load(conn, cluster, since, until, capacity_gpus, capacity_source, now)
    except Exception as err:
        future.set_exception(err)
        raise
    except BaseException:
        future.set_exception(_GivenUp())
        raise
    else:
        future.set_result(data)
        return data
    finally:
        if future.done():
            future.exception()  # read here: no "exception never retrieved" when nobody waited
        if _IN_PROGRESS.get(key) is future:
            del _IN_PROGRESS[key]


class _GivenUp(Exception):
    """The read others were waiting for was cancelled: each of them reads for itself."""


#: reads in progress, by what they read (see ``load_report_data``)
_IN_PROGRESS: dict[tuple[Any, ...], asyncio.Future[ReportData]] = {}


async def _load(
    conn: AsyncConnection,
    cluster: str | None,
    since: float | None,
    until: float | None,
    capacity_gpus: int | None,
    capacity_source: str | None,
    now: datetime | None,
) -> ReportData:
    generated = now or datetime.now(UTC)
    if since is not None and until is not None and until <= since:
        raise ReportError(f"until ({until}) must be after since ({since})", parameter="until")
    tables = await table_names(conn)
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        raise NotMigrated(
            f"the database has no Hylo tables ({', '.join(missing)} missing): it was never migrated, "
            "or not to the newest revision (python -m shared.store.migrate)"
        )
    name, known = await resolve_cluster(conn, cluster)
    if name is None:
        return ReportData(cluster=None, since=since, until=until, generated_at=generated)
    if capacity_gpus is None:
        spec = (await conn.execute(select(CLUSTERS.c.spec).where(CLUSTERS.c.name == name))).scalar_one()
        capacity_gpus = capacity_of(spec)
        capacity_source = "the cluster spec in the store" if capacity_gpus is not None else None
    w = sql.Window(name, since, until)
    edges_known: asyncio.Future[FloatArray] = asyncio.get_running_loop().create_future()

    async def decisions_side(c: AsyncConnection) -> tuple[Any, ...]:
        lo, hi, count = await sql.time_span(c, w)
        edges_known.set_result(time_edges_over(lo, hi, count, since, until))
        snapshots = await sql.snapshot_stats(c, w, edges_known.result())
        running, busy = await sql.busy_timeline(c, w)
        return snapshots, running, busy

    async def jobs_side(c: AsyncConnection) -> tuple[Any, ...]:
        shadows = await sql.shadow_summaries(c, w) if "shadow_priorities" in tables else ()
        return shadows, await sql.outcome_stats(c, w, await edges_known)

    (snapshots, running, busy), (shadows, outcomes) = await _two_sides(conn, decisions_side, jobs_side)
    edges = edges_known.result()
    versions = await _versions(conn, name)
    has_events = "model_version_events" in tables
    return ReportData(
        cluster=name,
        since=since,
        until=until,
        generated_at=generated,
        known_clusters=known,
        capacity_gpus=capacity_gpus,
        capacity_source=capacity_source,
        snapshots=snapshots,
        edges=edges,
        outcomes=outcomes,
        running_jobs=running,
        busy=busy,
        versions=versions,
        events=await _events(conn, name, versions, has_events),
        has_event_table=has_events,
        shadows=shadows,
    )


Side = Callable[[AsyncConnection], Awaitable[tuple[Any, ...]]]


async def _two_sides(
    conn: AsyncConnection, first: Side, second: Side
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Run ``first`` on ``conn`` and ``second`` beside it on a second connection of the same engine.

    Why: on PostgreSQL the report's two heaviest reads (the rows of every snapshot; the shadow ranks
    and the finished jobs) each keep one server process busy for about a second on a million decision
    rows; side by side they take half the time on a server with two cores. On SQLite (one file, one
    writer, small stores) both run in turn on ``conn``. ``second`` may wait for what ``first`` finds
    (the time bins); the first error cancels the other side and is raised as it is.
    """
    await sql.prepare(conn)
    if conn.dialect.name != sql.PG:
        return await first(conn), await second(conn)

    async def beside() -> tuple[Any, ...]:
        async with conn.engine.connect() as other:
            await sql.prepare(other)
            return await second(other)

    task = asyncio.ensure_future(beside())
    try:
        here = await first(conn)
        there = await task
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return here, there
