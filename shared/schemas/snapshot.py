"""QueueSnapshot: what an adapter reports about one cluster at one moment.

Why pending jobs as a list of small objects but running jobs and nodes as columns: the pending queue
is what every stage reads job by job (and what a dead-letter record shows), while a big cluster
reports thousands of running jobs and nodes that are only ever read as arrays. On the 1,213-node
openb cluster with 4,532 running pods, one object per running pod made decoding a snapshot cost
about 20 ms at every hop; the same data as columns (one JSON array per field) decodes in 2-3 ms and
takes a third of the bytes. This is schema version 2 (version 1 sent lists of row objects).
``RunningJob`` and ``NodeState`` stay as the row types: ``RunningJobs.of(rows)`` and
``NodeStates.of(rows)`` build the columns from rows, and iterating the columns yields rows again.
Why no automatic conversion of row lists: a "before" validator would make pydantic materialize the
JSON as Python objects first and lose the fast columnar decoding it exists for.

``shared.schemas.views`` turns the snapshot into the featurizer's numpy arrays once, on arrival.

Units as everywhere in Hylo: seconds on the cluster's clock, CPUs in milli-cores, memory in MiB,
GPUs as a count plus a per-GPU share in milli-GPUs (1000 = whole GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from shared.schemas.base import FiniteFloat, JobId, Message, Name, NonNegFloat, Strict
from shared.schemas.limits import check_count, limits_of

WHOLE = 1000
#: hard caps that hold whatever the configured limits say (they bound the JSON Schema too)
HARD_MAX_ITEMS = 1_000_000

NodeState_ = Literal["up", "drain", "down"]
GpuCount = Annotated[int, Field(ge=0, le=100_000)]
GpuMilli = Annotated[int, Field(ge=1, le=WHOLE)]
NodeNames = Annotated[tuple[Name, ...], Field(min_length=1, max_length=4096)]
NonNegInt = Annotated[int, Field(ge=0)]


def _fractional_only_single(gpus: int, gpu_milli: int) -> None:
    if gpu_milli < WHOLE and gpus != 1:
        raise ValueError(f"gpu_milli {gpu_milli} < 1000 (a GPU share) requires gpus == 1, got gpus {gpus}")


def require_unique(name: str, values: Iterable[str]) -> None:
    """Raise naming the first repeated value: ids must identify one entry."""
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{name} must be unique, {v!r} appears more than once")
        seen.add(v)


def _same_lengths(owner: str, columns: dict[str, Sequence[Any]]) -> int:
    """The common length of ``columns``; raise naming the first column whose length differs."""
    names = list(columns)
    n = len(columns[names[0]])
    for name in names[1:]:
        if len(columns[name]) != n:
            raise ValueError(
                f"{owner}.{name} has {len(columns[name])} entries, expected {n} (as {owner}.{names[0]})"
            )
    return n


class PendingJob(Strict):
    """A queued job. ``-1`` CPUs or memory mean "not given": filled from the cluster spec's defaults."""

    job_id: JobId
    submit_s: FiniteFloat = Field(description="submit time, seconds on the cluster clock")
    gpus: int = Field(ge=0, le=100_000, description="whole GPUs (1 for a fractional job)")
    gpu_milli: int = Field(default=WHOLE, ge=1, le=WHOLE, description="per-GPU share, 1000 = whole")
    gpu_types: tuple[Name, ...] = Field(
        default=(), max_length=64, description="allowed GPU types; empty = any"
    )
    cpus_milli: int = Field(default=-1, ge=-1, description="milli-cores, -1 = not given")
    mem_mib: int = Field(default=-1, ge=-1, description="MiB, -1 = not given")
    est_runtime_s: NonNegFloat = Field(description="requested time limit / runtime estimate, seconds")
    user: Name = "default"
    partition: Name = Field(default="default", description="partition / virtual cluster")
    qos: Name = "normal"

    @model_validator(mode="after")
    def _share(self) -> PendingJob:
        _fractional_only_single(self.gpus, self.gpu_milli)
        return self


