"""QueueSnapshot: what an adapter reports about one cluster at one moment.

Why columns (``shared.schemas.columns``): a big cluster reports a queue of a thousand jobs,
thousands of running jobs and nodes, and every hop of the pipeline decodes them. On the 1,213-node
openb cluster with 6,120 running pods and 1,024 queued, one object per row made decoding a snapshot
cost about 20 ms (schema version 1); columns for running jobs and nodes (version 2) about 8.6 ms,
of which the 1,024 pending-job objects took 2.7 ms and the running jobs' per-job node lists most of
the rest. Version 3 sends the pending jobs as columns too, and the running jobs' node names as one
flat column with a per-job count; version 4 sends those nodes as positions in the snapshot's node
table (``RunningJobs.node_index``: 24 instead of 166 kB on openb). ``PendingJob``, ``RunningJob``
and ``NodeState`` stay as the row types: ``PendingJobs.of(rows)`` (and the others' ``of``) builds
the columns from rows, and iterating the columns yields rows again.

``shared.schemas.views`` turns the snapshot into the featurizer's numpy arrays once, on arrival.

Units as everywhere in Hylo: seconds on the cluster's clock, CPUs in milli-cores, memory in MiB,
GPUs as a count plus a per-GPU share in milli-GPUs (1000 = whole GPUs).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import compress, repeat
from operator import gt
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from shared.schemas.base import JOB_ID_MAX_LENGTH, FiniteFloat, JobId, Message, Name, NonNegFloat, Strict
from shared.schemas.coded import Coded
from shared.schemas.columns import Columns, FlatNodeColumns, check_flat, check_job_ids, pick, require_unique
from shared.schemas.limits import check_count, limits_of
from shared.schemas.numbers import Packed, max_of

WHOLE = 1000
#: hard caps that hold whatever the configured limits say (they bound the JSON Schema too)
HARD_MAX_ITEMS = 1_000_000

NodeState_ = Literal["up", "drain", "down"]
#: a job id in a column: its characters are checked once for the whole column (``check_job_ids``)
ColumnJobId = Annotated[str, Field(min_length=1, max_length=JOB_ID_MAX_LENGTH)]
GpuCount = Annotated[int, Field(ge=0, le=100_000)]
GpuMilli = Annotated[int, Field(ge=1, le=WHOLE)]
NodeNames = Annotated[tuple[Name, ...], Field(min_length=1, max_length=4096)]
NonNegInt = Annotated[int, Field(ge=0)]
MaybeGiven = Annotated[int, Field(ge=-1)]
#: every column of numbers, packed on the wire (schema version 5, ``shared.schemas.numbers``)
_MAX = Field(max_length=HARD_MAX_ITEMS)
PACKED = Packed()
FloatColumn = Annotated[tuple[FiniteFloat, ...], _MAX, PACKED]
NonNegFloatColumn = Annotated[tuple[NonNegFloat, ...], _MAX, PACKED]
GpuCountColumn = Annotated[tuple[GpuCount, ...], _MAX, PACKED]
GpuMilliColumn = Annotated[tuple[GpuMilli, ...], _MAX, PACKED]
MaybeGivenColumn = Annotated[tuple[MaybeGiven, ...], _MAX, PACKED]
NonNegIntColumn = Annotated[tuple[NonNegInt, ...], _MAX, PACKED]
#: columns of names that repeat (groups, users, partitions, QoS), dictionary-coded on the wire
#: (schema version 5, ``shared.schemas.coded``)
NameColumn = Annotated[tuple[Name, ...], _MAX, Coded()]


def _fractional_only_single(gpus: int, gpu_milli: int) -> None:
    if gpu_milli < WHOLE and gpus != 1:
        raise ValueError(f"gpu_milli {gpu_milli} < 1000 (a GPU share) requires gpus == 1, got gpus {gpus}")


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


PENDING_COLUMNS = (
    "job_id",
    "submit_s",
    "gpus",
    "gpu_milli",
    "gpu_types",
    "cpus_milli",
    "mem_mib",
    "est_runtime_s",
    "user",
    "partition",
    "qos",
)
NODE_COLUMNS = ("name", "group", "free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib", "state")


_SINGLE = frozenset({1})


def _check_shares(owner: str, ids: Sequence[str], gpus: Sequence[int], milli: Sequence[int]) -> None:
    """A GPU share (gpu_milli < 1000) is only valid on a single-GPU job; name the first row that breaks it.

    The common case runs at C speed: every share's job asks for exactly one GPU (``compress`` keeps
    the GPU counts of the share rows, none when there is no share; a third of openb's 6,120 running
    pods are shares, which a Python loop checked in 0.4 ms per decode). ``operator.gt`` over
    ``repeat(WHOLE)`` rather than the bound ``WHOLE.__gt__``: a builtin function is called about
    twice as fast as a method wrapper (0.39 -> 0.19 ms for the running pods, a minimum taken first
    included). Only a column that breaks the rule is walked, to name the row.
    """
    g, m = getattr(gpus, "array", None), getattr(milli, "array", None)
    if g is not None and m is not None and len(g) == len(m):
        if not ((m < WHOLE) & (g != 1)).any():
            return  # packed columns (``shared.schemas.numbers``): one vectorized test
    elif len(gpus) == len(milli) and _SINGLE.issuperset(compress(gpus, map(gt, repeat(WHOLE), milli))):
        return  # every share is on a single GPU
    for i, (g, m) in enumerate(zip(gpus, milli, strict=True)):
        if m < WHOLE and g != 1:
            raise ValueError(
                f"{owner} job {ids[i]!r} (entry {i}): gpu_milli {m} < 1000 (a GPU share) "
                f"requires gpus == 1, got gpus {g}"
            )


class PendingJobs(Columns[PendingJob]):
    """The pending jobs as columns: entry ``i`` of every column describes job ``i`` (see ``PendingJob``).

    Every column must be given, all of the same length (all empty: an empty queue); ``-1`` CPUs or
    memory mean "not given", an empty ``gpu_types`` entry "any type". Iterating yields ``PendingJob``
    rows; ``PendingJobs.of(rows)`` builds the columns from rows.
    """

    ROW: ClassVar[type[BaseModel]] = PendingJob
    COLUMNS: ClassVar[tuple[str, ...]] = PENDING_COLUMNS
    OWNER: ClassVar[str] = "pending"

    job_id: tuple[ColumnJobId, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    submit_s: FloatColumn = Field(default=(), description="submit time, seconds on the cluster clock")
    gpus: GpuCountColumn = Field(default=(), description="whole GPUs (1 for a fractional job)")
    gpu_milli: GpuMilliColumn = Field(default=(), description="per-GPU share, 1000 = whole")
    gpu_types: Annotated[
        tuple[Annotated[tuple[Name, ...], Field(max_length=64)], ...], _MAX, Coded(depth=2)
    ] = Field(default=(), description="allowed GPU types per job; empty = any")
    cpus_milli: MaybeGivenColumn = Field(default=(), description="milli-cores, -1 = not given")
    mem_mib: MaybeGivenColumn = Field(default=(), description="MiB, -1 = not given")
    est_runtime_s: NonNegFloatColumn = Field(
        default=(), description="requested time limit / runtime estimate, seconds"
    )
    user: NameColumn = Field(default=())
    partition: NameColumn = Field(default=(), description="partition / virtual cluster")
    qos: NameColumn = Field(default=())

    @model_validator(mode="after")
    def _rows_agree(self) -> PendingJobs:
        self._lengths()
        check_job_ids("pending", self.job_id)
        _check_shares("pending", self.job_id, self.gpus, self.gpu_milli)
        return self

    @property
    def job_ids(self) -> tuple[str, ...]:
        return self.job_id


class RunningJobs(FlatNodeColumns[RunningJob]):
    """The running jobs as columns: entry ``i`` of every column describes job ``i`` (see ``RunningJob``).

    The nodes are flat: job ``i`` runs on the next ``node_count[i]`` entries. On the wire they are
    ``node_index``, positions in the snapshot's ``nodes`` (schema version 4; version 3's names,
    ``nodes``, are read too); a ``QueueSnapshot`` fills both forms when it is validated
    (``resolved``), so Python code reads names (``nodes``, ``node_lists()``) or indices alike.
    Columns built from rows (``RunningJobs.of(rows)``, names only) get their indices when the
    snapshot holding them is built. Every column must be given (all empty: no running job).
    Iterating yields ``RunningJob`` rows (with names).
    """

    ROW: ClassVar[type[BaseModel]] = RunningJob
    COLUMNS: ClassVar[tuple[str, ...]] = ("job_id", "node_count", "gpus", "gpu_milli", "start_s", "est_end_s")
    OWNER: ClassVar[str] = "running"

    job_id: tuple[ColumnJobId, ...] = Field(default=(), max_length=HARD_MAX_ITEMS)
    node_count: Annotated[tuple[Annotated[int, Field(ge=1, le=4096)], ...], _MAX, PACKED] = Field(
        default=(), description="how many of ``nodes`` each job runs on"
    )
    node_index: NonNegIntColumn = Field(
        default=(),
        description="the nodes of every job, flat, in job order, as positions in the snapshot's "
        "``nodes`` (schema version 4)",
    )
    nodes: tuple[str, ...] = Field(
        default=(),
        max_length=HARD_MAX_ITEMS,
        exclude=True,
        description="the same nodes by name (version 3's form: read, not written; in Python, filled "
        "from ``node_index`` when the snapshot is validated)",
    )
    gpus: GpuCountColumn = Field(default=())
    gpu_milli: GpuMilliColumn = Field(default=())
    start_s: FloatColumn = Field(default=())
    est_end_s: FloatColumn = Field(default=(), description="start + time limit (estimated end)")

    @model_validator(mode="after")
    def _rows_agree(self) -> RunningJobs:
        self._lengths()
        check_job_ids("running", self.job_id)
        if self.node_index or not self.nodes:
            check_flat(self.OWNER, "node_index", "node_count", len(self.node_index), self.node_count)
        if self.nodes:
            self._check_flat()
        _check_shares("running", self.job_id, self.gpus, self.gpu_milli)
        return self

    def __eq__(self, other: object) -> bool:
        """The same jobs on the same nodes: by name when both have them (``node_index`` is then
        derived from the snapshot's node table), else by index."""
        if type(other) is not type(self):
            return NotImplemented
        if any(getattr(self, c) != getattr(other, c) for c in self.COLUMNS):
            return False
        if self.nodes and other.nodes:
            return self.nodes == other.nodes
        return self.node_index == other.node_index and self.nodes == other.nodes

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, c) for c in self.COLUMNS))

    def first_nodes(self) -> tuple[str, ...]:
        """Each job's first node (where its group is read from)."""
        return pick(self.nodes, self.offsets()[:-1])

    def first_node_index(self) -> tuple[int, ...]:
        """Each job's first node, as its position in the snapshot's ``nodes``."""
        if len(self.node_index) == len(self.node_count):  # every job on one node (pods)
            return self.node_index
        return pick(self.node_index, self.offsets()[:-1])

    def resolved(self, names: Sequence[str]) -> RunningJobs:
        """These columns with both forms of the nodes filled against the snapshot's node ``names``:
        ``node_index`` (what is sent) and ``nodes`` (what Python code reads). ValueError names a
        running job on a node the snapshot does not report, or forms that disagree.

        Why indices on the wire (schema version 4): the names were 166 of the 568 kB of a snapshot of
        the openb cluster (6,120 pods on 1,213 nodes), read by every service that receives it; the
        indices are 24 kB, and the names are rebuilt from the node table at C speed (``pick``).
        """
        n = len(names)
        if self.node_index or not self.nodes:
            index = self.node_index
            if index and max_of(index) >= n:
                flat = next(k for k, v in enumerate(index) if v >= n)
                job = self.job_id[bisect_right(self.offsets(), flat) - 1]
                raise ValueError(
                    f"running job {job!r} is on node index {index[flat]}, the snapshot has {n} nodes"
                )
            on = pick(names, index)
            if self.nodes and self.nodes != on:
                flat = next(k for k, (a, b) in enumerate(zip(self.nodes, on, strict=True)) if a != b)
                raise ValueError(
                    f"running.nodes entry {flat} ({self.nodes[flat]!r}) is not node_index "
                    f"{index[flat]} ({on[flat]!r})"
                )
            return self if self.nodes else self.model_copy(update={"nodes": on})
        position = {name: i for i, name in enumerate(names)}
        try:
            index = tuple(map(position.__getitem__, self.nodes))
        except KeyError:
            for job, nodes in zip(self.job_id, self.node_lists(), strict=True):
                for node in nodes:
                    if node not in position:
                        msg = f"running job {job!r} is on node {node!r}, absent from nodes"
                        raise ValueError(msg) from None
            raise
        return self.model_copy(update={"node_index": index})


