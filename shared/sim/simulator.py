"""The event-driven cluster simulator.

One loop, in the spirit of Blox (accept -> prioritize -> place -> run): at each event time t every
completion and every arrival with time <= t is applied first (no stale state, no arrival/release
tie artefacts), then one scheduling cycle runs: the policy orders the queue, jobs start in that
order where an eligible node group has room, and the backfill mode decides what happens behind a
job that cannot start (see ``SimConfig``).

Speed comes from three exact shortcuts, not from approximations:
- within a cycle resources only shrink, so a request (resources + eligible groups, ``sig``) that
  did not fit does not fit later in the same cycle: it is not re-checked;
- when every queued request has failed, the cycle stops;
- an event that freed nothing, after a cycle that ended with every request failing, can only
  start one of the new arrivals: the cycle is skipped when none of them fits.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.base import Policy, PolicyContext
from shared.sim.binding import BoundWorkload, nodes_needed
from shared.sim.config import SimConfig
from shared.sim.placement import Caps, Placer, make_placer
from shared.sim.result import SimResult
from shared.sim.state import Alloc, ClusterState, GroupState

INF = math.inf
PRECHECK_QUEUE = 32  # queue length from which a cycle first tests each distinct request


class SimulationError(RuntimeError):
    """The simulation cannot go on (for example jobs left that can never start)."""


@dataclass
class _Scratch:
    """A partial copy of the cluster used to find when a blocked job could start."""

    groups: list[GroupState | None]


class Simulator:
    """Simulates one policy on one bound workload; see the module docstring."""

    def __init__(
        self,
        workload: BoundWorkload,
        policy: Policy,
        config: SimConfig | None = None,
        placer: Placer | None = None,
        estimate: FloatArray | None = None,
    ) -> None:
        self.w = workload
        self.cfg = config or SimConfig()
        if workload.node_slack != self.cfg.node_slack:
            raise ValueError(
                f"workload was bound with node_slack={workload.node_slack}, config says {self.cfg.node_slack}"
            )
        jobs = workload.jobs
        if self.cfg.oracle_runtimes:
            est = jobs.runtime.copy()
        else:
            est = jobs.estimate if estimate is None else np.asarray(estimate, dtype=np.float64)
            if np.isnan(est).any():
                raise ValueError(
                    f"{int(np.isnan(est).sum())} job(s) have no runtime estimate: apply an estimate model "
                    "(shared.traces.estimates) or set oracle_runtimes=True"
                )
        self.est = np.maximum(est, 0.0)
        self.policy = policy
        self.placer = placer or make_placer(self.cfg.placement)
        frac_groups = {
            g
            for c in np.unique(workload.job_class[jobs.gpu_milli < WHOLE_GPU_MILLI])
            for g in workload.class_groups[int(c)]
        }
        self.frac_groups = frac_groups
        policy.bind(
            PolicyContext(workload=workload, estimate=self.est, capacity_gpus=workload.spec.total_gpus)
        )

    # ------------------------------------------------------------------------------------------
    def run(
        self,
        job_range: tuple[int, int] | None = None,
        metric_range: tuple[int, int] | None = None,
        record_reservations: bool = False,
    ) -> SimResult:
        """Simulate jobs ``job_range`` (all by default) until every one of them has finished.

        ``metric_range`` marks the jobs whose metrics count (a window after its warm-up jobs).
        With ``record_reservations`` the first reservation time of every job is kept in
        ``self.first_reservation`` (used by the property tests of EASY backfill).
        """
        wall0 = time.perf_counter()
        w, cfg, placer, policy = self.w, self.cfg, self.placer, self.policy
        jobs = w.jobs
        n = len(jobs)
        lo, hi = job_range or (0, n)
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"job_range {job_range} outside 0..{n}")
        st = ClusterState(w.spec, self.frac_groups)
        submit = jobs.submit.tolist()
        runtime = jobs.runtime.tolist()
        est = self.est.tolist()
        gpus = jobs.gpus.tolist()
        milli = jobs.gpu_milli.tolist()
        cpu = jobs.cpus_milli.tolist()
        mem = jobs.mem_mib.tolist()
        groups_of = [w.class_groups[c] for c in w.job_class.tolist()]
        shape = w.shape.tolist()
        uniform = w.shape_uniform.tolist()
        slack = cfg.node_slack
        mode = cfg.backfill
        max_res = cfg.max_reservations or 1 << 30
        static = not policy.dynamic
        static_keys = policy.keys(np.arange(n), 0.0).tolist() if static else None
        track = policy.tracks_jobs

        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        nodes_used = np.zeros(n, dtype=np.int64)
        allocs: dict[int, Alloc] = {}
        is_started = bytearray(n)
        heap: list[tuple[float, int]] = []
        run_sorted: list[tuple[float, int]] = []  # running jobs by estimated end, for reservations
        queue: list[int] = []  # arrival order (dynamic policies)
        queue_sorted: list[tuple[float, int]] = []  # (key, job) in start order (static policies)
        shape_count: dict[int, int] = {}  # queued jobs per shape (GPU request + eligible groups)
        shape_ests: dict[int, list[float]] = {}  # their estimates, sorted
        shape_rep: dict[int, int] = {}  # one job of each shape
        first_res = np.full(n, np.nan) if record_reservations else None
        tl_t: list[float] = []
        tl_busy: list[float] = []
        tl_q: list[int] = []
        cycles = 0
        all_blocked = False

        def start_job(j: int, a: Alloc, now: float) -> None:
            st.take(a)
            allocs[j] = a
            is_started[j] = 1
            start[j] = now
            e = now + runtime[j]
            end[j] = e
            nodes_used[j] = len(a.nodes)
            heapq.heappush(heap, (e, j))
            insort(run_sorted, (now + est[j], j))
            k = shape[j]
            c = shape_count[k] - 1
            if c:
                shape_count[k] = c
            else:
                del shape_count[k]
            ests = shape_ests[k]
            del ests[bisect_left(ests, est[j])]
            if track:
                policy.on_start(j, now)

        def reserve(j: int, now: float, caps_out: dict[int, tuple[float, Caps]]) -> float:
            """Earliest estimated start of blocked job j and the caps that protect it."""
            gset = groups_of[j]
            scratch = _Scratch([None] * len(st.groups))
            for g in gset:
                scratch.groups[g] = st.groups[g].copy()
            need, m, c_, mm = gpus[j], milli[j], cpu[j], mem[j]
            single = need > 0 and (m < WHOLE_GPU_MILLI or need <= min(st.groups[g].G for g in gset))
            when = INF
            plan: Alloc | None = None
            for e, r in run_sorted:
                a = allocs[r]
                gs = scratch.groups[a.group]
                if gs is None:
                    continue
                gs.give(a)
                if single and m == WHOLE_GPU_MILLI and slack == 0:
                    ok = any(gs.whole[i] >= need and gs.cpu[i] >= c_ and gs.mem[i] >= mm for i in a.nodes)
                    if not ok:
                        continue
                elif need and m == WHOLE_GPU_MILLI and gs.top_whole(nodes_needed(need, gs.G) + slack) < need:
                    continue
                plan = placer.place(scratch, need, m, c_, mm, gset, None, slack)  # type: ignore[arg-type]
                if plan is not None:
                    when = max(e, now)
                    break
            if plan is None:
                return INF
            gs = scratch.groups[plan.group]
            assert gs is not None
            cap = Caps.unlimited(gs.n)
            for k, i in enumerate(plan.nodes):
                extra = 0
                if (
                    plan.frac_gpu >= 0
                    and gs.gfree is not None
                    and gs.gfree[i, plan.frac_gpu] == WHOLE_GPU_MILLI
                ):
                    extra = 1
                cap.whole[i] = gs.whole[i] - plan.whole[k] - extra
                cap.cpu[i] = gs.cpu[i] - plan.cpu[k]
                cap.mem[i] = gs.mem[i] - plan.mem[k]
                cap.frac_blocked[i] = True
            caps_out[plan.group] = (when, cap)
            return when

        def cycle(now: float) -> bool:
            """One scheduling pass; returns True when every queued job failed to fit."""
            remaining = len(queue_sorted) if static else len(queue)
            # Failures seen in this cycle. Resources (and reservation caps) only shrink within a
            # cycle, so a request that failed keeps failing, and so does any request of the same
            # shape asking for at least as many CPUs and as much memory and running at least as long.
            shape_blocked: set[int] = set()  # shapes whose GPUs fit nowhere now
            records: dict[int, list[tuple[int, int, float]]] = {}  # shape -> (cpu, mem, est threshold)
            counted: dict[int, int] = {}  # uniform shape -> its queued jobs known to be blocked
            blocked = 0
            if remaining > PRECHECK_QUEUE:
                # a long queue holds few distinct shapes: test each GPU request once, before ordering
                for k, count in shape_count.items():
                    r = shape_rep[k]
                    if placer.place(st, gpus[r], milli[r], 0, 0, groups_of[r], None, slack) is None:
                        shape_blocked.add(k)
                        blocked += count
                if blocked >= remaining:
                    return True
            order: Iterable[int]
            if static:
                order = (j for _, j in queue_sorted)  # lazy: a cycle that stops early pays little
            else:
                q = np.fromiter(queue, dtype=np.int64, count=len(queue))
                order = q[np.argsort(policy.keys(q, now), kind="stable")].tolist()
            reserved: dict[int, tuple[float, Caps]] = {}
            covered: set[int] = set()
            n_res = 0
            started: list[int] = []

            def try_reserve(j: int) -> None:
                nonlocal n_res
                if n_res < max_res and covered.isdisjoint(groups_of[j]):
                    n_res += 1
                    covered.update(groups_of[j])
                    t_res = reserve(j, now, reserved)
                    if first_res is not None and t_res < INF and np.isnan(first_res[j]):
                        first_res[j] = t_res

            for j in order:
                k = shape[j]
                if k in shape_blocked:
                    if mode == "none":
                        blocked = -1  # committed head: nothing behind it may start
                        break
                    if mode == "easy":
                        try_reserve(j)
                    continue
                e_j, c_j, m_j = est[j], cpu[j], mem[j]
                recs = records.get(k)
                if recs is not None and any(c_j >= c and m_j >= m and e_j > thr for c, m, thr in recs):
                    if not uniform[k]:
                        blocked += 1
                        if blocked >= remaining:
                            break
                    continue
                gset = groups_of[j]
                capped: tuple[int, ...] = ()
                caps: dict[int, Caps] | None = None
                if reserved:
                    finish = now + e_j
                    capped = tuple(g for g in gset if g in reserved and finish > reserved[g][0])
                    if capped:
                        caps = {g: reserved[g][1] for g in capped}
                a = placer.place(st, gpus[j], milli[j], c_j, m_j, gset, caps, slack)
                if a is None:
                    if mode == "none":
                        blocked = -1
                        break
                    # jobs running past the latest of these reservations are capped on a superset
                    # of these groups: with at least these requests they cannot start either
                    thr = max(reserved[g][0] for g in capped) - now if capped else -INF
                    records.setdefault(k, []).append((c_j, m_j, thr))
                    if uniform[k]:
                        ests = shape_ests[k]
                        nb = len(ests) - bisect_right(ests, thr) if capped else shape_count[k]
                        blocked += nb - counted.get(k, 0)
                        counted[k] = nb
                    else:
                        blocked += 1
                    if not capped and mode == "easy":
                        try_reserve(j)
                    if blocked >= remaining:
                        break
                    continue
                start_job(j, a, now)
                started.append(j)
                remaining -= 1
                if capped and a.group in capped:
                    reserved[a.group][1].consume(a)
                if blocked >= remaining:
                    break
            for j in started:
                if static:
                    del queue_sorted[bisect_left(queue_sorted, (static_keys[j], j))]  # type: ignore[index]
                else:
                    del queue[bisect_left(queue, j)]
            return blocked >= remaining > 0 or remaining == 0

        i = lo
        while True:
            t_arr = submit[i] if i < hi else INF
            t_end = heap[0][0] if heap else INF
            now = t_arr if t_arr < t_end else t_end
            if now == INF:
                break
            released = False
            while heap and heap[0][0] <= now:
                _, r = heapq.heappop(heap)
                a = allocs.pop(r)
                st.give(a)
                run_sorted.remove((start[r] + est[r], r))
                released = True
                if track:
                    policy.on_end(r, now)
            first_new = i
            while i < hi and submit[i] <= now:
                if static:
                    insort(queue_sorted, (static_keys[i], i))  # type: ignore[index]
                else:
                    queue.append(i)
                k = shape[i]
                shape_count[k] = shape_count.get(k, 0) + 1
                insort(shape_ests.setdefault(k, []), est[i])
                shape_rep.setdefault(k, i)
                i += 1
            qlen = len(queue_sorted) if static else len(queue)
            if qlen:
                run_cycle = released or not all_blocked
                if not run_cycle:
                    for k in range(first_new, i):
                        if placer.place(st, gpus[k], milli[k], cpu[k], mem[k], groups_of[k], None, slack):
                            run_cycle = True
                            break
                if run_cycle:
                    all_blocked = cycle(now)
                    cycles += 1
            tl_t.append(now)
            tl_busy.append(st.busy_milli / WHOLE_GPU_MILLI)
            tl_q.append(len(queue_sorted) if static else len(queue))
            if not heap and i >= hi and tl_q[-1]:
                raise SimulationError(
                    f"{tl_q[-1]} job(s) can never start on an idle cluster "
                    "(binding should have excluded them)"
                )

        self.first_reservation = first_res
        mask = np.zeros(n, dtype=bool)
        a_, b_ = metric_range or (lo, hi)
        mask[a_:b_] = True
        return SimResult(
            jobs=jobs,
            start=start,
            end=end,
            capacity_gpus=w.spec.total_gpus,
            timeline_t=np.asarray(tl_t),
            timeline_busy=np.asarray(tl_busy),
            timeline_queued=np.asarray(tl_q, dtype=np.int64),
            metric_mask=mask,
            nodes_used=nodes_used,
            policy=policy.describe(),
            placement=placer.name,
            backfill=cfg.backfill,
            wall_seconds=time.perf_counter() - wall0,
            cycles=cycles,
        )


def simulate(
    workload: BoundWorkload,
    policy: Policy,
    config: SimConfig | None = None,
    job_range: tuple[int, int] | None = None,
    metric_range: tuple[int, int] | None = None,
) -> SimResult:
    """Convenience wrapper: one policy, one run."""
    return Simulator(workload, policy, config).run(job_range, metric_range)
