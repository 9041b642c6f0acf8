"""Response bodies of the query API: the OpenAPI document is generated from these models.

Why separate models from the ORM rows: the API is a contract with analysts' scripts and dashboards;
column renames in the store must not silently change it. Timestamps are always timezone-aware UTC
(SQLite hands back naive ones); times named ``*_s`` are seconds on the cluster's clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite stores timestamps without an offset, in UTC: make them aware so both stores agree."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


class Out(BaseModel):
    """Base of every response model: every ``*_at`` timestamp comes out timezone-aware."""

    model_config = ConfigDict(from_attributes=True)

    @field_validator("*", mode="after")
    @classmethod
    def _aware(cls, value: Any) -> Any:
        return as_utc(value) if isinstance(value, datetime) else value


EXAMPLE_FEATURES = {"wait": 0.42, "gpus": 0.25, "est_runtime": 0.1}


class ClusterOut(Out):
    name: str = Field(description="cluster name", examples=["prod-a"])
    created_at: datetime = Field(description="when the store first saw the cluster")
    spec: dict[str, Any] | None = Field(description="the cluster spec, when one was registered")
    last_snapshot_time: float | None = Field(
        description="snapshot time of the newest decision (cluster clock, s); null before the first",
        examples=[1763800000.0],
    )
    last_sequence: int | None = Field(description="sequence of the newest decided snapshot", examples=[4812])


class ClusterList(Out):
    clusters: list[ClusterOut] = Field(description="by name")
    limit: int = Field(description="the page size used", examples=[1000])
    next_cursor: str | None = Field(
        default=None,
        description="pass as ?cursor= (with the same filters) for the next page; null on the last page",
    )


class DecisionOut(Out):
    """One job's line in the decision for one snapshot."""

    cluster: str = Field(examples=["prod-a"])
    job_id: str = Field(examples=["81234_7"])
    correlation_id: str = Field(description="the snapshot's id, shared by every stage", examples=["s-4812"])
    snapshot_time: float = Field(description="snapshot time (cluster clock, s)", examples=[1763800000.0])
    sequence: int = Field(description="the adapter's snapshot counter", examples=[4812])
    rank: int = Field(description="position in the decided order, 0 = first", examples=[0])
    priority: float = Field(description="the priority that gave the rank (higher runs first)", examples=[3.2])
    placed: bool = Field(description="true when the decision started the job now")
    nodes: list[str] = Field(description="where it was started; empty = keep waiting", examples=[["gpu-07"]])
    mode: Literal["pack", "spread"] | None = Field(description="placement mode of a started job")
    policy: str = Field(description="'model' or the base policy that decided", examples=["model"])
    model_version: str | None = Field(description="the model version that decided", examples=["m-2026-11-20"])
    fallback: str | None = Field(
        description="why the base policy decided instead of the model (null: the model decided)",
        examples=[None, "missed deadline"],
    )
    features: dict[str, float] = Field(
        description="the features that drove the priority: why it got that priority",
        examples=[EXAMPLE_FEATURES],
    )
    latencies_ms: dict[str, float] = Field(
        description="per-stage latency of the pipeline for this snapshot (ms)",
        examples=[{"featurizer": 0.8, "prioritizer": 2.0, "placer": 1.2}],
    )
    latency_ms: float | None = Field(description="sum of the stage latencies (ms)", examples=[4.0])
    decided_at: datetime = Field(description="when the store wrote the decision (wall clock)")
    score: float | None = Field(
        default=None,
        description="the model's raw score before ranking (null: the base policy decided, the job was "
        "beyond the model's window, or a row older than the store's revision 0006)",
        examples=[1.37],
    )
    placer_status: Literal["placed", "reserved", "waiting"] | None = Field(
        default=None,
        description="placed (starts now), reserved (waits for an EASY reservation at reserved_s), waiting "
        "(did not fit, or would have delayed a reservation); null on older rows",
    )
    reserved_s: float | None = Field(
        default=None, description="the reservation's start time (cluster clock, s)"
    )
    placer: str | None = Field(default=None, description="placement strategy", examples=["best-fit"])
    solver_status: str | None = Field(default=None, description="CP-SAT's status for the decision")
    raw_features: dict[str, float] | None = Field(
        default=None,
        description="raw values behind the features that no other table holds (the job's pool)",
        examples=[{"pool_gpus": 64.0, "pool_free_gpus": 6.0, "pool_nodes": 8.0, "pool_idle_nodes": 0.0}],
    )


