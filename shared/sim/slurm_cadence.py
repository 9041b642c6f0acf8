"""A simulator that schedules the way slurmctld does, for jobs that each fit on one node.

Why another loop: Hylo's simulator (``shared.sim.simulator``) starts jobs at every event with EASY
backfill, one reservation per pool of node groups, so a job of one GPU type never holds back
another type, and every freed GPU is offered at once to the whole queue. On the live Slurm
testbed (``bench/slurm_experiment.py``, one partition over every GPU type, 4-32 s jobs, time
limits 15 x the runtimes) that packs far better than slurmctld does: there, every policy left the
P100 GPUs idle 466-688 GPU-s before their last job ended, against about 150 in the simulator, and
the simulator ranked the policies' makespans the other way round (UNICEP shortest in the
simulator, longest live). Two of slurmctld's mechanisms do that, and this loop has both:

- **the main scheduler** runs on events (a submission, a job's end) and walks the pending jobs in
  priority order; at the first job that cannot start it stops for the whole partition (the rest
  wait with reason ``Priority``), so a blocked job of one GPU type holds back every other type;
- **the backfill scheduler** runs every ``bf_interval`` seconds (5 here, the testbed's
  ``bf_interval=5``) and plans every pending job in priority order from the running jobs'
  *time limits* (not their true runtimes): a job starts now only when it fits now and delays no
  higher job's planned start (Slurm's backfill reserves for each job it cannot start; EASY reserves
  for the first only).

Also modelled: the time a freed node takes to be offered again (``release_s``: the job's end, its
epilog, the node's return; on the testbed the next job on a freed node started 1-3 s after the
last one ended). Not modelled: whole-second clocks, slurmctld's locks and the adapter's delay in
writing Hylo's priorities (the live prioritizer decides on a snapshot up to a poll old).

The loop drives any ``Policy`` as the Python simulator does (``bind``, ``attach``, ``on_start``,
``on_end``, ``keys`` at every pass), the learned policy included, and returns a ``SimResult``,
so that episodes, metrics and the reward work on it unchanged. Jobs must each fit on one node
(every job of the Slurm workload asks ``-n 1``); ``run`` refuses others. Placement is best-fit:
on the node of the eligible groups with the fewest free GPUs that fits.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_right

import numpy as np

from shared.policies.base import Policy, PolicyContext
from shared.policies.capabilities import hooks
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.result import SimResult
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import runtime_estimates

#: event kinds, in the order they are applied at one time: ends free nodes before the
#: schedulers look, arrivals join the queue before a pass
_RELEASE, _ARRIVAL, _BACKFILL, _DECIDE = 0, 1, 2, 3


class SlurmCadence:
    """slurmctld's two schedulers over one partition (see the module docstring)."""

    def __init__(
        self,
        workload: BoundWorkload,
        policy: Policy,
        *,
        bf_interval_s: float = 5.0,
        release_s: float = 1.0,
        decision_lag_s: float = 0.0,
        config: SimConfig | None = None,
    ) -> None:
        """``config`` only supplies the estimates (time limits unless ``oracle_runtimes``).

        ``decision_lag_s`` > 0 models priorities written by a pipeline beside slurmctld (Hylo's
        adapter): both schedulers order by the keys of the last *decision*, and a decision is taken
        ``decision_lag_s`` after each submission or job end (the adapter's push event, poll,
        pipeline and ``scontrol`` writes), followed by a main-scheduler pass (a priority update
        makes slurmctld schedule); a job submitted since the last decision has no key yet and
        sorts after every job that has one (its own low multifactor priority, below Hylo's band).
        0: the keys are computed at every pass (a policy inside slurmctld, such as multifactor)."""
        if bf_interval_s <= 0 or release_s < 0 or decision_lag_s < 0:
            raise ValueError("bf_interval_s must be > 0; release_s and decision_lag_s >= 0")
        self.lag = float(decision_lag_s)
        #: the last decision's keys (with a lag): job -> rank
        self.decided: dict[int, float] = {}
        self.w = workload
        self.policy = policy
        self.bf_interval = float(bf_interval_s)
        self.release_s = float(release_s)
        self.cfg = config or SimConfig()
        self.est = runtime_estimates(workload, self.cfg, None)
        spec = workload.spec
        self.node_gpus = [g.gpus for g in spec.node_groups]
        policy.bind(PolicyContext(workload=workload, estimate=self.est, capacity_gpus=spec.total_gpus))
        #: passes of each scheduler in the last run
        self.passes = {"main": 0, "backfill": 0}

    # -- placement -------------------------------------------------------------------------------
    def _fits_now(self, j: int) -> tuple[int, int] | None:
        """Best-fit node (group, node) where job ``j`` fits now, or None."""
        need = int(self.gpus[j])
        best: tuple[int, int, int] | None = None
        for g in self.groups_of[j]:
            gs = self.st.groups[g]
            for i in range(gs.n):
                free = int(gs.whole[i])
                fits = free >= need and gs.cpu[i] >= self.cpu[j] and gs.mem[i] >= self.mem[j]
                if fits and (best is None or free < best[0]):
                    best = (free, g, i)
        return None if best is None else (best[1], best[2])

    def _start(self, j: int, node: tuple[int, int], now: float) -> None:
        g, i = node
        a = Alloc(g, [i], [int(self.gpus[j])], [int(self.cpu[j])], [int(self.mem[j])])
        self.st.take(a)
        self.allocs[j] = a
        self.queue.remove(j)
        self.start[j] = now
        self.end[j] = now + float(self.runtime[j])
        heapq.heappush(self.events, (self.end[j] + self.release_s, _RELEASE, j))
        if self.on_start is not None:
            self.on_start(j, now)

    def _ordered(self, now: float) -> list[int]:
        """The queue in priority order (smallest key first, ties by arrival)."""
        q = np.asarray(sorted(self.queue), dtype=np.int64)
        if len(q) <= 1:
            return [int(j) for j in q]
        if self.lag > 0:
            keys = np.asarray([self.decided.get(int(j), math.inf) for j in q], dtype=np.float64)
        else:
            keys = np.asarray(self.policy.keys(q, now), dtype=np.float64)
        return [int(j) for j in q[np.lexsort((q, keys))]]

    def _decide(self, now: float) -> None:
        """The pipeline's decision: every queued job's key, as ranks (what the adapter writes)."""
        q = np.asarray(sorted(self.queue), dtype=np.int64)
        self.decided = {}
        if len(q):
            keys = np.asarray(self.policy.keys(q, now), dtype=np.float64)
            self.decided = {int(j): float(r) for r, j in enumerate(q[np.lexsort((q, keys))])}

    # -- the two schedulers ----------------------------------------------------------------------
    def _main(self, now: float) -> None:
        """Priority order; stop at the first job that cannot start (one partition)."""
        self.passes["main"] += 1
        for j in self._ordered(now):
            node = self._fits_now(j)
            if node is None:
                return
            self._start(j, node, now)

    def _backfill(self, now: float) -> None:
        """Plan every pending job from the time limits; start those that fit now and delay no
        higher job's planned start."""
        self.passes["backfill"] += 1
        if not self.queue:
            return
        plan = {(g, i): _NodePlan() for g, gs in enumerate(self.st.groups) for i in range(gs.n)}
        for r, a in self.allocs.items():
            planned_end = max(now, float(self.start[r] + self.est[r]))
            plan[(a.group, a.nodes[0])].add(now, planned_end, a.whole[0])
        for j in self._ordered(now):
            need, length = int(self.gpus[j]), float(self.est[j])
            best: tuple[float, int, int, int] | None = None  # (time, -used, group, node)
            for g in self.groups_of[j]:
                cap = self.node_gpus[g]
                for i in range(self.st.groups[g].n):
                    node = plan[(g, i)]
                    t = node.earliest(cap, need, now, length)
                    if t is None:
                        continue
                    key = (t, -node.used_at(t, now), g, i)
                    if best is None or key < best:
                        best = key
            if best is None:
                continue
            t, _, g, i = best
            if t <= now and self._fits_on(j, g, i):
                self._start(j, (g, i), now)
            plan[(g, i)].add(t, t + length, need)

    def _fits_on(self, j: int, g: int, i: int) -> bool:
        gs = self.st.groups[g]
        return bool(gs.whole[i] >= self.gpus[j] and gs.cpu[i] >= self.cpu[j] and gs.mem[i] >= self.mem[j])

    # -- the loop --------------------------------------------------------------------------------
    def run(
        self, job_range: tuple[int, int] | None = None, metric_range: tuple[int, int] | None = None
    ) -> SimResult:
        """Simulate jobs ``job_range`` (all by default) until every one has finished."""
        wall0 = time.perf_counter()
        w = self.w
        jobs = w.jobs
        n = len(jobs)
        lo, hi = job_range or (0, n)
        self.gpus, self.runtime = jobs.gpus, jobs.runtime
        self.cpu, self.mem = jobs.cpus_milli, jobs.mem_mib
        self.groups_of = [w.class_groups[int(c)] for c in w.job_class]
        for j in range(lo, hi):
            if int(jobs.gpu_milli[j]) != 1000 or not any(
                self.node_gpus[g] >= self.gpus[j] for g in self.groups_of[j]
            ):
                raise ValueError(f"job {j}: the Slurm-cadence loop takes whole GPUs on one node only")
        self.st = ClusterState(w.spec)
        self.allocs: dict[int, Alloc] = {}
        h = hooks(self.policy)
        self.on_start, on_end = h.on_start, h.on_end
        if h.attach is not None:
            h.attach(self.st, self.allocs)
        self.queue: set[int] = set()
        self.decided = {}
        decision_due = math.inf
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.events: list[tuple[float, int, int]] = [
            (float(jobs.submit[j]), _ARRIVAL, j) for j in range(lo, hi)
        ]
        heapq.heapify(self.events)
        self.passes = {"main": 0, "backfill": 0}
        t0 = float(jobs.submit[lo]) if hi > lo else 0.0
        next_bf = math.floor(t0 / self.bf_interval) * self.bf_interval + self.bf_interval
        if hi > lo:
            heapq.heappush(self.events, (next_bf, _BACKFILL, -1))
        tl_t: list[float] = []
        tl_busy: list[float] = []
        tl_q: list[int] = []
        while self.events:
            now = self.events[0][0]
            main = backfill = decide = False
            while self.events and self.events[0][0] <= now:
                _, kind, j = heapq.heappop(self.events)
                if kind == _DECIDE:
                    decide = True
                elif kind == _RELEASE:
                    self.st.give(self.allocs.pop(j))
                    if on_end is not None:
                        on_end(j, now)
                    main = True
                elif kind == _ARRIVAL:
                    self.queue.add(j)
                    main = True
                else:
                    backfill = True
            if decide:
                decision_due = math.inf
                self._decide(now)
                main = True
            if main:
                self._main(now)
            if main and self.lag > 0 and not decide and decision_due == math.inf and self.queue:
                decision_due = now + self.lag
                heapq.heappush(self.events, (decision_due, _DECIDE, -1))
            if backfill:
                self._backfill(now)
                if self.queue or self.allocs or any(k == _ARRIVAL for _, k, _ in self.events):
                    heapq.heappush(self.events, (now + self.bf_interval, _BACKFILL, -1))
            tl_t.append(now)
            tl_busy.append(self.st.busy_milli / 1000.0)
            tl_q.append(len(self.queue))
        if self.queue:
            raise RuntimeError(f"{len(self.queue)} job(s) never started")
        mask = np.zeros(n, dtype=bool)
        a_, b_ = metric_range or (lo, hi)
        mask[a_:b_] = True
        return SimResult(
            jobs=jobs,
            start=self.start,
            end=self.end,
            capacity_gpus=w.spec.total_gpus,
            timeline_t=np.asarray(tl_t),
            timeline_busy=np.asarray(tl_busy),
            timeline_queued=np.asarray(tl_q, dtype=np.int64),
            metric_mask=mask,
            nodes_used=np.where(np.isnan(self.start), 0, 1).astype(np.int64),
            policy=self.policy.describe(),
            placement="best-fit",
            backfill="slurm-cadence",
            wall_seconds=time.perf_counter() - wall0,
            cycles=self.passes["main"] + self.passes["backfill"],
        )