class RunningJob(Strict):
    """A running job (one row of ``RunningJobs``): the nodes it holds and when it should end."""

    job_id: JobId
    nodes: tuple[Name, ...] = Field(min_length=1, max_length=4096, description="node names it runs on")
    gpus: int = Field(ge=0, le=100_000)
    gpu_milli: int = Field(default=WHOLE, ge=1, le=WHOLE)
    start_s: FiniteFloat
    est_end_s: FiniteFloat = Field(description="start + time limit (estimated end)")

    @model_validator(mode="after")
    def _share(self) -> RunningJob:
        _fractional_only_single(self.gpus, self.gpu_milli)
        return self


class NodeState(Strict):
    """Free resources of one node (one row of ``NodeStates``); ``group`` names its node group."""

    name: Name
    group: Name
    free_gpus: int = Field(ge=0, le=64, description="whole GPUs free")
    free_share_milli: int = Field(
        ge=0, le=WHOLE, description="largest free share on one GPU (1000 if a whole GPU is free)"
    )
    free_cpus_milli: int = Field(ge=0)
    free_mem_mib: int = Field(ge=0)
    state: NodeState_ = Field(default="up", description="drain/down nodes count as having nothing free")


RUNNING_COLUMNS = ("job_id", "nodes", "gpus", "gpu_milli", "start_s", "est_end_s")
NODE_COLUMNS = ("name", "group", "free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib", "state")


