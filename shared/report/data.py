"""What a report is made of, read from the store with async SQLAlchemy Core queries.

Why load once into plain arrays and records: the figures and tables are computed in a worker thread
(matplotlib is CPU-bound and synchronous), so everything they need is fetched first on the async
connection and handed over as immutable data; the drawing code never touches the database.

What is read, for one cluster and an optional window ``since <= t < until`` of the cluster clock:

- one record per decided snapshot (its first decision row, plus how many rows and placements it had):
  who decided (policy, model version, fallback reason) and the per-stage latencies;
- every finished job that *started* in the window, with the decision that started it (same join as the
  view ``model_version_outcomes``); jobs whose outcome names no stored decision are "unattributed";
- for the GPU timeline, every finished job that *ran* during the window (start < until, end > since);
- model versions of the cluster and their registry events (``model_version_events``), which are
  wall-clock and not cut by the window;
- the cluster's GPU capacity, when its spec was stored with it (``clusters.spec``);
- shadow mode (migration 0004, optional): every shadow model's ranks of each snapshot in the window,
  beside the applied decision's rank of the same job and the job's wait where it finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError
from sqlalchemy import case, func, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from shared.domain.cluster import ClusterSpec, SpecError, parse_cluster_spec
from shared.store.models import (
    Cluster,
    Decision,
    ModelVersionEvent,
    ModelVersionRow,
    Outcome,
    ShadowPriority,
    table_of,
)

FloatArray = npt.NDArray[np.float64]

#: tables a report needs; ``model_version_events`` (migration 0002) is optional
REQUIRED_TABLES = ("clusters", "decisions", "outcomes", "model_versions")
#: label of finished jobs whose outcome names no stored decision
UNATTRIBUTED = "unattributed"


CLUSTERS = table_of(Cluster)
DECISIONS = table_of(Decision)
OUTCOMES = table_of(Outcome)
MODELS = table_of(ModelVersionRow)
EVENTS = table_of(ModelVersionEvent)
SHADOWS = table_of(ShadowPriority)


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
class SnapshotRecord:
    """One decided snapshot (the decision for it is one row per job in ``decisions``)."""

    correlation_id: str
    snapshot_time: float
    sequence: int
    policy: str
    model_version: str | None
    fallback: str | None
    latencies_ms: dict[str, float]
    latency_ms: float | None
    rows: int
    placed: int

    @property
    def decided_by(self) -> str:
        return decided_by(self.policy, self.model_version)


@dataclass(frozen=True)
class Outcomes:
    """Finished jobs as parallel arrays (one entry per job), and who decided to start each."""

    start_s: FloatArray
    end_s: FloatArray
    wait_s: FloatArray
    jct_s: FloatArray
    bsld: FloatArray
    gpus: FloatArray
    decided_by: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.start_s)

    @classmethod
    def empty(cls) -> Outcomes:
        z = np.zeros(0, dtype=np.float64)
        return cls(z, z, z, z, z, z, ())


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
class ShadowSnapshot:
    """One snapshot as a shadow model ranked it, beside what was applied (arrays in shadow rank order).

    ``applied_rank`` is NaN for a job the applied decision does not rank (no decision stored for the
    snapshot: its vector was stale); ``wait_s`` is NaN for a job with no outcome yet.
    """

    model_version: str
    correlation_id: str
    snapshot_time: float
    applied_by: str
    job_ids: tuple[str, ...]
    shadow_rank: FloatArray
    applied_rank: FloatArray
    wait_s: FloatArray


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
    snapshots: tuple[SnapshotRecord, ...] = ()
    outcomes: Outcomes = field(default_factory=Outcomes.empty)
    #: finished jobs that ran during the window (for the GPU timeline): start, end, gpus
    running: Outcomes = field(default_factory=Outcomes.empty)
    versions: tuple[ModelVersionRecord, ...] = ()
    events: tuple[ModelEventRecord, ...] = ()
    has_event_table: bool = True
    #: shadow models' rankings of the window's snapshots (empty without shadow mode or migration 0004)
    shadows: tuple[ShadowSnapshot, ...] = ()
    #: why there is nothing to show, when the store itself is the reason (e.g. never migrated)
    note: str | None = None

    @property
    def is_empty(self) -> bool:
        """Nothing to draw: no decision, no finished job and no model version."""
        return not self.snapshots and not len(self.outcomes) and not len(self.running) and not self.versions


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


def _window(column: Any, since: float | None, until: float | None) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if since is not None:
        where.append(column >= since)
    if until is not None:
        where.append(column < until)
    return where


async def _snapshots(
    conn: AsyncConnection, cluster: str, since: float | None, until: float | None
) -> tuple[SnapshotRecord, ...]:
    d = DECISIONS
    per = (
        select(
            func.min(d.c.id).label("first_id"),
            func.count().label("rows"),
            func.sum(case((d.c.placed, 1), else_=0)).label("placed"),
        )
        .where(d.c.cluster == cluster, *_window(d.c.snapshot_time, since, until))
        .group_by(d.c.correlation_id)
        .subquery()
    )
    stmt = (
        select(
            d.c.correlation_id,
            d.c.snapshot_time,
            d.c.sequence,
            d.c.policy,
            d.c.model_version,
            d.c.fallback,
            d.c.latencies_ms,
            d.c.latency_ms,
            per.c.rows,
            per.c.placed,
        )
        .join(per, per.c.first_id == d.c.id)
        .order_by(d.c.sequence, d.c.snapshot_time, d.c.id)
    )
    out = []
    for r in await conn.execute(stmt):
        latencies = {
            str(k): float(v) for k, v in (r.latencies_ms or {}).items() if isinstance(v, int | float)
        }
        out.append(
            SnapshotRecord(
                correlation_id=r.correlation_id,
                snapshot_time=float(r.snapshot_time),
                sequence=int(r.sequence),
                policy=r.policy,
                model_version=r.model_version,
                fallback=r.fallback,
                latencies_ms=latencies,
                latency_ms=None if r.latency_ms is None else float(r.latency_ms),
                rows=int(r.rows),
                placed=int(r.placed or 0),
            )
        )
    return tuple(out)


async def _outcomes(conn: AsyncConnection, where: list[ColumnElement[bool]]) -> Outcomes:
    o, d = OUTCOMES, DECISIONS
    stmt = (
        select(
            o.c.start_s, o.c.end_s, o.c.wait_s, o.c.jct_s, o.c.bsld, o.c.gpus, d.c.policy, d.c.model_version
        )
        .select_from(
            o.outerjoin(
                d,
                (d.c.cluster == o.c.cluster)
                & (d.c.job_id == o.c.job_id)
                & (d.c.correlation_id == o.c.correlation_id),
            )
        )
        .where(*where)
        .order_by(o.c.start_s, o.c.id)
    )
    rows = (await conn.execute(stmt)).all()
    if not rows:
        return Outcomes.empty()
    cols = np.array([r[:6] for r in rows], dtype=np.float64)
    labels = tuple(UNATTRIBUTED if r.policy is None else decided_by(r.policy, r.model_version) for r in rows)
    return Outcomes(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], cols[:, 4], cols[:, 5], labels)


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


async def _shadows(
    conn: AsyncConnection, cluster: str, since: float | None, until: float | None
) -> tuple[ShadowSnapshot, ...]:
    s, d, o = SHADOWS, DECISIONS, OUTCOMES
    stmt = (
        select(
            s.c.model_version,
            s.c.correlation_id,
            s.c.snapshot_time,
            s.c.applied_policy,
            s.c.applied_model_version,
            s.c.job_id,
            s.c.rank,
            d.c.rank.label("applied_rank"),
            o.c.wait_s,
        )
        .select_from(
            s.outerjoin(d, (d.c.correlation_id == s.c.correlation_id) & (d.c.job_id == s.c.job_id)).outerjoin(
                o, (o.c.cluster == s.c.cluster) & (o.c.job_id == s.c.job_id)
            )
        )
        .where(s.c.cluster == cluster, *_window(s.c.snapshot_time, since, until))
        .order_by(s.c.model_version, s.c.snapshot_time, s.c.correlation_id, s.c.rank)
    )
    out: list[ShadowSnapshot] = []
    group: list[Any] = []

    def flush() -> None:
        if not group:
            return
        first = group[0]
        nan = float("nan")
        out.append(
            ShadowSnapshot(
                model_version=first.model_version,
                correlation_id=first.correlation_id,
                snapshot_time=float(first.snapshot_time),
                applied_by=decided_by(first.applied_policy, first.applied_model_version),
                job_ids=tuple(r.job_id for r in group),
                shadow_rank=np.array([r.rank for r in group], dtype=np.float64),
                applied_rank=np.array(
                    [nan if r.applied_rank is None else r.applied_rank for r in group], dtype=np.float64
                ),
                wait_s=np.array([nan if r.wait_s is None else r.wait_s for r in group], dtype=np.float64),
            )
        )
        group.clear()

    for r in await conn.execute(stmt):
        if group and (r.model_version, r.correlation_id) != (group[0].model_version, group[0].correlation_id):
            flush()
        group.append(r)
    flush()
    return tuple(out)


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
    """
    generated = now or datetime.now(UTC)
    if since is not None and until is not None and until <= since:
        raise ReportError(f"until ({until}) must be after since ({since})", parameter="until")
    tables = await table_names(conn)
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        raise NotMigrated(
            f"the database has no Hylo tables ({', '.join(missing)} missing): it was never migrated "
            "(python -m shared.store.migrate)"
        )
    name, known = await resolve_cluster(conn, cluster)
    if name is None:
        return ReportData(cluster=None, since=since, until=until, generated_at=generated)
    if capacity_gpus is None:
        spec = (await conn.execute(select(CLUSTERS.c.spec).where(CLUSTERS.c.name == name))).scalar_one()
        capacity_gpus = capacity_of(spec)
        capacity_source = "the cluster spec in the store" if capacity_gpus is not None else None
    o = OUTCOMES
    started = [o.c.cluster == name, *_window(o.c.start_s, since, until)]
    ran: list[ColumnElement[bool]] = [o.c.cluster == name]
    if until is not None:
        ran.append(o.c.start_s < until)
    if since is not None:
        ran.append(o.c.end_s > since)
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
        snapshots=await _snapshots(conn, name, since, until),
        outcomes=await _outcomes(conn, started),
        running=await _outcomes(conn, ran),
        versions=versions,
        events=await _events(conn, name, versions, has_events),
        has_event_table=has_events,
        shadows=await _shadows(conn, name, since, until) if "shadow_priorities" in tables else (),
    )
