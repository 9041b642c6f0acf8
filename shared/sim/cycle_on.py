"""One scheduling cycle of the simulator, run on a cluster described from outside.

Why this exists: Hylo trains and measures its policies in the simulator and deploys them through
the placer service, so both must make the same decision on the same cluster. Instead of a second
EASY walk, the placer describes the cluster it was sent (running jobs with their allocations and
estimated ends, what else is held, the pending jobs in the pipeline's order) and this module runs
the simulator's own loop (``Simulator.run(resume=...)``) for exactly one cycle on it: the same
ordering, reservations, backfill and placement calls, speed shortcuts included.

How the described cluster becomes a simulator run: the pending jobs are the rows of a small bound
workload, all arriving at ``now`` in rank order, ordered by a policy whose keys are the ranks (their
own submit times play no part: the order is the pipeline's). The running jobs are resumed on their
allocations under ids past the last row (their true ends unknown, their estimated ends planned by
the reservations). Those ids play no part either: reservations release running jobs with the same
estimated end in the order they started (``Resume``: by start time, then as listed), the order the
simulator releases them in, so ``running`` lists jobs that started at the same time in the order
they were started (``CycleOutcome.starts`` is in that order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, overload

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray, IntArray, build_table
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import I64, Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.run_state import ResumedJobs
from shared.sim.simulator import Resume, Simulator

if TYPE_CHECKING:
    from shared.placement import CpSatPlacer

__all__ = [
    "CycleOutcome",
    "PendingColumns",
    "PendingRequest",
    "RankedOrder",
    "RunningAt",
    "RunningColumns",
    "cycle_on",
]


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A pending job's request, bound to the cluster (CPUs and memory filled, groups found)."""

    gpus: int
    milli: int
    cpus_milli: int
    mem_mib: int
    groups: tuple[int, ...]
    est_runtime_s: float


@dataclass(frozen=True, slots=True)
class RunningAt:
    """A running job: where it runs, since when, and when it is estimated to end."""

    alloc: Alloc
    start_s: float
    est_end_s: float


@dataclass(frozen=True, eq=False)
class PendingColumns:
    """The pending requests of a cycle as columns, in rank order (what ``PendingRequest``s say).

    Why: a queue of 50,000 jobs as ``PendingRequest`` objects cost about 80 ms to build in the
    placer and as much again to read back into the cycle's workload; as arrays it is a few numpy
    gathers. ``cycle_on`` takes either form.
    """

    gpus: I64
    milli: I64
    cpus_milli: I64
    mem_mib: I64
    #: each job's eligible node groups
    groups: Sequence[tuple[int, ...]]
    est_runtime_s: FloatArray

    def __post_init__(self) -> None:
        n = len(self.gpus)
        sizes = (
            len(self.milli),
            len(self.cpus_milli),
            len(self.mem_mib),
            len(self.groups),
            len(self.est_runtime_s),
        )
        if any(k != n for k in sizes):
            raise ValueError("PendingColumns columns must have one entry per pending job")

    def __len__(self) -> int:
        return len(self.gpus)

    @staticmethod
    def of(pending: Sequence[PendingRequest]) -> PendingColumns:
        """``pending`` as columns, in its order."""
        return PendingColumns(
            gpus=np.array([p.gpus for p in pending], dtype=np.int64),
            milli=np.array([p.milli for p in pending], dtype=np.int64),
            cpus_milli=np.array([p.cpus_milli for p in pending], dtype=np.int64),
            mem_mib=np.array([p.mem_mib for p in pending], dtype=np.int64),
            groups=[p.groups for p in pending],
            est_runtime_s=np.array([p.est_runtime_s for p in pending], dtype=np.float64),
        )


