"""QueueSnapshot: what an adapter reports about one cluster at one moment.

Why jobs and nodes as lists of small objects (not arrays): the snapshot is the boundary to the outside
world (Slurm's ``squeue``/``scontrol``, a simulated cluster) and must be easy to write from any
language and to read in a dead-letter record; ``shared.schemas.views`` turns it into the featurizer's
numpy arrays once, on arrival.

Units as everywhere in Hylo: seconds on the cluster's clock, CPUs in milli-cores, memory in MiB,
GPUs as a count plus a per-GPU share in milli-GPUs (1000 = whole GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from shared.schemas.base import FiniteFloat, JobId, Message, Name, NonNegFloat, Strict
from shared.schemas.limits import check_count, limits_of

WHOLE = 1000
#: hard caps that hold whatever the configured limits say (they bound the JSON Schema too)
HARD_MAX_ITEMS = 1_000_000


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
    """A running job: the nodes it holds and when the scheduler expects it to end."""

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
    """Free resources of one node; ``group`` names its node group in the cluster spec."""

    name: Name
    group: Name
    free_gpus: int = Field(ge=0, le=64, description="whole GPUs free")
    free_share_milli: int = Field(
        ge=0, le=WHOLE, description="largest free share on one GPU (1000 if a whole GPU is free)"
    )
    free_cpus_milli: int = Field(ge=0)
    free_mem_mib: int = Field(ge=0)
    state: Literal["up", "drain", "down"] = Field(
        default="up", description="drain/down nodes count as having nothing free"
    )


class QueueSnapshot(Message):
    """One cluster at one moment: pending jobs, running jobs and node states.

    ``sequence`` increases with every snapshot of a cluster (ties broken by ``time``); consumers use
    it for latest-wins: an older snapshot still queued when a newer one was seen is skipped.
    """

    kind: ClassVar[str] = "snapshots"

    time: FiniteFloat = Field(description="snapshot time, seconds on the cluster clock")
    sequence: int = Field(ge=0, description="per-cluster snapshot counter (latest wins)")
    pending: tuple[PendingJob, ...] = Field(max_length=HARD_MAX_ITEMS)
    running: tuple[RunningJob, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    nodes: tuple[NodeState, ...] = Field(min_length=1, max_length=HARD_MAX_ITEMS)

    @field_validator("pending")
    @classmethod
    def _pending_limits(cls, value: tuple[PendingJob, ...], info: ValidationInfo) -> tuple[PendingJob, ...]:
        check_count("pending", len(value), limits_of(info).max_jobs)
        require_unique("pending job_id", (j.job_id for j in value))
        return value

    @field_validator("running")
    @classmethod
    def _running_limits(cls, value: tuple[RunningJob, ...], info: ValidationInfo) -> tuple[RunningJob, ...]:
        check_count("running", len(value), limits_of(info).max_running)
        require_unique("running job_id", (j.job_id for j in value))
        return value

    @field_validator("nodes")
    @classmethod
    def _node_limits(cls, value: tuple[NodeState, ...], info: ValidationInfo) -> tuple[NodeState, ...]:
        check_count("nodes", len(value), limits_of(info).max_nodes)
        require_unique("node name", (n.name for n in value))
        return value

    @model_validator(mode="after")
    def _running_on_known_nodes(self) -> QueueSnapshot:
        names = {n.name for n in self.nodes}
        for job in self.running:
            for node in job.nodes:
                if node not in names:
                    raise ValueError(f"running job {job.job_id!r} is on node {node!r}, absent from nodes")
        return self

    def latest_key(self) -> tuple[int, float]:
        """Order of snapshots of one cluster: higher is newer."""
        return (self.sequence, self.time)
