"""The messages derived from a snapshot, one per pipeline stage, plus outcomes and model versions.

Why a FeatureMatrix carries the featurized jobs' requests but not its snapshot (and a PriorityVector
its matrix): the prioritizer ranks from the jobs and their features alone, and re-sending the
cluster's running jobs and nodes at every hop made each hop decode about 0.6 MB on the 1,213-node
openb cluster. The stages that need the whole cluster state (the placer; the prioritizer only when
it recomputes a model window of a long queue) get the snapshot itself from the snapshots stream:
``snapshot_seq`` is its sequence there, the correlation id names it (``shared.bus.snapshots``).
Every stage still runs as any number of stateless replicas on any machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shared.schemas.base import (
    FeatureName,
    FiniteFloat,
    JobId,
    Message,
    Name,
    StageLatencies,
    Strict,
)
from shared.schemas.columns import FlatNodeColumns, require_unique
from shared.schemas.joined import Joined
from shared.schemas.limits import check_count, limits_of
from shared.schemas.packed import FloatTable, empty_table
from shared.schemas.snapshot import (
    ALLOCATION,
    ALLOCATION_EXTRAS,
    HARD_MAX_ITEMS,
    MAX_NODE_GPUS,
    PACKED,
    FloatColumn,
    GpuMask,
    GpuMaskColumn,
    NodeAmount,
    NodeAmountColumn,
    NodeGpus,
    NodeGpusColumn,
    PendingJobs,
    QueueSnapshot,
    ShareGpu,
    ShareGpuColumn,
)

MAX_FEATURES = 64
_MAX = Field(max_length=HARD_MAX_ITEMS)
VersionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
Mode = Literal["pack", "spread"]


class ExcludedJob(Strict):
    """A pending job left out of a decision, with the reason (e.g. no node group can ever hold it)."""

    job_id: JobId
    reason: Reason


def _same_origin(msg: Message, inner: Message, what: str) -> None:
    if inner.cluster != msg.cluster or inner.correlation_id != msg.correlation_id:
        raise ValueError(
            f"{what} belongs to cluster {inner.cluster!r} / correlation {inner.correlation_id!r}, "
            f"expected {msg.cluster!r} / {msg.correlation_id!r}"
        )


class FeatureMatrix(Message):
    """Per-job features (rows follow ``jobs``) and cluster features of one snapshot."""

    kind: ClassVar[str] = "features"
    #: the prioritizer re-sends it inside its PriorityVector as received (``shared.schemas.codec``)
    KEEP_RECEIVED_JSON: ClassVar[bool] = True

    snapshot_time: FiniteFloat = Field(description="the snapshot's time, seconds on the cluster clock")
    sequence: int = Field(ge=0, description="the snapshot's per-cluster sequence (latest wins)")
    snapshot_seq: int | None = Field(
        default=None, ge=1, description="the snapshot's sequence in the snapshots stream, if it came from it"
    )
    feature_schema_hash: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8,64}$")] = Field(
        description="FeatureSchema.hash of the formulas that computed the values"
    )
    jobs: PendingJobs = Field(description="the featurized pending jobs, as the snapshot reported them")
    columns: tuple[FeatureName, ...] = Field(max_length=MAX_FEATURES)
    values: FloatTable = Field(
        description="one row per job, one value per column; packed float64 (``shared.schemas.packed``)"
    )
    cluster_columns: tuple[FeatureName, ...] = Field(default=(), max_length=MAX_FEATURES)
    cluster_values: tuple[FiniteFloat, ...] = Field(default=(), max_length=MAX_FEATURES)
    raw_columns: tuple[FeatureName, ...] = Field(
        default=(),
        max_length=MAX_FEATURES,
        description="names of raw_values' columns (schema version 7): raw quantities behind the "
        "normalized values, in their own units",
    )
    raw_values: FloatTable = Field(
        default_factory=empty_table,
        description="per job, over raw_columns (or no rows: not given); packed like values. Not a "
        "model input: stored beside the decision's features (schema version 7)",
    )
    excluded: tuple[ExcludedJob, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    latencies_ms: StageLatencies = Field(default_factory=dict)

    @field_validator("jobs")
    @classmethod
    def _job_limit(cls, value: PendingJobs, info: ValidationInfo) -> PendingJobs:
        check_count("jobs", len(value), limits_of(info).max_jobs)
        require_unique("jobs job_id", value.job_id)
        return value

    @model_validator(mode="after")
    def _shapes(self) -> FeatureMatrix:
        rows, width = self.values.shape
        if rows != len(self.jobs):
            raise ValueError(f"values has {rows} rows, expected one per job ({len(self.jobs)})")
        if rows and width != len(self.columns):
            raise ValueError(f"values rows have {width} entries, expected {len(self.columns)} (columns)")
        if len(self.cluster_values) != len(self.cluster_columns):
            raise ValueError(
                f"cluster_values has {len(self.cluster_values)} entries, "
                f"expected {len(self.cluster_columns)} (cluster_columns)"
            )
        raw_rows, raw_width = self.raw_values.shape
        if raw_rows and raw_rows != rows:
            raise ValueError(f"raw_values has {raw_rows} rows, expected one per job ({rows}) or none")
        if raw_rows and raw_width != len(self.raw_columns):
            raise ValueError(
                f"raw_values rows have {raw_width} entries, expected {len(self.raw_columns)} (raw_columns)"
            )
        return self

    @property
    def job_ids(self) -> tuple[str, ...]:
        """The featurized jobs' ids, in row order."""
        return self.jobs.job_id