class DecisionPage(Out):
    items: list[DecisionOut] = Field(description="decision rows, ordered by (snapshot_time, id)")
    limit: int = Field(description="the page size used", examples=[100])
    next_cursor: str | None = Field(
        description="pass as ?cursor= (with the same filters) for the next page; null on the last page"
    )


class JobOut(Out):
    """What the adapter reported when the job was first seen pending."""

    submit_s: float = Field(examples=[1763799000.0])
    gpus: int = Field(examples=[4])
    gpu_milli: int = Field(description="per-GPU share, 1000 = whole GPUs", examples=[1000])
    cpus_milli: int = Field(description="-1 = not given", examples=[16000])
    mem_mib: int = Field(description="-1 = not given", examples=[65536])
    est_runtime_s: float = Field(description="time limit or estimate", examples=[7200.0])
    user: str = Field(examples=["alice"])
    partition: str = Field(examples=["gpu"])
    qos: str = Field(examples=["normal"])
    first_seen_at: datetime


class OutcomeOut(Out):
    """How the job ended; wait, JCT and bounded slowdown are derived from the times."""

    correlation_id: str | None = Field(description="the snapshot whose decision started the job")
    submit_s: float
    start_s: float
    end_s: float
    wait_s: float = Field(description="start - submit")
    jct_s: float = Field(description="end - submit")
    bsld: float = Field(description="bounded slowdown, 10 s threshold")
    gpus: int
    status: str = Field(examples=["completed"])
    recorded_at: datetime
    nodes: list[str] | None = Field(
        default=None,
        description="the nodes it really ran on, as the cluster reported them",
        examples=[["gpu-07"]],
    )
    node_gpus: list[int] | None = Field(default=None, description="whole GPUs it held on each of nodes")
    gpu_type: str | None = Field(default=None, description="the GPU type it ran on", examples=["V100"])


class HistoryEntry(DecisionOut):
    started_job: bool = Field(description="true on the decision whose snapshot started the job")


class JobDetail(Out):
    cluster: str = Field(examples=["prod-a"])
    job_id: str = Field(examples=["81234_7"])
    job: JobOut | None = Field(description="the job as first seen pending (null if never recorded)")
    outcome: OutcomeOut | None = Field(description="null while the job has not finished")
    decision_count: int = Field(description="decisions recorded about the job in all")
    truncated: bool = Field(description="true when `decisions` holds only the newest `history` of them")
    decisions: list[HistoryEntry] = Field(description="the job's decisions, oldest first")


class ModelOut(Out):
    version: str = Field(examples=["m-2026-11-20"])
    cluster: str | None = Field(examples=["prod-a"])
    sha256: str
    uri: str = Field(description="where the checkpoint can be read", examples=["s3://models/m-2026-11-20.pt"])
    status: Literal["candidate", "current", "retired", "external"] = Field(
        description="the registry's status; external: a checkpoint a prioritizer was given by path"
    )
    created_at: datetime
    promoted_at: datetime | None


class ModelList(Out):
    models: list[ModelOut] = Field(description="newest first")
    limit: int = Field(description="the page size used", examples=[1000])
    next_cursor: str | None = Field(
        default=None,
        description="pass as ?cursor= (with the same filters) for the next page; null on the last page",
    )


class ModelOutcomes(Out):
    """The finished jobs started by this version's decisions (view ``model_version_outcomes``)."""

    jobs: int
    mean_wait_s: float | None
    mean_jct_s: float | None
    mean_bsld: float | None
    max_bsld: float | None
    fallbacks: int = Field(description="of those decisions, how many were base-policy fallbacks")


class ModelDetail(ModelOut):
    card: dict[str, Any] = Field(description="the checkpoint's model card")
    decision_count: int = Field(description="decision rows carrying this version")
    outcomes: ModelOutcomes | None = Field(description="null until a job it started has finished")


class ParamError(BaseModel):
    parameter: str = Field(description="the parameter at fault", examples=["limit"])
    location: str = Field(description="query, path or body", examples=["query"])
    problem: str = Field(
        description="what was expected", examples=["Input should be less than or equal to 1000"]
    )
    got: Any = Field(default=None, description="the value received", examples=["5000"])


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: one readable line, plus the offending parameters for a 422."""

    detail: str = Field(
        examples=["query parameter 'limit': Input should be less than or equal to 1000 (got '5000')"]
    )
    errors: list[ParamError] = Field(default_factory=list)


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    database: str = Field(description="'reachable' or why not")
    revision: str | None = Field(default=None, description="the schema revision of the database")
    head: str = Field(description="the newest schema revision this build knows")