class RunningColumns(Sequence[RunningAt]):
    """Running jobs (``RunningAt``, in their order) with their start times, estimated ends, node
    groups and milli-GPU shares as arrays.

    Why: ``cycle_on`` needs those columns of every running job (the resumed jobs' orders, the
    groups that track shares); a described cluster (``shared.schemas.snapshot_cluster``) has them
    as arrays already, where reading them back from 68,294 objects cost tens of milliseconds.
    """

    __slots__ = ("est_end_s", "group", "jobs", "milli", "start_s")

    def __init__(
        self, jobs: Sequence[RunningAt], start_s: FloatArray, est_end_s: FloatArray, group: I64, milli: I64
    ) -> None:
        if not len(start_s) == len(est_end_s) == len(group) == len(milli) == len(jobs):
            raise ValueError("RunningColumns columns must have one entry per running job")
        self.jobs = jobs
        self.start_s, self.est_end_s, self.group, self.milli = start_s, est_end_s, group, milli

    @staticmethod
    def of(running: Sequence[RunningAt]) -> RunningColumns:
        """``running`` with its columns read from the objects."""
        if isinstance(running, RunningColumns):
            return running
        return RunningColumns(
            running,
            np.array([r.start_s for r in running], dtype=np.float64),
            np.array([r.est_end_s for r in running], dtype=np.float64),
            np.array([r.alloc.group for r in running], dtype=np.int64),
            np.array([r.alloc.milli for r in running], dtype=np.int64),
        )

    def __len__(self) -> int:
        return len(self.jobs)

    @overload
    def __getitem__(self, k: int) -> RunningAt: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[RunningAt]: ...
    def __getitem__(self, k: int | slice) -> RunningAt | Sequence[RunningAt]:
        return self.jobs[k]

    def __iter__(self) -> Iterator[RunningAt]:
        return iter(self.jobs)


@dataclass
class CycleOutcome:
    """What one cycle decided, by position in the ranked pending list."""

    #: position -> allocation, in the order the cycle started them (a later cycle's ``running``
    #: lists them so: reservations release ties in estimated end in start order)
    starts: dict[int, Alloc]
    #: EASY reservations: the time a blocked job is planned to start
    reserved: dict[int, float]
    #: the CP-SAT batch placer's status in this cycle (None: best-fit, or no solve)
    status: str | None = None
    stats: dict[str, float] = field(default_factory=dict)


class RankedOrder(Policy):
    """Keys that are the row index: the pending rows are laid out in the pipeline's rank order.

    One order class (every job in arrival = rank order) lets the simulator take its class-head
    shortcuts on long queues, exactly as for a base policy.
    """

    name = "ranked"

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return np.asarray(idx, dtype=np.float64)

    def key(self, j: int, now: float) -> float:
        return float(j)

    def order_classes(self) -> IntArray | None:
        return np.zeros(len(self.ctx.workload.jobs), dtype=np.int64)


def _with_gpu_ids(spec: ClusterSpec, allocs: Sequence[Alloc], track: set[int]) -> list[Alloc]:
    """``allocs`` with physical GPU ids where a tracked group needs them and they are not known:
    the lowest GPUs the given ids leave free (a share on the GPU with the least room that holds it).

    Why: a group that tracks shares takes whole GPUs by id; a description that does not say which
    GPUs a job holds (a Slurm adapter, usually) must still take as many.
    """
    used: dict[tuple[int, int], list[int]] = {}  # (group, node) -> milli-GPUs used per GPU

    def row(g: int, i: int) -> list[int]:
        return used.setdefault((g, i), [0] * spec.node_groups[g].gpus)

    for a in allocs:  # known ids first, so the unknown ones go around them
        if a.group in track and a.gpu_ids is not None:
            for k, i in enumerate(a.nodes):
                for gpu in a.gpu_ids[k]:
                    row(a.group, i)[gpu] = WHOLE_GPU_MILLI
        if a.group in track and a.frac_gpu >= 0:
            row(a.group, a.nodes[0])[a.frac_gpu] += a.milli
    out: list[Alloc | None] = [None] * len(allocs)
    # whole GPUs first, then shares from the largest (best fit: the fullest GPU that holds each)
    todo = sorted(range(len(allocs)), key=lambda k: (allocs[k].milli > 0, -allocs[k].milli, k))
    for k in todo:
        a = allocs[k]
        if a.group not in track or (a.milli and a.frac_gpu >= 0) or (not a.milli and a.gpu_ids is not None):
            out[k] = a
            continue
        if a.milli:
            r = row(a.group, a.nodes[0])
            room = [(WHOLE_GPU_MILLI - u, gpu) for gpu, u in enumerate(r) if WHOLE_GPU_MILLI - u >= a.milli]
            if not room:
                raise ValueError(f"node {a.nodes[0]} of group {a.group}: no GPU holds a share of {a.milli}")
            frac = min(room)[1]
            r[frac] += a.milli
            out[k] = Alloc(
                a.group, list(a.nodes), list(a.whole), list(a.cpu), list(a.mem), None, frac, a.milli
            )
            continue
        ids: list[list[int]] = []
        for e, i in enumerate(a.nodes):
            r = row(a.group, i)
            free = [gpu for gpu, u in enumerate(r) if u == 0][: a.whole[e]]
            if len(free) < a.whole[e]:
                raise ValueError(f"node {i} of group {a.group}: more whole GPUs held than it has")
            for gpu in free:
                r[gpu] = WHOLE_GPU_MILLI
            ids.append(free)
        out[k] = Alloc(a.group, list(a.nodes), list(a.whole), list(a.cpu), list(a.mem), ids)
    return [a for a in out if a is not None]