class MatrixRef(Strict):
    """Which FeatureMatrix a PriorityVector ranks: where it is stored and the digest of its bytes."""

    seq: int = Field(ge=1, description="the matrix's sequence in the features stream")
    sha256: Sha256 = Field(description="sha256 (hex) of the matrix message's bytes, as published")


def _matrix_or_reference(schema: dict[str, Any]) -> None:
    """On the wire a vector carries ``matrix`` or ``matrix_ref`` (or both), not necessarily ``matrix``."""
    schema["required"] = [f for f in schema.get("required", []) if f != "matrix"]
    schema["anyOf"] = [{"required": ["matrix"]}, {"required": ["matrix_ref"]}]


class PriorityVector(Message):
    """Priorities of the featurized jobs (higher runs first), and who computed them.

    In Python ``matrix`` is always the FeatureMatrix ranked. On the wire the prioritizer sends only
    ``matrix_ref`` (schema version 4), the matrix's sequence in the features stream and the sha256
    of its bytes: the placer decoded that matrix as it was published (``shared.bus.ahead``), and one
    it has not is read from the features stream (``shared.bus.consumer``'s ``fetch_missing``).
    A vector may also nest the matrix itself (version 3's form, still read and written when there is
    no reference to give).
    """

    kind: ClassVar[str] = "priorities"
    model_config = ConfigDict(json_schema_extra=_matrix_or_reference)
    #: ``matrix`` is encoded as the prioritizer received it, when it did (``shared.schemas.codec``)
    NESTED_RECEIVED: ClassVar[tuple[str, ...]] = ("matrix",)
    #: ``matrix`` is left out of the JSON when ``matrix_ref`` names it (``shared.schemas.codec``)
    REFERENCED: ClassVar[dict[str, str]] = {"matrix": "matrix_ref"}

    matrix: FeatureMatrix = Field(
        description="the matrix ranked; on the wire absent when matrix_ref names it (schema version 4)"
    )
    matrix_ref: MatrixRef | None = Field(
        default=None, description="where the matrix is stored in the features stream, and its digest"
    )
    priorities: FloatColumn = Field(
        description="aligned with matrix.jobs; packed on the wire (schema version 8: as a JSON array "
        "of 50,000 numbers it cost the placer about 10 ms to decode, on the path to the decision)"
    )
    policy: Name = Field(description="'model' or the base policy's name when it decided")
    model_version: VersionName | None = Field(default=None, description="model version used, if any")
    fallback: Reason | None = Field(default=None, description="why the base policy decided, if it did")
    scores: tuple[FiniteFloat | None, ...] = Field(
        default=(),
        max_length=HARD_MAX_ITEMS,
        description="the model's raw score (logit) of each job, aligned with matrix.jobs, before it "
        "became a rank; null for a job outside the model's window; empty when the base policy decided "
        "or there was nothing to order (one job) (schema version 7)",
    )
    latencies_ms: StageLatencies = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> PriorityVector:
        _same_origin(self, self.matrix, "matrix")
        if len(self.priorities) != len(self.matrix.jobs):
            raise ValueError(
                f"priorities has {len(self.priorities)} entries, expected {len(self.matrix.jobs)} "
                "(one per matrix.jobs)"
            )
        if self.scores and len(self.scores) != len(self.matrix.jobs):
            raise ValueError(
                f"scores has {len(self.scores)} entries, expected {len(self.matrix.jobs)} "
                "(one per matrix.jobs) or none"
            )
        return self


