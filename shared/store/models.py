"""ORM models: clusters, jobs, decisions, outcomes, model versions, their history, shadow priorities.

Why these unique keys: they make every write idempotent. A decision is one job's line in the decision
for one snapshot, so (correlation_id, job_id) identifies it, and the snapshot's time joins the key
because PostgreSQL partitions ``decisions`` by it (migration 0007: a partitioned table's unique key must
hold its partition key; a correlation id names one snapshot, so the rows it identifies are the same); a
job finishes once, so (cluster, job_id) identifies its outcome; a model version is its version string.
``shared.store.writes`` inserts with ON CONFLICT DO NOTHING on exactly these keys, so redelivered
messages and restarted services never duplicate a row. Times of the cluster clock are float seconds
(as in the messages); wall-clock bookkeeping columns (``*_at``) are timezone-aware timestamps.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: JSONB on PostgreSQL (indexable, compact), JSON text on SQLite
JsonType = JSON().with_variant(JSONB(), "postgresql")
#: the same, for columns whose Python None means "not recorded": stored as SQL NULL, not JSON ``null``
#: (which ``IS NULL`` does not find)
NullableJson = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
#: 64-bit ids on PostgreSQL; SQLite autoincrements only an INTEGER PRIMARY KEY
IdType = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base; its metadata is the migrations' target."""


