"""QueueSnapshot: what an adapter reports about one cluster at one moment.

Why columns (``shared.schemas.columns``): a big cluster reports a queue of a thousand jobs,
thousands of running jobs and nodes, and every hop of the pipeline decodes them. On the 1,213-node
openb cluster with 6,120 running pods and 1,024 queued, one object per row made decoding a snapshot
cost about 20 ms (schema version 1); columns for running jobs and nodes (version 2) about 8.6 ms,
of which the 1,024 pending-job objects took 2.7 ms and the running jobs' per-job node lists most of
the rest. Version 3 sends the pending jobs as columns too, and the running jobs' node names as one
flat column with a per-job count; version 4 sends those nodes as positions in the snapshot's node
table (``RunningJobs.node_index``: 24 instead of 166 kB on openb). Version 6 may also carry each
running job's exact allocation (``RunningJobs.node_gpus`` and the other per-node columns, see
``RunningJob``), so that a placer can rebuild the cluster's state as the simulator holds it.
``PendingJob``, ``RunningJob``
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
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from shared.schemas.base import JOB_ID_MAX_LENGTH, FiniteFloat, JobId, Message, Name, NonNegFloat, Strict
from shared.schemas.coded import Coded
from shared.schemas.columns import Columns, FlatNodeColumns, check_flat, check_job_ids, pick, require_unique
from shared.schemas.joined import Joined
from shared.schemas.limits import check_count, limits_of
from shared.schemas.numbers import Packed, column_array, max_of

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
#: a running job's exact allocation (schema version 6, ``RunningJob``): whole GPUs on one node (a
#: node has at most 64 GPUs), milli-cores and MiB on one node, the bitmask of the physical GPUs the
#: whole GPUs are (bit k = GPU k; 0 = not known) and the GPU holding a fractional job's share (-1 =
#: not known, or not a fractional job). Their bounds (``ALLOCATION_BOUNDS``) are checked by the
#: validators of ``RunningJob`` and ``RunningJobs``, which name the job at fault (a flat column's
#: entry is a node of some job); the JSON Schema states them.
MAX_NODE_GPUS = 64
ALLOCATION_BOUNDS: dict[str, tuple[int, int | None]] = {
    "node_gpus": (0, MAX_NODE_GPUS),
    "node_cpus_milli": (0, None),
    "node_mem_mib": (0, None),
    "node_gpu_mask": (0, 2**MAX_NODE_GPUS - 1),
    "share_gpu": (-1, MAX_NODE_GPUS - 1),
}
NodeGpus = Annotated[int, Field(json_schema_extra={"minimum": 0, "maximum": MAX_NODE_GPUS})]
NodeAmount = Annotated[int, Field(json_schema_extra={"minimum": 0})]
GpuMask = Annotated[int, Field(json_schema_extra={"minimum": 0, "maximum": 2**MAX_NODE_GPUS - 1})]
ShareGpu = Annotated[int, Field(json_schema_extra={"minimum": -1, "maximum": MAX_NODE_GPUS - 1})]
NodeGpusColumn = Annotated[tuple[NodeGpus, ...], _MAX, PACKED]
NodeAmountColumn = Annotated[tuple[NodeAmount, ...], _MAX, PACKED]
GpuMaskColumn = Annotated[tuple[GpuMask, ...], _MAX, PACKED]
ShareGpuColumn = Annotated[tuple[ShareGpu, ...], _MAX, PACKED]
#: a column of job ids, joined by spaces on the wire (schema version 8, ``shared.schemas.joined``);
#: their characters are checked by the model's validator (``check_job_ids``)
JobIdColumn = Annotated[tuple[ColumnJobId, ...], _MAX, Joined()]
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


#: the per-node allocation of a running job, given all three or none (schema version 6)
ALLOCATION = ("node_gpus", "node_cpus_milli", "node_mem_mib")
#: per-node columns of a running job that may be given only with ``ALLOCATION``
ALLOCATION_EXTRAS = ("node_gpu_mask", "share_gpu")


class RunningJob(Strict):
    """A running job (one row of ``RunningJobs``): the nodes it holds and when it should end.

    Optionally (schema version 6) its exact allocation, one entry per node of ``nodes``:
    ``node_gpus`` (whole GPUs; 0 on every node for a fractional job, whose share is its one GPU of
    ``gpu_milli``), ``node_cpus_milli`` and ``node_mem_mib``, given all three or none (empty = not
    given); with them ``node_gpu_mask`` (which physical GPUs those whole GPUs are: bit ``k`` = GPU
    ``k``, popcount = ``node_gpus``; an entry 0 = not known; empty = not given) and ``share_gpu``
    (a fractional job's GPU on its first node; -1 = not known, and always for other jobs).
    """

    job_id: JobId
    nodes: tuple[Name, ...] = Field(min_length=1, max_length=4096, description="node names it runs on")
    gpus: int = Field(ge=0, le=100_000)
    gpu_milli: int = Field(default=WHOLE, ge=1, le=WHOLE)
    start_s: FiniteFloat
    est_end_s: FiniteFloat = Field(description="start + time limit (estimated end)")
    node_gpus: tuple[NodeGpus, ...] = Field(
        default=(),
        max_length=4096,
        description="whole GPUs held on each of nodes (0s for a fractional job); empty = not given",
    )
    node_cpus_milli: tuple[NodeAmount, ...] = Field(
        default=(), max_length=4096, description="milli-cores held on each of nodes; empty = not given"
    )
    node_mem_mib: tuple[NodeAmount, ...] = Field(
        default=(), max_length=4096, description="MiB held on each of nodes; empty = not given"
    )
    node_gpu_mask: tuple[GpuMask, ...] = Field(
        default=(),
        max_length=4096,
        description="per node, the physical GPUs its whole GPUs are (bit k = GPU k; 0 = not known); "
        "empty = not given",
    )
    share_gpu: ShareGpu = Field(
        default=-1,
        description="a fractional job's GPU (physical index) on its first node; -1 = not known or "
        "not a fractional job",
    )

    @model_validator(mode="after")
    def _share(self) -> RunningJob:
        _fractional_only_single(self.gpus, self.gpu_milli)
        _check_row_allocation(self)
        return self


def _check_row_allocation(job: RunningJob) -> None:
    """``job``'s allocation (if given) fits its nodes and GPUs; ValueError naming the job and field."""
    where = f"running job {job.job_id!r}"
    if not _within(job.share_gpu, *ALLOCATION_BOUNDS["share_gpu"]):
        raise ValueError(f"{where}: share_gpu is {job.share_gpu}, expected {_bounds_words('share_gpu')}")
    given = [f for f in ALLOCATION if getattr(job, f)]
    if not given:
        if job.node_gpu_mask:
            raise ValueError(f"{where}: node_gpu_mask is given without {', '.join(ALLOCATION)}")
        if job.share_gpu != -1:
            raise ValueError(f"{where}: share_gpu {job.share_gpu} is given without {', '.join(ALLOCATION)}")
        return
    if len(given) < len(ALLOCATION):
        missing = [f for f in ALLOCATION if f not in given]
        raise ValueError(
            f"{where}: {', '.join(missing)} not given with {', '.join(given)} "
            f"({', '.join(ALLOCATION)} are given together)"
        )
    n = len(job.nodes)
    for f in (*ALLOCATION, "node_gpu_mask"):
        values = getattr(job, f)
        if values and len(values) != n:
            raise ValueError(f"{where}: {f} has {len(values)} entries, expected {n} (one per node)")
        k = _first_outside(values, *ALLOCATION_BOUNDS[f])
        if k is not None:
            raise ValueError(f"{where}: {f} entry {k} is {values[k]}, expected {_bounds_words(f)}")
    problem = _allocation_problem(job.gpus, job.gpu_milli, job.node_gpus, job.node_gpu_mask, job.share_gpu)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")


def _within(value: int, lo: int, hi: int | None) -> bool:
    return lo <= value and (hi is None or value <= hi)


def _bounds_words(field: str) -> str:
    lo, hi = ALLOCATION_BOUNDS[field]
    return f"at least {lo}" if hi is None else f"{lo} to {hi}"


def _first_outside(values: Sequence[int], lo: int, hi: int | None) -> int | None:
    """The first entry of ``values`` outside ``[lo, hi]`` (``hi`` None: no upper bound), or None;
    one vectorized pass over a packed column's array."""
    array = getattr(values, "array", None)
    if isinstance(array, np.ndarray):
        bad = array < lo
        if hi is not None and hi < np.iinfo(array.dtype).max:
            bad |= array > hi
        return int(np.argmax(bad)) if bad.any() else None
    return next((k for k, v in enumerate(values) if not _within(v, lo, hi)), None)


def _allocation_problem(
    gpus: int, gpu_milli: int, node_gpus: Sequence[int], mask: Sequence[int], share_gpu: int
) -> str | None:
    """What is wrong with one job's per-node GPUs (``mask`` empty: not given), or None."""
    if gpu_milli < WHOLE:
        if any(node_gpus):
            return f"node_gpus {tuple(node_gpus)} must be all 0 for a fractional job (gpu_milli {gpu_milli})"
    else:
        if sum(node_gpus) != gpus:
            return f"node_gpus {tuple(node_gpus)} sum to {sum(node_gpus)}, expected gpus {gpus}"
        if share_gpu != -1:
            return f"share_gpu {share_gpu} must be -1 for a job of whole GPUs (gpu_milli {gpu_milli})"
    for k, (m, g) in enumerate(zip(mask, node_gpus, strict=True)):
        if m and m.bit_count() != g:
            return (
                f"node_gpu_mask entry {k} ({m:#x}) names {m.bit_count()} GPUs, expected node_gpus "
                f"{g} (or 0: not known)"
            )
    return None


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

    job_id: JobIdColumn = Field(default=())
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
    snapshot holding them is built. Every column must be given (all empty: no running job), except
    the allocation's (schema version 6): ``node_gpus``, ``node_cpus_milli``, ``node_mem_mib`` and
    ``node_gpu_mask`` are flat like the nodes (entry ``k`` belongs to the ``k``-th flat node) and
    ``share_gpu`` has one entry per job; each is empty (not given, for every job) or complete, the
    first three are given together or not at all, and the last two only with them
    (``allocations_given``). Iterating yields ``RunningJob`` rows (with names).
    """

    ROW: ClassVar[type[BaseModel]] = RunningJob
    COLUMNS: ClassVar[tuple[str, ...]] = (
        "job_id",
        "node_count",
        "gpus",
        "gpu_milli",
        "start_s",
        "est_end_s",
        "share_gpu",
    )
    FLAT_COLUMNS: ClassVar[tuple[str, ...]] = ("nodes", *ALLOCATION, "node_gpu_mask")
    OPTIONAL_COLUMNS: ClassVar[frozenset[str]] = frozenset({*ALLOCATION, *ALLOCATION_EXTRAS})
    OWNER: ClassVar[str] = "running"

    job_id: JobIdColumn = Field(default=())
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
    node_gpus: NodeGpusColumn = Field(
        default=(),
        description="whole GPUs each job holds on each of its nodes, flat like node_index (0s for a "
        "fractional job); empty = not given (schema version 6)",
    )
    node_cpus_milli: NodeAmountColumn = Field(
        default=(),
        description="milli-cores each job holds on each of its nodes, flat like node_index; empty = "
        "not given (schema version 6)",
    )
    node_mem_mib: NodeAmountColumn = Field(
        default=(),
        description="MiB each job holds on each of its nodes, flat like node_index; empty = not given "
        "(schema version 6)",
    )
    node_gpu_mask: GpuMaskColumn = Field(
        default=(),
        description="per node of each job, flat like node_index, the physical GPUs its whole GPUs "
        "are (bit k = GPU k, popcount = node_gpus; 0 = not known); empty = not given (schema "
        "version 6)",
    )
    share_gpu: ShareGpuColumn = Field(
        default=(),
        description="per job, a fractional job's GPU (physical index) on its first node (-1 = not "
        "known, and for every other job); empty = not given (schema version 6)",
    )

    @model_validator(mode="after")
    def _rows_agree(self) -> RunningJobs:
        self._lengths()
        check_job_ids("running", self.job_id)
        if self.node_index or not self.nodes:
            check_flat(self.OWNER, "node_index", "node_count", len(self.node_index), self.node_count)
        if self.nodes:
            self._check_flat()
        _check_shares("running", self.job_id, self.gpus, self.gpu_milli)
        self._check_allocations()
        return self

    @classmethod
    def _flat_columns(cls, rows: tuple[Any, ...]) -> dict[str, Any]:
        """The columns of ``rows``; ``share_gpu`` only with the allocation (a row's -1 without it is
        its default, not a value given)."""
        cols = super()._flat_columns(rows)
        if not cols["node_gpus"]:
            cols["share_gpu"] = ()
        return cols

    def allocations_given(self) -> bool:
        """True when the per-node allocation columns (``node_gpus``, ``node_cpus_milli``,
        ``node_mem_mib``) are given; False when they are not (and with no running job at all)."""
        return self.given("node_gpus")

    def share_gpus(self) -> tuple[int, ...]:
        """``share_gpu``, or -1 (not known) for every job when it is not given."""
        return self.share_gpu if self.given("share_gpu") else (-1,) * len(self)

    def _check_allocations(self) -> None:
        """The allocation columns are given together, complete, and fit each job's GPUs; ValueError
        naming the job and the field at fault. Checked in a few vectorized passes (a snapshot may
        hold thousands of running jobs), a row at a time only to word the error."""
        if self.given("share_gpu"):
            i = _first_outside(self.share_gpu, *ALLOCATION_BOUNDS["share_gpu"])
            if i is not None:
                raise ValueError(
                    f"running job {self.job_id[i]!r} (entry {i}): share_gpu is {self.share_gpu[i]}, "
                    f"expected {_bounds_words('share_gpu')}"
                )
        given = [c for c in ALLOCATION if self.given(c)]
        if not given:
            for c in ALLOCATION_EXTRAS:
                if self.given(c):
                    raise ValueError(f"running.{c} is given without running.{', running.'.join(ALLOCATION)}")
            return
        if len(given) < len(ALLOCATION):
            missing = [c for c in ALLOCATION if c not in given]
            raise ValueError(
                f"running.{', running.'.join(missing)} not given with running.{', running.'.join(given)} "
                f"({', '.join(ALLOCATION)} are given together)"
            )
        counts = column_array(self.node_count, np.int64)
        total = int(counts.sum())
        for c in (*ALLOCATION, "node_gpu_mask"):
            values = getattr(self, c)
            if not values:
                continue
            if len(values) != total:
                self._flat_length_error(c, len(values), total)
            k = _first_outside(values, *ALLOCATION_BOUNDS[c])
            if k is not None:
                offsets = self.offsets()
                i = bisect_right(offsets, k) - 1
                raise ValueError(
                    f"running job {self.job_id[i]!r} (entry {i}): {c} entry {k - offsets[i]} is "
                    f"{values[k]}, expected {_bounds_words(c)}"
                )
        # per job: its nodes' entries summed (taken as they are when every job runs on one node, as
        # the pods of a Kubernetes cluster do)
        pods = total == len(counts)
        starts = None if pods else np.cumsum(counts) - counts
        node_gpus = column_array(self.node_gpus, np.int64)
        whole = column_array(self.gpu_milli, np.int64) == WHOLE
        expected = np.where(whole, column_array(self.gpus, np.int64), 0)
        bad = (node_gpus if starts is None else np.add.reduceat(node_gpus, starts)) != expected
        if self.given("share_gpu"):
            bad |= whole & (column_array(self.share_gpu, np.int64) != -1)
        if self.given("node_gpu_mask"):
            masks = _masks(self.node_gpu_mask)
            wrong = (masks != 0) & (_popcount(masks) != node_gpus)
            bad |= wrong if starts is None else np.logical_or.reduceat(wrong, starts)
        if bad.any():
            i = int(np.argmax(bad))
            offsets = self.offsets()
            start, end = offsets[i], offsets[i + 1]
            mask = self.node_gpu_mask[start:end] if self.given("node_gpu_mask") else ()
            problem = _allocation_problem(
                self.gpus[i], self.gpu_milli[i], self.node_gpus[start:end], mask, self.share_gpus()[i]
            )
            raise ValueError(f"running job {self.job_id[i]!r} (entry {i}): {problem}")

    def _flat_length_error(self, column: str, n: int, total: int) -> None:
        """Raise: flat ``column`` has ``n`` entries where the jobs' nodes add up to ``total``."""
        offsets = self.offsets()
        if not self.job_id:
            where = "there is no running job"
        elif n < total:  # the first job whose nodes reach past the column's end
            i = bisect_right(offsets, n) - 1
            where = f"the entries of job {self.job_id[i]!r} (entry {i}) onward are missing"
        else:
            i = len(self.job_id) - 1
            where = f"{n - total} more than the last job, {self.job_id[i]!r} (entry {i}), needs"
        raise ValueError(
            f"running.{column} has {n} entries, expected {total} (one per node of every job, the sum "
            f"of running.node_count): {where}"
        )

    def __eq__(self, other: object) -> bool:
        """The same jobs on the same nodes: by name when both have them (``node_index`` is then
        derived from the snapshot's node table), else by index; with the same allocations (an
        unknown ``share_gpu`` equals -1 for every job)."""
        if type(other) is not type(self):
            return NotImplemented
        if any(getattr(self, c) != getattr(other, c) for c in self._compared()):
            return False
        if self.share_gpus() != other.share_gpus():
            return False
        if self.nodes and other.nodes:
            return self.nodes == other.nodes
        return self.node_index == other.node_index and self.nodes == other.nodes

    def __hash__(self) -> int:
        return hash((*(getattr(self, c) for c in self._compared()), self.share_gpus()))

    def _compared(self) -> tuple[str, ...]:
        """The columns ``__eq__`` compares as they are (not the nodes, not ``share_gpu``)."""
        return (*(c for c in self.COLUMNS if c != "share_gpu"), *self.FLAT_COLUMNS[1:])

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


def _masks(values: Sequence[int]) -> npt.NDArray[np.uint64]:
    """GPU masks as uint64 (a mask with bit 63 set does not fit int64: such a column stays a tuple)."""
    array = getattr(values, "array", None)
    if isinstance(array, np.ndarray):
        return array.astype(np.uint64)
    return np.array(values, dtype=np.uint64).reshape(len(values))


def _popcount(masks: npt.NDArray[np.uint64]) -> npt.NDArray[Any]:
    """The number of bits set in each mask."""
    count = getattr(np, "bitwise_count", None)  # numpy >= 2
    if count is not None:
        return np.asarray(count(masks), dtype=np.int64)
    bits = np.unpackbits(masks.astype("<u8").view(np.uint8).reshape(len(masks), 8), axis=1)
    total: npt.NDArray[Any] = bits.sum(axis=1, dtype=np.int64)
    return total


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
        check_count("running", len(value), limits_of(info).max_running, "max_running")
        require_unique("running job_id", value.job_id)
        nodes = info.data.get("nodes")
        if nodes is None:  # the node table is invalid (reported as such): nothing to resolve against
            return value
        return value.resolved(nodes.name)

    @field_validator("nodes")
    @classmethod
    def _node_limits(cls, value: NodeStates, info: ValidationInfo) -> NodeStates:
        check_count("nodes", len(value), limits_of(info).max_nodes, "max_nodes")
        require_unique("node name", value.name)
        return value

    def latest_key(self) -> tuple[int, float]:
        """Order of snapshots of one cluster: higher is newer."""
        return (self.sequence, self.time)