class JobPlacement(Strict):
    """One job's rank, priority and nodes in a decision (a row of ``Placements``); no nodes = wait."""

    job_id: JobId
    rank: int = Field(ge=0, description="0 = first in the priority order")
    priority: FiniteFloat
    nodes: tuple[Name, ...] = Field(
        default=(), max_length=4096, description="nodes to start on; empty = wait"
    )
    mode: Mode | None = Field(default=None, description="placement strategy used")
    features: dict[FeatureName, FiniteFloat] = Field(
        default_factory=dict, max_length=MAX_FEATURES, description="the features that drove its priority"
    )
    reserved_s: FiniteFloat | None = Field(
        default=None,
        description="EASY reservation: the estimated time this job (which cannot start now) can start; "
        "lower-ranked jobs that would delay it were not started",
    )
    node_gpus: tuple[NodeGpus, ...] = Field(
        default=(), max_length=4096, description="whole GPUs on each of nodes (schema version 6)"
    )
    node_cpus_milli: tuple[NodeAmount, ...] = Field(
        default=(), max_length=4096, description="milli-cores on each of nodes (schema version 6)"
    )
    node_mem_mib: tuple[NodeAmount, ...] = Field(
        default=(), max_length=4096, description="MiB on each of nodes (schema version 6)"
    )
    node_gpu_mask: tuple[GpuMask, ...] = Field(
        default=(), max_length=4096, description="per node, the physical GPUs (bit k = GPU k; 0 = any)"
    )
    share_gpu: ShareGpu = Field(default=-1, description="a share's physical GPU on its node; -1 = any")
    score: FiniteFloat | None = Field(
        default=None, description="the model's raw score of the job (schema version 7); None: not scored"
    )
    raw_features: dict[FeatureName, FiniteFloat] = Field(
        default_factory=dict,
        max_length=MAX_FEATURES,
        description="raw quantities behind its features, in their own units (schema version 7)",
    )