class Cluster(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    spec: Mapped[dict[str, Any] | None] = mapped_column(NullableJson, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("cluster", "job_id", name="uq_jobs_cluster_job"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(63), ForeignKey("clusters.name"))
    job_id: Mapped[str] = mapped_column(String(128))
    submit_s: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_milli: Mapped[int] = mapped_column(Integer)
    cpus_milli: Mapped[int] = mapped_column(BigInteger)
    mem_mib: Mapped[int] = mapped_column(BigInteger)
    est_runtime_s: Mapped[float] = mapped_column(Float)
    user_name: Mapped[str] = mapped_column(String(128))
    partition: Mapped[str] = mapped_column(String(128))
    qos: Mapped[str] = mapped_column(String(128))
    #: allowed GPU types (empty list: any); NULL for rows written before revision 0003
    gpu_types: Mapped[list[str] | None] = mapped_column(JsonType, nullable=True)
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


#: the natural key of a decision row: the job's line in one snapshot's decision (the snapshot's time
#: included, as the partition key of PostgreSQL's partitioned ``decisions``, migration 0007)
DECISION_KEY = ("correlation_id", "job_id", "snapshot_time")


class Decision(Base):
    """One job's line in the decision for one snapshot.

    On PostgreSQL the table is range-partitioned on ``snapshot_time`` (``shared.store.partitions``) and
    its primary key is (``id``, ``snapshot_time``); ``id`` alone stays unique (one sequence), which is
    what the ORM maps. On SQLite it is one plain table with ``id`` as its key.
    """

    __tablename__ = "decisions"
    __table_args__ = (
        UniqueConstraint(*DECISION_KEY, name="uq_decisions_correlation_job_time"),
        CheckConstraint("mode IS NULL OR mode IN ('pack', 'spread')", name="ck_decisions_mode"),
        Index("ix_decisions_cluster_job", "cluster", "job_id"),
        Index("ix_decisions_cluster_time", "cluster", "snapshot_time"),
        Index("ix_decisions_model_version", "model_version"),
        # the report's reads, index-only (migration 0005)
        Index("ix_decisions_report_snapshots", "cluster", "snapshot_time", "correlation_id", "placed", "id"),
        # who decided the row that started a job, read without visiting the row (migration 0007 added
        # the time, which the join names on a partitioned store, and the fallback, which recipes count)
        Index(
            "ix_decisions_report_jobs",
            *("cluster", "correlation_id", "job_id", "snapshot_time", "policy", "model_version", "rank"),
            "fallback",
        ),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    correlation_id: Mapped[str] = mapped_column(String(64))
    cluster: Mapped[str] = mapped_column(String(63), ForeignKey("clusters.name"))
    job_id: Mapped[str] = mapped_column(String(128))
    snapshot_time: Mapped[float] = mapped_column(Float)
    sequence: Mapped[int] = mapped_column(BigInteger)
    rank: Mapped[int] = mapped_column(Integer)
    priority: Mapped[float] = mapped_column(Float)
    nodes: Mapped[list[str]] = mapped_column(JsonType)
    placed: Mapped[bool] = mapped_column(Boolean)
    mode: Mapped[str | None] = mapped_column(String(8), nullable=True)
    policy: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    fallback: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    features: Mapped[dict[str, float]] = mapped_column(JsonType)
    latencies_ms: Mapped[dict[str, float]] = mapped_column(JsonType)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # what the prioritizer and the placer knew beyond the order (migration 0006); NULL on older rows
    #: the model's raw score (logit) of the job, before ranking; NULL when the base policy decided or
    #: the job was outside the model's window
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: ``placed`` (starts now), ``reserved`` (an EASY reservation at ``reserved_s``) or ``waiting``
    placer_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    reserved_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: placement strategy (``best-fit``, ``first-fit``, ``cp-sat``) and CP-SAT's status for the decision
    placer: Mapped[str | None] = mapped_column(String(16), nullable=True)
    solver_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: raw values behind the normalized ``features`` that no other table holds (the job's pool)
    raw_features: Mapped[dict[str, float] | None] = mapped_column(NullableJson, nullable=True)


class DecisionRollup(Base):
    """What the raw decision rows of one cluster, day, decider and GPU type added up to (migration 0007).

    Why: raw rows are kept for ``MaintenanceSettings.decision_retention_days``; before they go,
    ``shared.store.maintain`` adds them up here, so volumes, fallbacks, latencies and the waits of the
    jobs each decider started remain readable for every day. ``day`` is ``floor(snapshot_time /
    86400)``; ``decided_by`` the model version, or ``policy:<name>`` when a base policy decided;
    ``gpu_type`` where the job ran (its outcome's), ``unknown`` when not reported or not finished when
    the day was rolled up. ``snapshots`` counts the rows ranked first (one per snapshot), so summing it
    over GPU types counts each snapshot once; the latencies are those snapshots' (``latency_ms``). A
    day rolled up again (rows written late, after their partition was dropped) adds to its rows.
    """

    __tablename__ = "decision_rollups"

    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    day: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    decided_by: Mapped[str] = mapped_column(String(200), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(128), primary_key=True)
    snapshots: Mapped[int] = mapped_column(BigInteger)
    decision_rows: Mapped[int] = mapped_column(BigInteger)
    placed_rows: Mapped[int] = mapped_column(BigInteger)
    fallback_rows: Mapped[int] = mapped_column(BigInteger)
    #: rows of the decision that started their job (the outcome names its snapshot), and those jobs' sums
    started_jobs: Mapped[int] = mapped_column(BigInteger)
    started_wait_s_sum: Mapped[float] = mapped_column(Float)
    started_wait_s_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_jct_s_sum: Mapped[float] = mapped_column(Float)
    started_bsld_sum: Mapped[float] = mapped_column(Float)
    #: snapshots (rows ranked first) with a latency, the sum and the highest of it
    latency_snapshots: Mapped[int] = mapped_column(BigInteger)
    latency_ms_sum: Mapped[float] = mapped_column(Float)
    latency_ms_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_snapshot_time: Mapped[float] = mapped_column(Float)
    last_snapshot_time: Mapped[float] = mapped_column(Float)
    rolled_up_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


#: outcomes whose starting decision is not known yet: the decision write looks here (migration 0008)
_UNDECIDED = text("decision_policy IS NULL AND correlation_id IS NOT NULL")
#: outcomes whose job row is not stored yet: the jobs write looks here (migration 0009)
_UNNAMED = text("user_name IS NULL")
#: what "Waits per user and virtual cluster" reads of an outcome besides its key (migration 0009)
PER_USER_READ = ("user_name", "partition", "wait_s", "end_s", "gpus")
#: what "Waits per model version" reads of an outcome besides its key (migration 0009)
PER_MODEL_READ = ("decision_model_version", "decision_policy", "decision_fallback", "wait_s", "bsld")


class Outcome(Base):
    __tablename__ = "outcomes"
    __table_args__ = (
        UniqueConstraint("cluster", "job_id", name="uq_outcomes_cluster_job"),
        # the jobs of a period, by start (the report, the analyst recipes) or submission (migration 0007);
        # on PostgreSQL the first holds what "Waits per user and virtual cluster" reads, so that recipe
        # reads the index alone, whatever plan it gets (migration 0009)
        Index("ix_outcomes_cluster_start", "cluster", "start_s", postgresql_include=list(PER_USER_READ)),
        Index("ix_outcomes_cluster_submit", "cluster", "submit_s"),
        # the jobs started by the decisions of a period (migration 0008); on PostgreSQL holding what
        # "Waits per model version" reads, for the same reason (migration 0009)
        Index(
            "ix_outcomes_cluster_decision",
            "cluster",
            "decision_time",
            postgresql_include=list(PER_MODEL_READ),
        ),
        Index(
            "ix_outcomes_undecided",
            "correlation_id",
            postgresql_where=_UNDECIDED,
            sqlite_where=_UNDECIDED,
        ),
        Index("ix_outcomes_unnamed", "cluster", "job_id", postgresql_where=_UNNAMED, sqlite_where=_UNNAMED),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(63), ForeignKey("clusters.name"))
    job_id: Mapped[str] = mapped_column(String(128))
    correlation_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    submit_s: Mapped[float] = mapped_column(Float)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float] = mapped_column(Float)
    wait_s: Mapped[float] = mapped_column(Float)
    jct_s: Mapped[float] = mapped_column(Float)
    bsld: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    # where the job really ran, as its adapter reported it (migration 0006); NULL when not reported
    #: node names; ``node_gpus`` the whole GPUs it held on each (aligned), when known
    nodes: Mapped[list[str] | None] = mapped_column(NullableJson, nullable=True)
    node_gpus: Mapped[list[int] | None] = mapped_column(NullableJson, nullable=True)
    gpu_type: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # the decision row that started the job (the one its ``correlation_id`` names), copied here when
    # the second of the two is recorded (migration 0008, ``shared.store.derived``): the long-range
    # reads group finished jobs by who started them without looking up a decision row per job.
    # NULL while no stored decision of that snapshot names the job (``decision_policy`` is never
    # NULL on a decision)
    decision_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    decision_policy: Mapped[str | None] = mapped_column(String(128), nullable=True)
    decision_model_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    decision_fallback: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    decision_rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the job's user and partition (its ``jobs`` row), copied here by whichever of the two is recorded
    # second (migration 0009, ``shared.store.derived``): "Waits per user and virtual cluster" groups
    # finished jobs without joining ``jobs``. NULL while the job's row is not stored (``jobs.user_name``
    # is never NULL)
    user_name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    partition: Mapped[str | None] = mapped_column(String(128), nullable=True)


class DecisionSnapshot(Base):
    """One decided snapshot: what its decision rows share, and how many rows and placed rows it has
    (migration 0008).

    Why: the report's per-snapshot figures (snapshots per decider, fallbacks, latency per stage) used
    to group the decision rows of the range and look up each snapshot's first row: one index entry
    per pending job and a row lookup per snapshot, 27-37 s over 69 days of a 10M-row store
    (``docs/results/store-scale.md``). This table holds one row per snapshot, written by the
    recorder in the transaction of the decision's rows and computed from the stored rows
    (``shared.store.derived``), so it agrees with them: ``decision_rows`` and ``placed_rows`` count
    them, the other columns are those of the snapshot's first row (lowest id, ``first_decision_id``),
    which the report ordered snapshots by. Removed with the raw rows it summarizes
    (``shared.store.maintain``). Its key leads with (cluster, snapshot_time): the range reads.
    """

    __tablename__ = "decision_snapshots"

    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    snapshot_time: Mapped[float] = mapped_column(Float, primary_key=True)
    correlation_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    sequence: Mapped[int] = mapped_column(BigInteger)
    policy: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    fallback: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    latencies_ms: Mapped[dict[str, float]] = mapped_column(JsonType)
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    decision_rows: Mapped[int] = mapped_column(Integer)
    placed_rows: Mapped[int] = mapped_column(Integer)
    first_decision_id: Mapped[int] = mapped_column(BigInteger)


#: what ``model_versions.status`` may say: the registry's three, and ``external`` (migration 0006): a
#: checkpoint a prioritizer was given by path (``HYLO_MODEL_PATH``, ``hylo run --model``), recorded so
#: that its decisions join to a row; the registry never gated it (``writes.record_external_model``)
MODEL_STATUSES = ("candidate", "current", "retired", "external")


class ModelVersionRow(Base):
    __tablename__ = "model_versions"
    __table_args__ = (
        CheckConstraint(
            "status IN (" + ", ".join(f"'{s}'" for s in MODEL_STATUSES) + ")", name="ck_model_versions_status"
        ),
    )

    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster: Mapped[str | None] = mapped_column(String(63), nullable=True)
    sha256: Mapped[str] = mapped_column(String(64))
    uri: Mapped[str] = mapped_column(String(1024))
    card: Mapped[dict[str, Any]] = mapped_column(JsonType)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    promoted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # the model registry's bookkeeping (migration 0002); NULL on rows only recorded from announcements
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    reason: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    promoted_by: Mapped[str | None] = mapped_column(String(128), nullable=True)
    forced: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: scored in shadow mode beside the current model (migration 0004); NULL on older rows = no
    shadow: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


#: what ``model_version_events.event`` may say (see ``shared.registry``)
MODEL_EVENTS = ("registered", "gate-passed", "gate-refused", "promoted", "retired", "rolled-back")


class ModelVersionEvent(Base):
    """One state change of a model version (or one gate verdict), with who did it and when.

    ``model_versions`` holds the latest state; this table is its history, appended by the model
    registry (``shared.registry``) in the same transaction as the change it records.
    """

    __tablename__ = "model_version_events"
    __table_args__ = (
        CheckConstraint(
            "event IN (" + ", ".join(f"'{e}'" for e in MODEL_EVENTS) + ")",
            name="ck_model_version_events_event",
        ),
        Index("ix_model_version_events_version", "version"),
        Index("ix_model_version_events_cluster_at", "cluster", "at"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(String(64), ForeignKey("model_versions.version"))
    cluster: Mapped[str | None] = mapped_column(String(63), nullable=True)
    event: Mapped[str] = mapped_column(String(16))
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(128))
    forced: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JsonType, nullable=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ShadowPriority(Base):
    """One job's rank in what a shadow model would have prioritized for one snapshot (migration 0004).

    Unique on (correlation_id, job_id, model_version): a redelivered ``ShadowPriorities`` message
    stores nothing twice, and two shadow versions of the same snapshot (one replaced by the next
    mid-stream) both keep their rows. No foreign key to ``clusters``: the shadow recorder may see a
    snapshot before any decision of its cluster is stored.
    """

    __tablename__ = "shadow_priorities"
    __table_args__ = (
        UniqueConstraint(
            "correlation_id", "job_id", "model_version", name="uq_shadow_priorities_corr_job_model"
        ),
        Index("ix_shadow_priorities_cluster_model", "cluster", "model_version"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(63))
    correlation_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(String(128))
    model_version: Mapped[str] = mapped_column(String(64))
    snapshot_time: Mapped[float] = mapped_column(Float)
    sequence: Mapped[int] = mapped_column(BigInteger)
    rank: Mapped[int] = mapped_column(Integer)
    priority: Mapped[float] = mapped_column(Float)
    applied_policy: Mapped[str] = mapped_column(String(128))
    applied_model_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


def table_of(model: type[Any]) -> Table:
    """The Core ``Table`` of a mapped class (what bulk inserts and analyst queries are written on)."""
    table = model.__table__
    assert isinstance(table, Table)
    return table
