"""Idempotent writes: every insert is ON CONFLICT DO NOTHING on the table's natural key.

Why insert-or-ignore and not "check, then insert": two replicas (or one replica and its redelivered
message after a crash) may write the same decision at the same moment; only the database's unique
constraint decides atomically. PostgreSQL and SQLite both implement ``INSERT ... ON CONFLICT DO
NOTHING`` (SQLite's INSERT OR IGNORE for a named conflict target), and both return the rows really
inserted through RETURNING, so callers learn whether the message was new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.schemas.messages import JobOutcome, ModelVersion, PlacementDecision, ShadowPriorities
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.store.models import (
    DECISION_KEY,
    Cluster,
    Decision,
    Job,
    ModelVersionEvent,
    ModelVersionRow,
    Outcome,
    ShadowPriority,
    table_of,
)


async def insert_or_ignore(
    conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]], key: Sequence[str]
) -> int:
    """Insert ``rows``, skipping any that collide on the unique ``key``; returns how many were new.

    One statement executed for many parameter sets (SQLAlchemy's "insertmanyvalues" batches them
    into multi-row INSERTs with RETURNING): compiled once, not once per row. A statement built with
    ``.values(rows)`` instead compiled a bind parameter per value, 230-430 ms of CPU for one
    1,024-row decision on SQLite, against 30-50 ms this way.
    """
    if not rows:
        return 0
    dialect = conn.dialect.name
    if dialect == "postgresql":
        insert = postgresql.insert
    elif dialect == "sqlite":
        insert = sqlite.insert  # type: ignore[assignment]
    else:
        raise NotImplementedError(f"insert-or-ignore is implemented for PostgreSQL and SQLite, not {dialect}")
    pk = next(iter(table.primary_key.columns))
    stmt = insert(table).on_conflict_do_nothing(index_elements=list(key)).returning(pk)
    result = await conn.execute(stmt, list(rows))
    return len(result.fetchall())


async def ensure_cluster(conn: AsyncConnection, name: str, spec: dict[str, Any] | None = None) -> bool:
    """Register a cluster once; True if it was new."""
    return await insert_or_ignore(conn, table_of(Cluster), [{"name": name, "spec": spec}], ["name"]) == 1


async def store_cluster_spec(conn: AsyncConnection, name: str, spec: Mapping[str, Any]) -> None:
    """Register ``name`` with ``spec`` (a cluster spec as JSON), or set the spec of a cluster already
    registered: the spec its services run with now.

    Why not insert-or-ignore alone: every write registers its cluster first, with no spec, so a
    spec given later (by ``hylo run``/``up`` or the recorder) would be ignored and the report would
    say "capacity unknown"; two statements, once per cluster and process, not per message."""
    table = table_of(Cluster)
    value = dict(spec)
    if not await ensure_cluster(conn, name, value):
        await conn.execute(update(table).where(table.c.name == name).values(spec=value))


async def record_jobs(conn: AsyncConnection, snapshot: QueueSnapshot) -> int:
    """Record the pending jobs of a snapshot the first time they are seen; returns the new ones."""
    return await record_pending(conn, snapshot.cluster, snapshot.pending)


async def record_pending(conn: AsyncConnection, cluster: str, jobs: PendingJobs) -> int:
    """Record pending jobs of ``cluster`` the first time they are seen; returns the new ones."""
    await ensure_cluster(conn, cluster)
    rows = [
        {
            "cluster": cluster,
            "job_id": job_id,
            "submit_s": submit,
            "gpus": gpus,
            "gpu_milli": milli,
            "cpus_milli": cpus,
            "mem_mib": mem,
            "est_runtime_s": est,
            "user_name": user,
            "partition": partition,
            "qos": qos,
            "gpu_types": list(types),
        }
        for job_id, submit, gpus, milli, cpus, mem, est, user, partition, qos, types in zip(
            jobs.job_id,
            jobs.submit_s,
            jobs.gpus,
            jobs.gpu_milli,
            jobs.cpus_milli,
            jobs.mem_mib,
            jobs.est_runtime_s,
            jobs.user,
            jobs.partition,
            jobs.qos,
            jobs.gpu_types,
            strict=True,
        )
    ]
    return await insert_or_ignore(conn, table_of(Job), rows, ["cluster", "job_id"])


def placer_status(placed: bool, reserved_s: float | None) -> str:
    """The placer's word for one job of a decision: ``placed`` (starts now on ``nodes``), ``reserved``
    (waits with an EASY reservation at ``reserved_s``) or ``waiting`` (considered in the cycle, not
    started and not reserved: it did not fit, or starting it would have delayed a reservation)."""
    if placed:
        return "placed"
    return "waiting" if reserved_s is None else "reserved"


async def record_decision(conn: AsyncConnection, decision: PlacementDecision) -> int:
    """Store one row per job of a decision; a redelivered decision inserts nothing.

    Beside the order it stores what the placer and the model knew (schema version 7): each job's
    placer status and reservation, the model's raw score, and the raw values behind its features
    (``raw_features``: only the few quantities no other table holds; the job's own request and times
    are in ``jobs``). All of it comes from the message's columns: no extra statement per row.

    The conflict key holds the snapshot's time (``DECISION_KEY``): a redelivered decision carries the
    same one, so on a partitioned PostgreSQL store it lands in the same partition as its first copy and
    the unique index there turns it away.
    """
    await ensure_cluster(conn, decision.cluster)
    total = sum(decision.latencies_ms.values()) if decision.latencies_ms else None
    cols = decision.placements
    n = len(cols)
    nodes = cols.node_lists()
    names = cols.feature_columns
    features = cols.features or ((),) * n
    raw_names = cols.raw_feature_columns
    raws: Sequence[Sequence[float] | None] = cols.raw_features or (None,) * n
    scores: Sequence[float | None] = cols.score or (None,) * n
    reserved: Sequence[float | None] = cols.reserved_s or (None,) * n
    latencies = dict(decision.latencies_ms)
    fixed = {
        "correlation_id": decision.correlation_id,
        "cluster": decision.cluster,
        "snapshot_time": decision.snapshot_time,
        "sequence": decision.sequence,
        "policy": decision.policy,
        "model_version": decision.model_version,
        "fallback": decision.fallback,
        "latencies_ms": latencies,
        "latency_ms": total,
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
            "features": dict(zip(names, values, strict=True)),
            "score": score,
            "placer_status": placer_status(bool(on), when),
            "reserved_s": when,
            "raw_features": None if raw is None else dict(zip(raw_names, raw, strict=True)),
        }
        for job_id, rank, priority, on, mode, values, score, when, raw in zip(
            *(cols.job_id, cols.rank, cols.priority, nodes, cols.mode, features, scores, reserved, raws),
            strict=True,
        )
    ]
    return await insert_or_ignore(conn, table_of(Decision), rows, DECISION_KEY)


async def record_outcome(conn: AsyncConnection, outcome: JobOutcome) -> bool:
    """Store a finished job once; True if it was new. Where it ran (``nodes``, ``node_gpus``,
    ``gpu_type``) is stored as the adapter reported it, NULL when it did not."""
    await ensure_cluster(conn, outcome.cluster)
    row = {
        "cluster": outcome.cluster,
        "job_id": outcome.job_id,
        "correlation_id": outcome.correlation_id,
        "submit_s": outcome.submit_s,
        "start_s": outcome.start_s,
        "end_s": outcome.end_s,
        "wait_s": outcome.wait_s,
        "jct_s": outcome.jct_s,
        "bsld": outcome.bsld(),
        "gpus": outcome.gpus,
        "status": outcome.status,
        "nodes": list(outcome.nodes) if outcome.nodes else None,
        "node_gpus": list(outcome.node_gpus) if outcome.node_gpus else None,
        "gpu_type": outcome.gpu_type,
    }
    return await insert_or_ignore(conn, table_of(Outcome), [row], ["cluster", "job_id"]) == 1


#: the columns of an outcome that two reports of one job must agree on
_OUTCOME_FIELDS = ("submit_s", "start_s", "end_s", "gpus", "status")


async def outcome_conflict(conn: AsyncConnection, outcome: JobOutcome) -> str | None:
    """How ``outcome`` differs from the one stored for the same job, or None (same, or none stored).

    Why: outcomes are insert-or-ignore on (cluster, job id), so a second, different report of a job
    used to vanish silently, and a forged outcome sent first won (issue 20). The first stays stored;
    the caller records the disagreement (the recorder logs it and dead-letters the second)."""
    table = table_of(Outcome)
    stored = (
        await conn.execute(
            select(*(table.c[f] for f in _OUTCOME_FIELDS)).where(
                table.c.cluster == outcome.cluster, table.c.job_id == outcome.job_id
            )
        )
    ).first()
    if stored is None:
        return None
    diffs = [
        f"{f} {getattr(outcome, f)!r} (stored {stored._mapping[f]!r})"
        for f in _OUTCOME_FIELDS
        if getattr(outcome, f) != stored._mapping[f]
    ]
    return ", ".join(diffs) or None


def shadow_ranks(priorities: Sequence[float]) -> list[int]:
    """Rank of each entry (0 = first): priority descending, ties in row order.

    The prioritizer's priorities are distinct, so ties do not occur in practice; the placer breaks
    ties of an applied vector by submit time, which a shadow message does not carry.
    """
    order = sorted(range(len(priorities)), key=lambda i: (-priorities[i], i))
    ranks = [0] * len(priorities)
    for rank, row in enumerate(order):
        ranks[row] = rank
    return ranks


async def record_shadow(conn: AsyncConnection, shadow: ShadowPriorities) -> int:
    """Store a shadow model's ranks of one snapshot, one row per job; returns how many were new.

    A message with a fallback (the shadow model did not score) stores nothing; a redelivered message
    inserts nothing.
    """
    if shadow.fallback is not None or not shadow.priorities:
        return 0
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


def _version_row(model: ModelVersion) -> dict[str, Any]:
    """The ``model_versions`` columns a ``ModelVersion`` message fills."""
    return {
        "version": model.version,
        "cluster": model.cluster,
        "sha256": model.sha256,
        "uri": model.uri,
        "card": dict(model.card),
        "status": model.status,
        "created_at": model.created_at,
    }


async def record_model_version(conn: AsyncConnection, model: ModelVersion) -> bool:
    """Store a model version once, then apply its announced status (idempotent); True if new."""
    table = table_of(ModelVersionRow)
    row = {**_version_row(model), "promoted_at": model.promoted_at}
    new = await insert_or_ignore(conn, table, [row], ["version"]) == 1
    if not new:
        await conn.execute(
            update(table)
            .where(table.c.version == model.version)
            .values(status=model.status, promoted_at=model.promoted_at)
        )
    return new


async def record_announced_model(conn: AsyncConnection, model: ModelVersion) -> bool:
    """Store a version seen only as an announcement on the bus; never change any version's status.

    Why: the registry (``shared.registry``) is the only writer of a status. The recorder used to copy
    an announced status into ``model_versions``, so one forged ``current`` announcement left two
    current versions and a failing ``rollback`` (issue 20). A version the registry does not know is
    kept as a ``candidate``, with the announced status in ``reason``, so that it is visible; one it
    knows is left alone. True if the version was new."""
    claimed = "" if model.status == "candidate" else f" as {model.status!r} (not applied)"
    row = {
        **_version_row(model),
        "status": "candidate",
        "reason": f"seen only as an announcement on the bus{claimed}; the registry never registered it",
    }
    return await insert_or_ignore(conn, table_of(ModelVersionRow), [row], ["version"]) == 1


#: ``model_versions.reason`` of a checkpoint recorded by ``record_external_model``
EXTERNAL_REASON = (
    "given by path to the prioritizer (HYLO_MODEL_PATH, hylo run/up --model), not through the registry: "
    "never gated; `hylo models register` makes it a candidate of the registry"
)


async def record_external_model(conn: AsyncConnection, model: ModelVersion) -> bool:
    """Record a checkpoint a prioritizer was given by path, as status ``external``; True if new.

    Why: its decisions name it (``decisions.model_version``, ``file-<sha256 prefix>``) and analysts
    join them to ``model_versions``; without a row that join lost them. ``external`` and not one of
    the registry's statuses: the registry never registered or gated it, and it must not count as a
    candidate waiting for promotion nor as the cluster's current model (``shared.registry``). A row
    already there (any status) is left alone."""
    row = {**_version_row(model), "status": "external", "reason": EXTERNAL_REASON}
    return await insert_or_ignore(conn, table_of(ModelVersionRow), [row], ["version"]) == 1


async def update_model_version(conn: AsyncConnection, version: str, values: Mapping[str, Any]) -> bool:
    """Set columns of one model version (the registry's state changes); True if the version exists.

    Not insert-or-ignore: a state change is not a redelivered message but a decision made once, under
    the registry's lock, and recorded with its event (``record_model_event``) in the same transaction.
    """
    table = table_of(ModelVersionRow)
    result = await conn.execute(update(table).where(table.c.version == version).values(**dict(values)))
    return bool(result.rowcount)


async def record_model_event(
    conn: AsyncConnection,
    *,
    version: str,
    cluster: str | None,
    event: str,
    from_status: str | None,
    to_status: str,
    actor: str,
    at: datetime,
    forced: bool = False,
    reason: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> int:
    """Append one entry to a model version's history; returns its id (the order of events)."""
    table = table_of(ModelVersionEvent)
    row = {
        "version": version,
        "cluster": cluster,
        "event": event,
        "from_status": from_status,
        "to_status": to_status,
        "actor": actor,
        "forced": forced,
        "reason": reason,
        "detail": dict(detail) if detail is not None else None,
        "at": at,
    }
    result = await conn.execute(table.insert().values(row).returning(table.c.id))
    return int(result.scalar_one())
