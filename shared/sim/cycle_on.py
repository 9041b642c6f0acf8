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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray, IntArray, build_table
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Resume, Simulator

if TYPE_CHECKING:
    from shared.placement import CpSatPlacer

__all__ = ["CycleOutcome", "PendingRequest", "RankedOrder", "RunningAt", "cycle_on"]


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
    spec: ClusterSpec, now: float, pending: Sequence[PendingRequest], node_slack: int
) -> tuple[BoundWorkload, FloatArray]:
    """The pending jobs (rank order, all arrived at ``now``) as a bound workload, and their runtime
    estimates. The running jobs are no rows of it: ``Resume`` gives them ids past its last row."""
    n = len(pending)
    gpus = np.array([p.gpus for p in pending], dtype=np.int64)
    milli = np.array([p.milli for p in pending], dtype=np.int64)
    est = np.maximum(np.array([p.est_runtime_s for p in pending], dtype=np.float64), 0.0)
    # classes (eligible groups) and shapes numbered by first appearance
    class_index: dict[tuple[int, ...], int] = {}
    job_class = np.array(
        [class_index.setdefault(p.groups, len(class_index)) for p in pending], dtype=np.int64
    )
    shape = _first_appearance(np.stack([gpus, milli, job_class], axis=1)) if n else np.zeros(0, np.int64)
    table = build_table(
        ids=[f"pending-{k}" for k in range(n)],
        submit=[now] * n,
        runtime=est.tolist(),
        estimate=est.tolist(),
        gpus=gpus.tolist(),
        gpu_milli=milli.tolist(),
        cpus_milli=[p.cpus_milli for p in pending],
        mem_mib=[p.mem_mib for p in pending],
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


def _first_appearance(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Ids of the distinct rows of ``keys``, numbered in the order they first appear."""
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    out: npt.NDArray[np.int64] = rank[inverse.reshape(-1)]
    return out


def cycle_on(
    spec: ClusterSpec,
    now: float,
    running: Sequence[RunningAt],
    pending: Sequence[PendingRequest],
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
    ``CycleOutcome.starts``); their order otherwise plays no part.

    ``blocked``: resources no reservation may plan on (drained, down or unreported nodes; use the
    cluster attributes to no job). ``track``: the node groups that keep per-GPU shares (by default
    those of the fractional jobs, running or pending). ``batch_placer``: the CP-SAT placer to use
    when ``config.placement`` is ``"cp-sat"``. ``state_of(track)``: the cluster with ``running`` and
    ``blocked`` taken, built at once (``DescribedCluster.state``), or None to take them one by one;
    on a 1,213-node cluster with 6,120 running pods that saves most of a decision's time.
    """
    if config.reservation != "nodes" and config.backfill == "easy" and config.placement == "cp-sat":
        raise ValueError("count reservations are not available with cp-sat placement")
    bound, est = _workload(spec, now, pending, config.node_slack)
    n, n_run = len(pending), len(running)
    if track is None:
        track = {a.alloc.group for a in running if a.alloc.milli}  # a share (``Alloc.milli``)
        track |= {g for p in pending if p.gpus and p.milli < WHOLE_GPU_MILLI for g in p.groups}
        track |= {a.group for a in blocked if a.milli}
    state = state_of(track) if state_of is not None else None
    if state is None:
        allocs = _with_gpu_ids(spec, [r.alloc for r in running] + list(blocked), track)
    else:  # every allocation of a tracked group names its GPUs (else no state is built)
        allocs = [r.alloc for r in running]
    sim = Simulator(bound, RankedOrder(), config, estimate=est, batch_placer=batch_placer)
    sim.core = "python"
    sim.frac_groups = set(track)
    # per-node release profiles pay for themselves over a whole simulation, not in one cycle:
    # building them for every running job cost more than the few reservations they answer
    # (a speed switch only: the schedule is the same, ``tests/sim/test_fast_paths.py``)
    sim.node_release_profiles = False
    resume = Resume(  # the running jobs get the ids after the pending rows
        running={n + k: (allocs[k], running[k].start_s, running[k].est_end_s) for k in range(n_run)},
        blocked=tuple(allocs[n_run:]),
        state=state,
    )
    easy = config.backfill == "easy"
    result = sim.run(record_reservations=easy, resume=resume)
    # the pending rows the cycle started, in the order it started them (``final_allocs`` holds the
    # resumed jobs, ids n and up, then each start as it happened)
    starts = {j: a for j, a in sim.final_allocs.items() if j < n}
    reserved: dict[int, float] = {}
    if easy and sim.first_reservation is not None:
        for j in np.flatnonzero(np.isfinite(sim.first_reservation)).tolist():
            if j not in starts:
                reserved[j] = float(sim.first_reservation[j])
    stats = dict(result.placer_stats)
    status = next((k.removeprefix("status_") for k in stats if k.startswith("status_")), None)
    return CycleOutcome(starts=starts, reserved=reserved, status=status, stats=stats)