class NodeStates(Columns[NodeState]):
    """The nodes as columns: entry ``i`` of every column describes node ``i`` (see ``NodeState``).

    Iterating yields ``NodeState`` rows; ``NodeStates.of(rows)`` builds the columns from rows.
    """

    ROW: ClassVar[type[BaseModel]] = NodeState
    COLUMNS: ClassVar[tuple[str, ...]] = NODE_COLUMNS
    OWNER: ClassVar[str] = "nodes"

    name: tuple[Name, ...] = Field(min_length=1, max_length=HARD_MAX_ITEMS)
    group: NameColumn = Field(description="node group in the cluster spec")
    free_gpus: Annotated[tuple[Annotated[int, Field(ge=0, le=64)], ...], _MAX, PACKED] = Field(
        description="whole GPUs free"
    )
    free_share_milli: Annotated[tuple[Annotated[int, Field(ge=0, le=WHOLE)], ...], _MAX, PACKED] = Field(
        description="largest free share on one GPU (1000 if a whole GPU is free)"
    )
    free_cpus_milli: NonNegIntColumn
    free_mem_mib: NonNegIntColumn
    state: Annotated[tuple[NodeState_, ...], _MAX, Coded()] = Field(
        description="drain/down nodes count as having nothing free"
    )

    @model_validator(mode="after")
    def _rows_agree(self) -> NodeStates:
        self._lengths()
        return self