class Placements(FlatNodeColumns[JobPlacement]):
    """A decision's jobs as columns, in rank order (see ``JobPlacement`` for the fields).

    ``nodes`` is flat: job ``i`` starts on the next ``node_count[i]`` names (0: it waits).
    ``features`` holds one row per job over ``feature_columns`` (the features that drove its
    priority), or no rows at all. Iterating yields ``JobPlacement`` rows (with ``features`` as a dict);
    ``Placements.of(rows)`` builds the columns from rows.
    """

    ROW: ClassVar[type[BaseModel]] = JobPlacement
    COLUMNS: ClassVar[tuple[str, ...]] = (
        "job_id",
        "rank",
        "priority",
        "node_count",
        "mode",
        "reserved_s",
        "share_gpu",
        "score",
    )
    FLAT_COLUMNS: ClassVar[tuple[str, ...]] = ("nodes", *ALLOCATION, "node_gpu_mask")
    OPTIONAL_COLUMNS: ClassVar[frozenset[str]] = frozenset({*ALLOCATION, *ALLOCATION_EXTRAS, "score"})
    OWNER: ClassVar[str] = "placements"

    # joined and packed on the wire (schema version 8): a 50,000-job decision's ids, ranks,
    # priorities and node counts as JSON arrays cost the adapter and the recorder about 30 ms to
    # decode (``shared.schemas.joined``, ``shared.schemas.numbers``)
    job_id: Annotated[tuple[JobId, ...], _MAX, Joined(check_ids="placements")] = Field(default=())
    rank: Annotated[tuple[Annotated[int, Field(ge=0)], ...], _MAX, PACKED] = Field(
        default=(), description="0 = first in the priority order"
    )
    priority: FloatColumn = Field(default=())
    node_count: Annotated[tuple[Annotated[int, Field(ge=0, le=4096)], ...], _MAX, PACKED] = Field(
        default=(), description="how many of ``nodes`` each job starts on; 0 = wait"
    )
    nodes: tuple[Name, ...] = Field(
        default=(),
        max_length=HARD_MAX_ITEMS,
        description="node names of every placed job, flat, in row order",
    )
    mode: tuple[Mode | None, ...] = Field(
        default=(), max_length=HARD_MAX_ITEMS, description="placement strategy used (None: not placed)"
    )
    reserved_s: tuple[FiniteFloat | None, ...] = Field(
        default=(),
        max_length=HARD_MAX_ITEMS,
        description="EASY reservation: the estimated time the job (which cannot start now) can start; "
        "lower-ranked jobs that would delay it were not started",
    )
    node_gpus: NodeGpusColumn = Field(
        default=(),
        description="whole GPUs each placed job takes on each of its nodes, flat like nodes; empty = "
        "not given (schema version 6: the placer's exact allocation, which a cluster that starts jobs "
        "where it is told, like the simulated one, applies as it is)",
    )
    node_cpus_milli: NodeAmountColumn = Field(
        default=(), description="milli-cores per node, flat like nodes; empty = not given"
    )
    node_mem_mib: NodeAmountColumn = Field(
        default=(), description="MiB per node, flat like nodes; empty = not given"
    )
    node_gpu_mask: GpuMaskColumn = Field(
        default=(),
        description="per node, flat like nodes, the physical GPUs of its whole GPUs (bit k = GPU k; 0 = "
        "any free ones); empty = not given",
    )
    share_gpu: ShareGpuColumn = Field(
        default=(), description="per job, a share's physical GPU (-1 = any, and for every other job)"
    )
    feature_columns: tuple[FeatureName, ...] = Field(default=(), max_length=MAX_FEATURES)
    features: FloatTable = Field(
        default_factory=empty_table,
        description="per job, over feature_columns (or no rows); packed float64 like a FeatureMatrix's "
        "values (``shared.schemas.packed``)",
    )
    score: tuple[FiniteFloat | None, ...] = Field(
        default=(),
        max_length=HARD_MAX_ITEMS,
        description="per job, the model's raw score (the vector's scores in rank order; null: not "
        "scored); empty = not given (schema version 7)",
    )
    raw_feature_columns: tuple[FeatureName, ...] = Field(default=(), max_length=MAX_FEATURES)
    raw_features: FloatTable = Field(
        default_factory=empty_table,
        description="per job, over raw_feature_columns (or no rows): the matrix's raw_values in rank "
        "order (schema version 7)",
    )

    @classmethod
    def of(cls, rows: Iterable[JobPlacement]) -> Placements:
        """Columns from rows (already validated); the first row's feature names name the columns."""
        rows = tuple(rows)
        names = tuple(rows[0].features) if rows else ()
        raw = tuple(rows[0].raw_features) if rows else ()
        cols = cls._flat_columns(rows)
        cols["feature_columns"] = names
        cols["features"] = tuple(tuple(r.features[c] for c in names) for r in rows) if names else ()
        cols["raw_feature_columns"] = raw
        cols["raw_features"] = tuple(tuple(r.raw_features[c] for c in raw) for r in rows) if raw else ()
        return cls(**cols)

    @classmethod
    def _flat_columns(cls, rows: tuple[Any, ...]) -> dict[str, Any]:
        """The columns of ``rows``; the allocation columns only when a placed row gives them (a
        waiting job's empty tuples and -1 are its defaults, not values given)."""
        placed = [r for r in rows if r.nodes]
        cols: dict[str, Any] = {
            c: tuple(getattr(r, c) for r in rows) for c in cls.COLUMNS if c != "node_count"
        }
        cols["node_count"] = tuple(len(r.nodes) for r in rows)
        for c in cls.FLAT_COLUMNS:
            given = c == "nodes" or (placed and all(getattr(r, c) for r in placed))
            cols[c] = tuple(v for r in rows for v in getattr(r, c)) if given else ()
        if not cols["node_gpus"]:
            cols["share_gpu"] = ()
        if all(score is None for score in cols["score"]):
            cols["score"] = ()
        return cols

    @model_validator(mode="after")
    def _rows_agree(self) -> Placements:
        n = self._lengths()
        self._check_flat()
        rows, width = self.features.shape
        if rows:
            if rows != n:
                raise ValueError(f"placements.features has {rows} rows, expected {n} or none")
            if width != len(self.feature_columns):
                raise ValueError(
                    f"placements.features rows have {width} entries, expected {len(self.feature_columns)} "
                    "(feature_columns)"
                )
        raw_rows, raw_width = self.raw_features.shape
        if raw_rows and raw_rows != n:
            raise ValueError(f"placements.raw_features has {raw_rows} rows, expected {n} or none")
        if raw_rows and raw_width != len(self.raw_feature_columns):
            raise ValueError(
                f"placements.raw_features rows have {raw_width} entries, expected "
                f"{len(self.raw_feature_columns)} (raw_feature_columns)"
            )
        return self

    def _row_fields(self, i: int) -> dict[str, Any]:
        fields = super()._row_fields(i)
        fields["features"] = (
            dict(zip(self.feature_columns, self.features[i], strict=True)) if self.features else {}
        )
        raw = self.raw_features
        fields["raw_features"] = dict(zip(self.raw_feature_columns, raw[i], strict=True)) if raw else {}
        return fields

    def placed(self) -> list[JobPlacement]:
        """The rows of the jobs that start now."""
        return [self[i] for i, c in enumerate(self.node_count) if c]


