"""Idempotent writes: every insert is ON CONFLICT DO NOTHING on the table's natural key.

Why insert-or-ignore and not "check, then insert": two replicas (or one replica and its redelivered
message after a crash) may write the same decision at the same moment; only the database's unique
constraint decides atomically. PostgreSQL and SQLite both implement ``INSERT ... ON CONFLICT DO
NOTHING`` (SQLite's INSERT OR IGNORE for a named conflict target), and both tell how many rows were
really inserted, so callers learn whether the message was new.

The writes of many rows per message (a decision's rows, a queue's jobs, a shadow model's ranks) go
through ``shared.store.bulk``: the message's columns straight to the driver, one statement per
message, without SQLAlchemy's per-row and per-value work, which was most of the recorder's CPU
(issue 22, item 2). The writes of one row keep ``insert_or_ignore``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.schemas.messages import JobOutcome, ModelVersion, PlacementDecision, ShadowPriorities
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.store import derived
from shared.store.bulk import BulkInsert, json_rows
from shared.store.models import (
    DECISION_KEY,
    Cluster,
    ModelVersionEvent,
    ModelVersionRow,
    Outcome,
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


#: ``jobs`` as the recorder writes it: the cluster once, every other column per job
JOBS_INSERT = BulkInsert(
    table="jobs",
    key=("cluster", "job_id"),
    shared=(("cluster", "text"),),
    per_row=(
        ("job_id", "text"),
        ("submit_s", "float8"),
        ("gpus", "int4"),
        ("gpu_milli", "int4"),
        ("cpus_milli", "int8"),
        ("mem_mib", "int8"),
        ("est_runtime_s", "float8"),
        ("user_name", "text"),
        ("partition", "text"),
        ("qos", "text"),
        ("gpu_types", "jsonb"),
    ),
)


def _json_once(lists: Sequence[Sequence[str]]) -> list[str]:
    """Each list as JSON text, each distinct list encoded once."""
    done: dict[tuple[str, ...], str] = {}
    out = []
    for value in lists:
        key = tuple(value)
        text = done.get(key)
        if text is None:
            text = done[key] = json.dumps(key)
        out.append(text)
    return out


async def record_pending(conn: AsyncConnection, cluster: str, jobs: PendingJobs) -> int:
    """Record pending jobs of ``cluster`` the first time they are seen; returns the new ones.

    The columns of the message go to the database as they are (``shared.store.bulk``); only the GPU
    types are encoded, once per distinct list (a queue's jobs share a few). When some are new, the
    outcomes of those jobs recorded before them (after an outage or a replay) take their user and
    partition (``shared.store.derived.fill_outcomes_of_jobs``, in the same transaction)."""
    await ensure_cluster(conn, cluster)
    columns = (
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
        _json_once(jobs.gpu_types),
    )
    inserted = await JOBS_INSERT.insert(conn, (cluster,), columns)
    if inserted:
        await derived.fill_outcomes_of_jobs(conn, cluster, jobs.job_id)
    return inserted


def placer_status(placed: bool, reserved_s: float | None) -> str:
    """The placer's word for one job of a decision: ``placed`` (starts now on ``nodes``), ``reserved``
    (waits with an EASY reservation at ``reserved_s``) or ``waiting`` (considered in the cycle, not
    started and not reserved: it did not fit, or starting it would have delayed a reservation)."""
    if placed:
        return "placed"
    return "waiting" if reserved_s is None else "reserved"


#: ``decisions`` as the recorder writes it: what the whole decision shares once, the rest per job
DECISIONS_INSERT = BulkInsert(
    table="decisions",
    key=DECISION_KEY,
    shared=(
        ("correlation_id", "text"),
        ("cluster", "text"),
        ("snapshot_time", "float8"),
        ("sequence", "int8"),
        ("policy", "text"),
        ("model_version", "text"),
        ("fallback", "text"),
        ("latencies_ms", "jsonb"),
        ("latency_ms", "float8"),
        ("placer", "text"),
        ("solver_status", "text"),
    ),
    per_row=(
        ("job_id", "text"),
        ("rank", "int4"),
        ("priority", "float8"),
        ("nodes", "jsonb"),
        ("placed", "bool"),
        ("mode", "text"),
        ("features", "jsonb"),
        ("score", "float8"),
        ("placer_status", "text"),
        ("reserved_s", "float8"),
        ("raw_features", "jsonb"),
    ),
)


async def record_decision(conn: AsyncConnection, decision: PlacementDecision) -> int:
    """Store one row per job of a decision; a redelivered decision inserts nothing.

    Beside the order it stores what the placer and the model knew (schema version 7): each job's
    placer status and reservation, the model's raw score, and the raw values behind its features
    (``raw_features``: only the few quantities no other table holds; the job's own request and times
    are in ``jobs``). All of it comes from the message's columns, written as columns in one statement
    (``shared.store.bulk``): what the decision's rows share is sent once, and the features' JSON is
    printed by one format string per row (``json_rows``).

    The conflict key holds the snapshot's time (``DECISION_KEY``): a redelivered decision carries the
    same one, so on a partitioned PostgreSQL store it lands in the same partition as its first copy and
    the unique index there turns it away.

    New rows also write the snapshot's ``decision_snapshots`` row and copy the decision onto outcomes
    recorded before it (``shared.store.derived``), in the same transaction; a redelivery writes neither.
    """
    await ensure_cluster(conn, decision.cluster)
    cols = decision.placements
    n = len(cols)
    placed = [count > 0 for count in cols.node_count]
    nodes = [json.dumps(on) if on else "[]" for on in cols.node_lists()]
    features = json_rows(cols.feature_columns, cols.features) if cols.features else ["{}"] * n
    raws = json_rows(cols.raw_feature_columns, cols.raw_features) if cols.raw_features else [None] * n
    reserved: Sequence[float | None] = cols.reserved_s or [None] * n
    statuses = [placer_status(p, when) for p, when in zip(placed, reserved, strict=True)]
    latencies = dict(decision.latencies_ms)
    shared = (
        decision.correlation_id,
        decision.cluster,
        decision.snapshot_time,
        decision.sequence,
        decision.policy,
        decision.model_version,
        decision.fallback,
        json.dumps(latencies),
        sum(latencies.values()) if latencies else None,
        decision.placer,
        decision.placer_status,
    )
    per_row = (
        cols.job_id,
        cols.rank,
        cols.priority,
        nodes,
        placed,
        cols.mode,
        features,
        cols.score or [None] * n,
        statuses,
        reserved,
        raws,
    )
    inserted = await DECISIONS_INSERT.insert(conn, shared, per_row)
    if inserted:
        key = (decision.cluster, decision.correlation_id, decision.snapshot_time)
        await derived.record_snapshot(conn, *key)
        await derived.fill_outcomes_of(conn, *key)
    return inserted


async def record_outcome(conn: AsyncConnection, outcome: JobOutcome) -> bool:
    """Store a finished job once; True if it was new. Where it ran (``nodes``, ``node_gpus``,
    ``gpu_type``) is stored as the adapter reported it, NULL when it did not. The row takes the decision
    that started the job (``decision_*``) from the stored decision rows as it is inserted, when that
    decision is stored (``shared.store.derived.insert_outcome``; otherwise that decision's write fills
    them), and its job's user and partition (``user_name``, ``partition``) likewise from the job's row."""
    await ensure_cluster(conn, outcome.cluster)
    values = (
        outcome.cluster,
        outcome.job_id,
        outcome.correlation_id,
        outcome.submit_s,
        outcome.start_s,
        outcome.end_s,
        outcome.wait_s,
        outcome.jct_s,
        outcome.bsld(),
        outcome.gpus,
        outcome.status,
        json.dumps(list(outcome.nodes)) if outcome.nodes else None,
        json.dumps(list(outcome.node_gpus)) if outcome.node_gpus else None,
        outcome.gpu_type,
    )
    return await derived.insert_outcome(conn, values)


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


#: ``shadow_priorities``: one shadow model's ranks of one snapshot
SHADOW_INSERT = BulkInsert(
    table="shadow_priorities",
    key=("correlation_id", "job_id", "model_version"),
    shared=(
        ("cluster", "text"),
        ("correlation_id", "text"),
        ("model_version", "text"),
        ("snapshot_time", "float8"),
        ("sequence", "int8"),
        ("applied_policy", "text"),
        ("applied_model_version", "text"),
    ),
    per_row=(("job_id", "text"), ("rank", "int4"), ("priority", "float8")),
)


async def record_shadow(conn: AsyncConnection, shadow: ShadowPriorities) -> int:
    """Store a shadow model's ranks of one snapshot, one row per job; returns how many were new.

    A message with a fallback (the shadow model did not score) stores nothing; a redelivered message
    inserts nothing.
    """
    if shadow.fallback is not None or not shadow.priorities:
        return 0
    shared = (
        shadow.cluster,
        shadow.correlation_id,
        shadow.model_version,
        shadow.snapshot_time,
        shadow.sequence,
        shadow.applied_policy,
        shadow.applied_model_version,
    )
    per_row = (shadow.job_ids, shadow_ranks(shadow.priorities), shadow.priorities)
    return await SHADOW_INSERT.insert(conn, shared, per_row)


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