class QueueSnapshot(Message):
    """One cluster at one moment: pending jobs, running jobs and node states.

    ``sequence`` increases with every snapshot of a cluster (ties broken by ``time``); consumers use
    it for latest-wins: an older snapshot still queued when a newer one was seen is skipped.
    ``pending``, ``running`` and ``nodes`` are columns (``PendingJobs``, ``RunningJobs``,
    ``NodeStates``; build them from rows with their ``of``).
    """

    kind: ClassVar[str] = "snapshots"

    time: FiniteFloat = Field(description="snapshot time, seconds on the cluster clock")
    sequence: int = Field(ge=0, description="per-cluster snapshot counter (latest wins)")
    pending: PendingJobs = Field(default_factory=PendingJobs, description="pending jobs, as columns")
    # before ``running``: its validator reads the node table (``RunningJobs.resolved``)
    nodes: NodeStates = Field(description="node states, as columns")
    running: RunningJobs = Field(default_factory=RunningJobs, description="running jobs, as columns")

    @field_validator("pending")
    @classmethod
    def _pending_limits(cls, value: PendingJobs, info: ValidationInfo) -> PendingJobs:
        check_count("pending", len(value), limits_of(info).max_jobs)
        require_unique("pending job_id", value.job_id)
        return value

    @field_validator("running")
    @classmethod
    def _running_limits(cls, value: RunningJobs, info: ValidationInfo) -> RunningJobs:
        check_count("running", len(value), limits_of(info).max_running)
        require_unique("running job_id", value.job_id)
        nodes = info.data.get("nodes")
        if nodes is None:  # the node table is invalid (reported as such): nothing to resolve against
            return value
        return value.resolved(nodes.name)

    @field_validator("nodes")
    @classmethod
    def _node_limits(cls, value: NodeStates, info: ValidationInfo) -> NodeStates:
        check_count("nodes", len(value), limits_of(info).max_nodes)
        require_unique("node name", value.name)
        return value

    def latest_key(self) -> tuple[int, float]:
        """Order of snapshots of one cluster: higher is newer."""
        return (self.sequence, self.time)