class PlacementDecision(Message):
    """The placer's decision for one snapshot: every featurized job ranked, some placed."""

    kind: ClassVar[str] = "placements"

    snapshot_time: FiniteFloat
    sequence: int = Field(ge=0)
    policy: Name
    model_version: VersionName | None = None
    fallback: Reason | None = None
    placements: Placements = Field(description="every featurized job in rank order, as columns")
    placer: Name | None = Field(default=None, description="placement strategy: 'cp-sat' or 'best-fit'")
    placer_status: Name | None = Field(
        default=None,
        description="how CP-SAT decided: OPTIMAL, FEASIBLE, TIMEOUT_FALLBACK or ERROR_FALLBACK (best-fit "
        "decided), NOTHING_FITS (no job could start: no solve), ALL_FIT (best-fit started the whole "
        "batch on its fewest nodes: no solve); None with best-fit",
    )
    latencies_ms: StageLatencies = Field(default_factory=dict)

    @field_validator("placements")
    @classmethod
    def _limit(cls, value: Placements, info: ValidationInfo) -> Placements:
        check_count("placements", len(value), limits_of(info).max_jobs)
        require_unique("placement job_id", value.job_id)
        return value


class JobOutcome(Message):
    """A finished job. ``correlation_id`` is the snapshot whose decision started it.

    Wait, JCT and bounded slowdown are derived (properties), so they can never disagree with the times.
    """

    kind: ClassVar[str] = "outcomes"

    job_id: JobId
    submit_s: FiniteFloat
    start_s: FiniteFloat
    end_s: FiniteFloat
    gpus: int = Field(ge=0, le=100_000)
    status: Literal["completed", "failed", "cancelled", "timeout"] = "completed"
    nodes: tuple[Name, ...] = Field(
        default=(),
        max_length=4096,
        description="the nodes the job really ran on, as the cluster reports them; empty = not known "
        "(schema version 7)",
    )
    node_gpus: tuple[Annotated[int, Field(ge=0, le=MAX_NODE_GPUS)], ...] = Field(
        default=(),
        max_length=4096,
        description="whole GPUs it held on each of nodes (aligned with nodes); empty = not known "
        "(schema version 7)",
    )
    gpu_type: Name | None = Field(
        default=None,
        description="the GPU type it ran on (the node group's, several joined by '+'); None = not "
        "known (schema version 7)",
    )

    @model_validator(mode="after")
    def _ordered(self) -> JobOutcome:
        if self.start_s < self.submit_s:
            raise ValueError(f"start_s {self.start_s} is before submit_s {self.submit_s}")
        if self.end_s < self.start_s:
            raise ValueError(f"end_s {self.end_s} is before start_s {self.start_s}")
        if self.node_gpus and len(self.node_gpus) != len(self.nodes):
            raise ValueError(
                f"node_gpus has {len(self.node_gpus)} entries, expected {len(self.nodes)} (one per node) "
                "or none"
            )
        return self

    @property
    def wait_s(self) -> float:
        return self.start_s - self.submit_s

    @property
    def jct_s(self) -> float:
        return self.end_s - self.submit_s

    def bsld(self, threshold_s: float = 10.0) -> float:
        """Bounded slowdown: max(1, JCT / max(runtime, threshold)), as in ``shared.metrics``."""
        return max(1.0, self.jct_s / max(self.end_s - self.start_s, threshold_s))

    def message_id(self) -> str:
        """``outcomes.<cluster>.<job_id>.<digest>``: a report repeated as it was (an adapter's retry)
        has the same id and is dropped by the stream's duplicate window, while a different report of
        the same job is not: it must reach the recorder, which stores the first and records the
        second as a conflict (without the digest, a forged outcome sent first made the stream drop the
        real one silently; issue 20)."""
        facts = f"{self.submit_s!r}|{self.start_s!r}|{self.end_s!r}|{self.gpus}|{self.status}"
        digest = hashlib.sha256(facts.encode()).hexdigest()[:12]
        return f"{self.kind}.{self.cluster}.{self.job_id}.{digest}"