class _NodePlan:
    """One node's planned GPU use: intervals (start, end, GPUs), and the step profile they make
    (rebuilt only after a change: a backfill pass asks each node once per pending job)."""

    __slots__ = ("intervals", "times", "usage")

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float, int]] = []
        self.times: list[float] | None = None
        self.usage: list[int] = []

    def add(self, start: float, end: float, gpus: int) -> None:
        self.intervals.append((start, end, gpus))
        self.times = None

    def _profile(self, now: float) -> tuple[list[float], list[int]]:
        """Breakpoints from ``now`` on and the GPUs in use on each segment after them."""
        if self.times is None:
            delta: dict[float, int] = {now: 0}
            for s, e, g in self.intervals:
                s = max(s, now)
                if e <= s:
                    continue
                delta[s] = delta.get(s, 0) + g
                delta[e] = delta.get(e, 0) - g
            times = sorted(delta)
            usage, level = [], 0
            for t in times:
                level += delta[t]
                usage.append(level)
            self.times, self.usage = times, usage
        return self.times, self.usage

    def used_at(self, t: float, now: float) -> int:
        times, usage = self._profile(now)
        k = bisect_right(times, t) - 1
        return usage[k] if k >= 0 else 0

    def earliest(self, cap: int, need: int, now: float, length: float) -> float | None:
        """The earliest time from ``now`` at which ``need`` GPUs stay free for ``length``."""
        if need > cap:
            return None
        times, usage = self._profile(now)
        room = cap - need
        n = len(times)
        for k in range(n):  # a start at a breakpoint: at now or when some use ends
            if usage[k] > room:
                continue
            stop = times[k] + length
            m = k + 1
            while m < n and times[m] < stop and usage[m] <= room:
                m += 1
            if m >= n or times[m] >= stop:
                return times[k]
        return None


def slurm_cadence_result(
    workload: BoundWorkload,
    policy: Policy,
    job_range: tuple[int, int] | None = None,
    metric_range: tuple[int, int] | None = None,
    *,
    bf_interval_s: float = 5.0,
    release_s: float = 1.0,
) -> SimResult:
    """Convenience wrapper: one policy, one run."""
    loop = SlurmCadence(workload, policy, bf_interval_s=bf_interval_s, release_s=release_s)
    return loop.run(job_range, metric_range)


__all__ = ["SlurmCadence", "slurm_cadence_result"]