def _workload(
    spec: ClusterSpec, now: float, pending: PendingColumns, node_slack: int
) -> tuple[BoundWorkload, FloatArray]:
    """The pending jobs (rank order, all arrived at ``now``) as a bound workload, and their runtime
    estimates. The running jobs are no rows of it: ``Resume`` gives them ids past its last row."""
    n = len(pending)
    gpus, milli = pending.gpus, pending.milli
    est = np.maximum(pending.est_runtime_s, 0.0)
    # classes (eligible groups) and shapes numbered by first appearance
    class_index = {g: k for k, g in enumerate(dict.fromkeys(pending.groups))}
    job_class = np.fromiter(map(class_index.__getitem__, pending.groups), dtype=np.int64, count=n)
    shape = _first_appearance(gpus, milli, job_class)
    table = build_table(
        ids=_pending_ids(n),
        submit=np.full(n, now, dtype=np.float64),
        runtime=est,
        estimate=est,
        gpus=gpus,
        gpu_milli=milli,
        cpus_milli=pending.cpus_milli,
        mem_mib=pending.mem_mib,
    )
    bound = BoundWorkload(
        spec=spec,
        jobs=table,
        job_class=job_class,
        class_groups=list(class_index),
        shape=shape,
        node_slack=node_slack,
    )
    return bound, est


_ids: npt.NDArray[np.str_] = np.zeros(0, dtype=np.str_)


def _pending_ids(n: int) -> npt.NDArray[np.str_]:
    """``pending-0``, ``pending-1``, ...: the ids of the cycle's rows (read by nothing but a
    person debugging), as a view of one array kept across cycles: built per cycle, 50,000 of them
    cost tens of milliseconds."""
    global _ids
    if len(_ids) < n:
        _ids = np.strings.add("pending-", np.arange(max(n, 2 * len(_ids))).astype(np.str_))
    return _ids[:n]