class RunningJobs(Strict):
    """The running jobs as columns: entry ``i`` of every column describes job ``i`` (see ``RunningJob``).

    Every column must be given (all empty: no running job). Iterating yields ``RunningJob`` rows;
    ``RunningJobs.of(rows)`` builds the columns from rows.
    """

    job_id: tuple[JobId, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    nodes: tuple[NodeNames, ...] = Field(
        default=(), max_length=HARD_MAX_ITEMS, description="node names per job"
    )
    gpus: tuple[GpuCount, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    gpu_milli: tuple[GpuMilli, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    start_s: tuple[FiniteFloat, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    est_end_s: tuple[FiniteFloat, ...] = Field(
        default=(), max_length=HARD_MAX_ITEMS, description="start + time limit (estimated end)"
    )

    @classmethod
    def of(cls, rows: Iterable[RunningJob]) -> RunningJobs:
        """Columns from rows (already validated ``RunningJob`` objects)."""
        rows = tuple(rows)
        return cls(**{c: tuple(getattr(r, c) for r in rows) for c in RUNNING_COLUMNS})

    @model_validator(mode="after")
    def _rows_agree(self) -> RunningJobs:
        _same_lengths("running", {c: getattr(self, c) for c in RUNNING_COLUMNS})
        for i, (g, m) in enumerate(zip(self.gpus, self.gpu_milli, strict=True)):
            if m < WHOLE and g != 1:
                raise ValueError(
                    f"running job {self.job_id[i]!r} (entry {i}): gpu_milli {m} < 1000 (a GPU share) "
                    f"requires gpus == 1, got gpus {g}"
                )
        return self

    def __len__(self) -> int:
        return len(self.job_id)

    def __iter__(self) -> Iterator[RunningJob]:  # type: ignore[override]  # rows, not (field, value)
        for i in range(len(self.job_id)):
            yield self[i]

    def __getitem__(self, i: int) -> RunningJob:
        return RunningJob.model_construct(**{c: getattr(self, c)[i] for c in RUNNING_COLUMNS})


class NodeStates(Strict):
    """The nodes as columns: entry ``i`` of every column describes node ``i`` (see ``NodeState``).

    Iterating yields ``NodeState`` rows; ``NodeStates.of(rows)`` builds the columns from rows.
    """

    name: tuple[Name, ...] = Field(min_length=1, max_length=HARD_MAX_ITEMS)
    group: tuple[Name, ...] = Field(max_length=HARD_MAX_ITEMS, description="node group in the cluster spec")
    free_gpus: tuple[Annotated[int, Field(ge=0, le=64)], ...] = Field(
        max_length=HARD_MAX_ITEMS, description="whole GPUs free"
    )
    free_share_milli: tuple[Annotated[int, Field(ge=0, le=WHOLE)], ...] = Field(
        max_length=HARD_MAX_ITEMS, description="largest free share on one GPU (1000 if a whole GPU is free)"
    )
    free_cpus_milli: tuple[NonNegInt, ...] = Field(max_length=HARD_MAX_ITEMS)
    free_mem_mib: tuple[NonNegInt, ...] = Field(max_length=HARD_MAX_ITEMS)
    state: tuple[NodeState_, ...] = Field(
        max_length=HARD_MAX_ITEMS, description="drain/down nodes count as having nothing free"
    )

    @classmethod
    def of(cls, rows: Iterable[NodeState]) -> NodeStates:
        """Columns from rows (already validated ``NodeState`` objects)."""
        rows = tuple(rows)
        return cls(**{c: tuple(getattr(r, c) for r in rows) for c in NODE_COLUMNS})

    @model_validator(mode="after")
    def _rows_agree(self) -> NodeStates:
        _same_lengths("nodes", {c: getattr(self, c) for c in NODE_COLUMNS})
        return self

    def __len__(self) -> int:
        return len(self.name)

    def __iter__(self) -> Iterator[NodeState]:  # type: ignore[override]  # rows, not (field, value)
        for i in range(len(self.name)):
            yield self[i]

    def __getitem__(self, i: int) -> NodeState:
        return NodeState.model_construct(**{c: getattr(self, c)[i] for c in NODE_COLUMNS})


class QueueSnapshot(Message):
    """One cluster at one moment: pending jobs, running jobs and node states.

    ``sequence`` increases with every snapshot of a cluster (ties broken by ``time``); consumers use
    it for latest-wins: an older snapshot still queued when a newer one was seen is skipped.
    ``running`` and ``nodes`` are columns (``RunningJobs``, ``NodeStates``; build them from rows with
    their ``of``).
    """

    kind: ClassVar[str] = "snapshots"

    time: FiniteFloat = Field(description="snapshot time, seconds on the cluster clock")
    sequence: int = Field(ge=0, description="per-cluster snapshot counter (latest wins)")
    pending: tuple[PendingJob, ...] = Field(max_length=HARD_MAX_ITEMS)
    running: RunningJobs = Field(default_factory=RunningJobs, description="running jobs, as columns")
    nodes: NodeStates = Field(description="node states, as columns")

    @field_validator("pending")
    @classmethod
    def _pending_limits(cls, value: tuple[PendingJob, ...], info: ValidationInfo) -> tuple[PendingJob, ...]:
        check_count("pending", len(value), limits_of(info).max_jobs)
        require_unique("pending job_id", (j.job_id for j in value))
        return value

    @field_validator("running")
    @classmethod
    def _running_limits(cls, value: RunningJobs, info: ValidationInfo) -> RunningJobs:
        check_count("running", len(value), limits_of(info).max_running)
        require_unique("running job_id", value.job_id)
        return value

    @field_validator("nodes")
    @classmethod
    def _node_limits(cls, value: NodeStates, info: ValidationInfo) -> NodeStates:
        check_count("nodes", len(value), limits_of(info).max_nodes)
        require_unique("node name", value.name)
        return value

    @model_validator(mode="after")
    def _running_on_known_nodes(self) -> QueueSnapshot:
        names = set(self.nodes.name)
        for job, on in zip(self.running.job_id, self.running.nodes, strict=True):
            for node in on:
                if node not in names:
                    raise ValueError(f"running job {job!r} is on node {node!r}, absent from nodes")
        return self

    def latest_key(self) -> tuple[int, float]:
        """Order of snapshots of one cluster: higher is newer."""
        return (self.sequence, self.time)