class ModelVersion(Message):
    """A prioritizer model version and its lifecycle state (announced on the ``models`` subject)."""

    kind: ClassVar[str] = "models"

    version: VersionName
    sha256: Sha256 = Field(description="sha256 of the checkpoint file")
    uri: Annotated[str, StringConstraints(min_length=1, max_length=1024)] = Field(
        description="where the checkpoint can be read (path or URL)"
    )
    status: Literal["candidate", "current", "retired"]
    card: dict[str, JsonValue] = Field(default_factory=dict, description="the checkpoint's model card")
    created_at: datetime
    promoted_at: datetime | None = None
    metrics: dict[FeatureName, FiniteFloat] = Field(default_factory=dict, max_length=64)
    shadow: bool = Field(
        default=False,
        description="a candidate every prioritizer scores beside the current model, without applying it "
        "(status must be 'candidate')",
    )

    @model_validator(mode="after")
    def _shadow_is_candidate(self) -> ModelVersion:
        if self.shadow and self.status != "candidate":
            raise ValueError(
                f"shadow: only a candidate can run in shadow mode, not a {self.status!r} version"
            )
        return self

    def message_id(self) -> str:
        return f"{self.kind}.{self.cluster}.{self.version}.{self.status}"


class ShadowPriorities(Message):
    """What a shadow model (a candidate scored beside the current model) would have prioritized.

    One per feature matrix the prioritizer handled while a shadow was loaded. Small on purpose: the
    job ids and priorities only (no features, no snapshot); the matrix and the applied order are
    already in the priorities stream and the decisions table, under the same correlation id. With
    ``fallback`` set the shadow model could not score the matrix (the reason, as a PriorityVector's)
    and ``priorities`` is empty.
    """

    kind: ClassVar[str] = "shadows"

    snapshot_time: FiniteFloat = Field(description="the snapshot's time, seconds on the cluster clock")
    sequence: int = Field(ge=0, description="the snapshot's per-cluster sequence")
    model_version: VersionName = Field(description="the shadow model's version")
    applied_policy: Name = Field(description="who decided the applied vector: 'model' or the base policy")
    applied_model_version: VersionName | None = Field(
        default=None, description="the model version of the applied vector (None: the base policy decided)"
    )
    job_ids: tuple[JobId, ...] = Field(
        max_length=HARD_MAX_ITEMS, description="the matrix's jobs, in row order"
    )
    priorities: tuple[FiniteFloat, ...] = Field(
        default=(), max_length=HARD_MAX_ITEMS, description="the shadow's, aligned with job_ids (higher first)"
    )
    fallback: Reason | None = Field(default=None, description="why the shadow model did not score, if so")
    latencies_ms: StageLatencies = Field(default_factory=dict)

    @field_validator("job_ids")
    @classmethod
    def _job_limit(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        check_count("job_ids", len(value), limits_of(info).max_jobs)
        require_unique("job_ids", value)
        return value

    @model_validator(mode="after")
    def _aligned(self) -> ShadowPriorities:
        if self.fallback is not None:
            if self.priorities:
                raise ValueError(
                    f"priorities has {len(self.priorities)} entries, expected none with a fallback"
                )
        elif len(self.priorities) != len(self.job_ids):
            raise ValueError(
                f"priorities has {len(self.priorities)} entries, expected {len(self.job_ids)} "
                "(one per job_ids) when the shadow model scored"
            )
        return self

    def message_id(self) -> str:
        return f"{self.kind}.{self.cluster}.{self.correlation_id}.{self.model_version}"


MESSAGE_TYPES: dict[str, type[Message]] = {
    m.kind: m
    for m in (
        QueueSnapshot,
        FeatureMatrix,
        PriorityVector,
        PlacementDecision,
        JobOutcome,
        ModelVersion,
        ShadowPriorities,
    )
}