def _first_appearance(*columns: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Ids of the distinct rows of ``columns`` (aligned int arrays), numbered in the order they
    first appear: one 1-D ``np.unique`` on a key that combines the columns (50,000 rows of three
    columns took tens of milliseconds with ``np.unique(axis=0)``). A column with negative or
    wide values enters the key as its values' ranks."""
    n = len(columns[0])
    if not n:
        return np.zeros(0, np.int64)
    key = np.zeros(n, dtype=np.int64)
    width = 1
    for c in columns:
        lo, hi = int(c.min()), int(c.max())
        if lo < 0 or (hi + 1) * width >= 2**62:
            c = np.unique(c, return_inverse=True)[1].reshape(-1)
            hi = int(c.max())
            if (hi + 1) * width >= 2**62:  # ranks of the key so far, to make room
                key = np.unique(key, return_inverse=True)[1].reshape(-1)
                width = int(key.max()) + 1
        key = key * (hi + 1) + c
        width *= hi + 1
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    out: npt.NDArray[np.int64] = rank[inverse.reshape(-1)]
    return out


def cycle_on(
    spec: ClusterSpec,
    now: float,
    running: Sequence[RunningAt],
    pending: Sequence[PendingRequest] | PendingColumns,
    config: SimConfig,
    *,
    blocked: Sequence[Alloc] = (),
    track: set[int] | None = None,
    batch_placer: CpSatPlacer | None = None,
    state_of: Callable[[set[int]], ClusterState | None] | None = None,
) -> CycleOutcome:
    """The simulator's scheduling cycle at ``now`` on this cluster: which of ``pending`` (in rank
    order, highest first) start where, and the reservations of those that wait.

    ``running``: jobs that started at the same time in the order they started (the order of a
    ``CycleOutcome.starts``); their order otherwise plays no part. ``RunningColumns`` carries their
    columns ready-made. ``pending``: requests, or the same as ``PendingColumns``.

    ``blocked``: resources no reservation may plan on (drained, down or unreported nodes; use the
    cluster attributes to no job). ``track``: the node groups that keep per-GPU shares (by default
    those of the fractional jobs, running or pending). ``batch_placer``: the CP-SAT placer to use
    when ``config.placement`` is ``"cp-sat"``. ``state_of(track)``: the cluster with ``running`` and
    ``blocked`` taken, built at once (``DescribedCluster.state``), or None to take them one by one;
    on a 1,213-node cluster with 6,120 running pods that saves most of a decision's time.
    """
    if config.reservation != "nodes" and config.backfill == "easy" and config.placement == "cp-sat":
        raise ValueError("count reservations are not available with cp-sat placement")
    columns = pending if isinstance(pending, PendingColumns) else PendingColumns.of(pending)
    jobs = RunningColumns.of(running)
    bound, est = _workload(spec, now, columns, config.node_slack)
    n, n_run = len(columns), len(jobs)
    if track is None:
        track = set(np.unique(jobs.group[jobs.milli != 0]).tolist())  # a share (``Alloc.milli``)
        shares = np.unique(bound.job_class[(columns.gpus != 0) & (columns.milli < WHOLE_GPU_MILLI)]).tolist()
        track |= {g for c in shares for g in bound.class_groups[c]}
        track |= {a.group for a in blocked if a.milli}
    state = state_of(track) if state_of is not None else None
    if state is None:
        allocs = _with_gpu_ids(spec, [r.alloc for r in jobs] + list(blocked), track)
    else:  # every allocation of a tracked group names its GPUs (else no state is built)
        allocs = [r.alloc for r in jobs]
    sim = Simulator(bound, RankedOrder(), config, estimate=est, batch_placer=batch_placer)
    sim.core = "python"
    sim.frac_groups = set(track)
    # per-node release profiles pay for themselves over a whole simulation, not in one cycle:
    # building them for every running job cost more than the few reservations they answer
    # (a speed switch only: the schedule is the same, ``tests/sim/test_fast_paths.py``)
    sim.node_release_profiles = False
    resume = Resume(  # the running jobs get the ids after the pending rows
        running=ResumedJobs(
            ids=np.arange(n, n + n_run, dtype=np.int64),
            allocs=allocs[:n_run],
            start=jobs.start_s,
            est_end=jobs.est_end_s,
            groups=jobs.group,
        ),
        blocked=tuple(allocs[n_run:]),
        state=state,
    )
    easy = config.backfill == "easy"
    result = sim.run(record_reservations=easy, resume=resume)
    # the pending rows the cycle started, in the order it started them (``final_allocs`` holds the
    # resumed jobs, ids n and up, then each start as it happened)
    starts = {j: a for j, a in islice(sim.final_allocs.items(), n_run, None) if j < n}
    reserved: dict[int, float] = {}
    if easy and sim.first_reservation is not None:
        for j in np.flatnonzero(np.isfinite(sim.first_reservation)).tolist():
            if j not in starts:
                reserved[j] = float(sim.first_reservation[j])
    stats = dict(result.placer_stats)
    status = next((k.removeprefix("status_") for k in stats if k.startswith("status_")), None)
    return CycleOutcome(starts=starts, reserved=reserved, status=status, stats=stats)
