"""A simulated cluster that starts exactly what a scheduler outside it decides.

Why: the simulator decides for itself; a cluster run by Hylo's services (``hylo run``) must instead
start the jobs the placer chose, on the nodes it chose, and nothing else. ``run_applied`` is that
cluster: it replays a bound workload's arrivals and completions, and at every event with a queue
asks a ``Decider`` which queued jobs start where, checks that each allocation fits, and applies it.

``SimulatorDecider`` answers with the simulator's own cycle (``shared.sim.cycle_on``) in a
policy's order: ``run_applied`` with it gives the schedule ``Simulator.run`` gives, job for job and
node for node (``tests/sim/test_applied.py``), which is what lets a replay through the services be
held to the simulator's schedule.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray, IntArray
from shared.policies.base import Policy, PolicyContext
from shared.policies.capabilities import hooks
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import alloc_fits
from shared.scheduling.result import SimResult
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.cycle_on import PendingRequest, RunningAt, cycle_on
from shared.sim.simulator import SimulationError, _frac_groups

__all__ = ["AppliedRun", "Decider", "RefusedStart", "SimulatorDecider", "run_applied"]


class RefusedStart(SimulationError):
    """A decision started a job where it does not fit, or a job that is not queued."""


@dataclass
class ClusterView:
    """What a decider sees at an event: the live state (read-only) and the jobs."""

    now: float
    state: ClusterState
    #: queued jobs, in arrival order
    queued: IntArray
    #: running jobs -> (allocation, start, estimated end), in the order they started (the order
    #: in which reservations release those with the same estimated end)
    running: Mapping[int, RunningAt]
    #: jobs that ended since the previous event with a queue, with their end times
    ended: list[tuple[int, float]]


class Decider(Protocol):
    """Decides, at one event, which queued jobs start where (job -> allocation, started in
    that order)."""

    def decide(self, view: ClusterView) -> Mapping[int, Alloc]: ...


@dataclass
class AppliedRun:
    """A finished run: the schedule, every job's allocation, and how many decisions were asked."""

    result: SimResult
    allocations: dict[int, Alloc] = field(default_factory=dict)
    decisions: int = 0
    #: jobs that ended after the last event with a queue (no decider saw them end), with end times
    tail: list[tuple[int, float]] = field(default_factory=list)


class SimulatorDecider:
    """The simulator's cycle in ``policy``'s order: keys of the queue, ties by arrival."""

    def __init__(
        self, workload: BoundWorkload, policy: Policy, config: SimConfig, estimate: FloatArray
    ) -> None:
        self.w, self.policy, self.config = workload, policy, config
        self.est = estimate
        self.track = _frac_groups(workload)

    def decide(self, view: ClusterView) -> Mapping[int, Alloc]:
        q = view.queued
        keys = np.asarray(self.policy.keys(q, view.now), dtype=np.float64)
        order = q[np.lexsort((q, keys))].tolist()
        w, jobs, est = self.w, self.w.jobs, self.est
        pending = [
            PendingRequest(
                int(jobs.gpus[j]),
                int(jobs.gpu_milli[j]),
                int(jobs.cpus_milli[j]),
                int(jobs.mem_mib[j]),
                w.class_groups[int(w.job_class[j])],
                float(est[j]),
            )
            for j in order
        ]
        running = list(view.running.values())
        out = cycle_on(w.spec, view.now, running, pending, self.config, track=set(self.track))
        return {order[k]: a for k, a in out.starts.items()}


def run_applied(
    workload: BoundWorkload,
    decider: Decider,
    estimate: FloatArray,
    *,
    policy: Policy | None = None,
    label: str = "applied",
) -> AppliedRun:
    """Replay ``workload``, starting what ``decider`` decides at each event with a queue.

    ``estimate``: each job's runtime estimate (what its estimated end is reported with).
    ``policy``: bound and told of every start and end (for a decider that orders by it).
    Raises ``RefusedStart`` naming the job when a decision does not fit the cluster.
    """
    wall0 = time.perf_counter()
    jobs = workload.jobs
    n = len(jobs)
    st = ClusterState(workload.spec, _frac_groups(workload))
    allocs: dict[int, Alloc] = {}
    if policy is not None:
        policy.bind(
            PolicyContext(workload=workload, estimate=estimate, capacity_gpus=workload.spec.total_gpus)
        )
        h = hooks(policy)
        if h.attach is not None:
            h.attach(st, allocs)
        on_start, on_end = h.on_start, h.on_end
    else:
        on_start = on_end = None
    submit, runtime = jobs.submit.tolist(), jobs.runtime.tolist()
    est = estimate.tolist()
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    nodes_used = np.zeros(n, dtype=np.int64)
    running: dict[int, RunningAt] = {}  # in start order: the order of each decision, decision after decision
    queued: list[int] = []
    heap: list[tuple[float, int]] = []
    ended: list[tuple[int, float]] = []
    tl_t: list[float] = []
    tl_busy: list[float] = []
    tl_q: list[int] = []
    every: dict[int, Alloc] = {}
    i = decisions = 0
    while True:
        now = min(submit[i] if i < n else math.inf, heap[0][0] if heap else math.inf)
        if now == math.inf:
            break
        while heap and heap[0][0] <= now:
            _, r = heapq.heappop(heap)
            st.give(allocs.pop(r))
            del running[r]
            ended.append((r, now))
            if on_end is not None:
                on_end(r, now)
        while i < n and submit[i] <= now:
            queued.append(i)
            i += 1
        if queued:
            view = ClusterView(now, st, np.asarray(queued, dtype=np.int64), running, ended)
            starts = decider.decide(view)
            decisions += 1
            ended = []
            waiting = set(queued)
            for j, a in starts.items():
                if j not in waiting:
                    raise RefusedStart(f"job {jobs.ids[j]} was started at t={now} but is not queued")
                if not alloc_fits(st, a, None, int(jobs.gpu_milli[j])):
                    raise RefusedStart(
                        f"job {jobs.ids[j]} does not fit nodes {a.nodes} of group {a.group} at t={now}"
                    )
                st.take(a)
                allocs[j] = every[j] = a
                start[j], end[j] = now, now + runtime[j]
                nodes_used[j] = len(a.nodes)
                running[j] = RunningAt(a, now, now + est[j])
                heapq.heappush(heap, (end[j], j))
                waiting.discard(j)
                if on_start is not None:
                    on_start(j, now)
            queued = [j for j in queued if j in waiting]
        tl_t.append(now)
        tl_busy.append(st.busy_milli / WHOLE_GPU_MILLI)
        tl_q.append(len(queued))
        if not heap and i >= n and queued:
            raise SimulationError(
                f"{len(queued)} job(s) were never started by the decisions on an idle cluster"
            )
    result = SimResult(
        jobs=jobs,
        start=start,
        end=end,
        capacity_gpus=workload.spec.total_gpus,
        timeline_t=np.asarray(tl_t),
        timeline_busy=np.asarray(tl_busy),
        timeline_queued=np.asarray(tl_q, dtype=np.int64),
        nodes_used=nodes_used,
        policy=label,
        wall_seconds=time.perf_counter() - wall0,
        cycles=decisions,
    )
    return AppliedRun(result, every, decisions, ended)
