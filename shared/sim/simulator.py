"""The event-driven cluster simulator.

One loop, in the spirit of Blox (accept -> prioritize -> place -> run): at each event time t every
completion and every arrival with time <= t is applied first (no stale state, no arrival/release
tie artefacts), then one scheduling cycle runs: the policy orders the queue, jobs start in that
order where an eligible node group has room, and the backfill mode decides what happens behind a
job that cannot start (see ``SimConfig``).

Speed comes from exact shortcuts, not from approximations (each can be switched off, and the
property tests check that the schedule does not change):
- within a cycle resources and reservation caps only shrink, so a request that failed keeps
  failing, and so does every queued request of the same shape (GPU request + eligible groups)
  asking for at least as many CPUs and as much memory and running at least as long: one
  vectorized filter retires them all, and a cycle visits only jobs that may still start;
- with a long queue each shape's GPU request is tested once first; of the shapes that fit
  nowhere only the first job per class of eligible groups is visited (it may take a reservation);
- a reservation is computed only when a later job wants nodes of its groups, and then first as
  a bound: the earliest release after which the blocked job fits GPU-wise (cached per-node
  release profiles for single nodes, per-node drain points for gangs of whole nodes, a replay of
  the free-GPU histogram for other gangs). Its caps are built only when a job that may run past
  the bound wants those groups: a job that ends before it cannot be capped, and starting it
  changes neither the reservation's time nor its plan (see ``CycleReservations.settle``);
- an event that freed nothing, after a cycle in which every queued job failed on the raw free
  state (not merely on a reservation's caps), can only start one of the new arrivals: the cycle
  is skipped when none of them fits;
- for policies that order some classes of jobs by arrival (``Policy.order_classes``: every base
  policy), jobs with the same class, shape, CPUs, memory and estimate form one class: only its
  first queued job can be next, and a failure retires it whole, so a cycle orders a few hundred
  class heads instead of every queued job (``ClassHeads.visit``); with static keys the heads
  stay sorted per shape between cycles (``shared.sim.heads``), so a cycle merges only the
  shapes it visits and touches only the heads it visits;
- a queue of one new arrival is tried directly (a cycle would try it alone, with no reservation).

Where it can (``shared.sim.compiled.run.unsupported``), ``run`` hands the whole simulation to a
compiled copy of this loop (``shared.sim.compiled``) that makes the same decisions, 3-10x faster;
``Simulator.core`` chooses the loop.

Where the loop lives: ``Simulator.run`` chooses the core, builds the run's state
(``shared.sim.run_state``), runs the event loop (``Simulator._events``: releases, arrivals, then one
cycle) and builds the result. The cycle is ``shared.sim.cycle`` (its visit over order classes
``shared.sim.class_heads``, its EASY reservations ``shared.sim.reservations``, CP-SAT's batch
``shared.sim.batch_placement``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.base import Policy, PolicyContext
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import Placer, make_placer
from shared.scheduling.result import SimResult
from shared.scheduling.state import Alloc, ClusterState
from shared.scheduling.workload_memo import per_workload
from shared.sim.batch_placement import BatchPlacement
from shared.sim.config import SimConfig
from shared.sim.cycle import Cycle
from shared.sim.run_state import RecordedAlloc, Resume, RunState
from shared.sim.run_state import columns as _columns  # noqa: F401 (kept importable from here)

if TYPE_CHECKING:
    from shared.placement import CpSatPlacer

__all__ = ["Resume", "SimulationError", "Simulator", "runtime_estimates", "simulate"]

INF = math.inf


def runtime_estimates(
    workload: BoundWorkload, config: SimConfig, estimate: FloatArray | None = None
) -> FloatArray:
    """The runtime estimates a simulation plans with: actual runtimes under ``oracle_runtimes``,
    else ``estimate`` or the jobs' own (ValueError counting the jobs without one), at least 0."""
    jobs = workload.jobs
    if config.oracle_runtimes:
        est = jobs.runtime.copy()
    else:
        est = jobs.estimate if estimate is None else np.asarray(estimate, dtype=np.float64)
        if np.isnan(est).any():
            raise ValueError(
                f"{int(np.isnan(est).sum())} job(s) have no runtime estimate: apply an estimate model "
                "(shared.traces.estimates) or set oracle_runtimes=True"
            )
    out: FloatArray = np.maximum(est, 0.0)
    return out


class SimulationError(RuntimeError):
    """The simulation cannot go on (for example jobs left that can never start)."""


def _frac_groups(w: BoundWorkload) -> set[int]:
    """The node groups where some job of ``w`` may take a GPU share: they track free milli-GPUs
    per physical GPU. Kept per workload (a training run makes a simulator per episode, and on
    Philly's 82,247 jobs this took a third of a millisecond)."""

    def build() -> set[int]:
        shares = np.unique(w.job_class[w.jobs.gpu_milli < WHOLE_GPU_MILLI])
        return {g for c in shares for g in w.class_groups[int(c)]}

    return per_workload(w, "frac_groups", build)


class Simulator:
    """Simulates one policy on one bound workload; see the module docstring.

    The class attributes below only trade speed; every value gives the same schedule (the
    property tests run with the shortcuts off and on and compare).
    """

    #: queue length from which a cycle first tests each distinct request (shape)
    precheck_queue: int = 32
    #: jobs ordered at a time in a cycle; most cycles end within the first chunk
    visit_chunk: int = 64
    #: skip the cycle of an event that freed nothing when no new arrival fits (see ``_events``)
    skip_idle_cycles: bool = True
    #: a failed request also retires the queued requests it dominates (same shape, no smaller)
    retire_dominated: bool = True
    #: reservations replay releases on a light overlay instead of a full scratch copy
    overlay_reservations: bool = True
    #: single-node reservations answer from cached per-node release profiles
    node_release_profiles: bool = True
    #: queue length above which a cycle orders only the first queued job of each order class
    #: (policies that promise an arrival order within classes: ``Policy.order_classes``)
    class_heads_queue: int = 8
    #: with keys that move with the clock, a cycle sorts the class heads this many at a time
    #: (the smallest keys first, more only when the visit reaches them) instead of all of them
    #: (0: all at once)
    head_chunk: int = 64
    #: a queue of one new arrival is tried directly, without the cycle's machinery
    lone_arrivals: bool = True
    #: jobs arriving at one time beyond this many are queued with array operations
    #: (``RunState.arrive``; a described cluster's whole queue arrives at once); 0: one by one
    bulk_arrivals: int = 64
    #: an EASY reservation's caps are built only when a job that may run past its earliest
    #: possible time wants its groups (``Reservations.bound``, ``Reservations.materialize``)
    lazy_reservations: bool = True
    #: a replayed reservation tracks only the nodes its releases touch until a fit test passes
    #: (``Reservations.replay_light``) instead of releasing each job on full scratch copies
    light_replay: bool = True
    #: a bounded reservation of a gang of whole nodes under best-fit is planned from the arrays
    #: (``Reservations.whole_node_plan``) instead of a scratch copy and the placer's gang walk
    direct_gang_plans: bool = True
    #: which event loop runs: "auto" (the compiled core where ``shared.sim.compiled.run.unsupported``
    #: finds nothing against it, else Python), "python", or "compiled" (an error where unsupported)
    core: str = "auto"
    #: keep every started job's allocation in ``allocations`` (equivalence checks of the two loops)
    record_allocations: bool = False

    def __init__(
        self,
        workload: BoundWorkload,
        policy: Policy,
        config: SimConfig | None = None,
        placer: Placer | None = None,
        estimate: FloatArray | None = None,
        batch_placer: CpSatPlacer | None = None,
    ) -> None:
        """``batch_placer``: the CP-SAT placer to use under ``placement="cp-sat"`` (the placer
        service's, with its own time limits); by default one built from ``config``, reproducible."""
        self.w = workload
        self.cfg = config or SimConfig()
        if workload.node_slack != self.cfg.node_slack:
            raise ValueError(
                f"workload was bound with node_slack={workload.node_slack}, config says {self.cfg.node_slack}"
            )
        self.est = runtime_estimates(workload, self.cfg, estimate)
        self._est_list: list[float] | None = None  # ``est`` as a list, built by the first run
        self.last_core = ""  # the event loop of the last run: "python" or "compiled"
        self.core_reason: str | None = None  # why the last run did not use the compiled core
        #: job -> (group, nodes, whole GPUs per node, GPU ids per node or None, shared GPU or -1)
        self.allocations: dict[int, RecordedAlloc] = {}
        self.policy = policy
        # CP-SAT places the top-K jobs of a cycle together; every other placement question (shape
        # pre-checks, reservations, jobs beyond the top K, decisions the caps invalidate) goes to
        # best-fit, which is also its warm start and fallback
        self.batch_placer: CpSatPlacer | None = None
        #: every allocation a resumed run ended with (``run(resume=...)``): job -> allocation
        self.final_allocs: dict[int, Alloc] = {}
        if self.cfg.placement == "cp-sat" and batch_placer is not None:
            self.batch_placer = batch_placer
        elif self.cfg.placement == "cp-sat":
            from shared.placement import CpSatPlacer, PlacerSettings

            self.batch_placer = CpSatPlacer(
                PlacerSettings(
                    k=self.cfg.cpsat_k,
                    node_slack=self.cfg.node_slack,
                    deterministic_time=self.cfg.cpsat_deterministic_time,
                    reproducible=True,  # a simulation must repeat exactly: no wall-clock limit
                )
            )
        self.placer = placer or make_placer("best-fit" if self.batch_placer else self.cfg.placement)
        # tier (t) of the CP-SAT placer: share[c, g] = the part of a queued job of class c that
        # lands on group g if it spread over its eligible groups in proportion to their GPUs,
        # times the class's inflexibility 1 - (its eligible GPUs / all GPUs): a job that may run
        # anywhere needs no group in particular and adds no pressure
        n_groups = len(workload.spec.node_groups)
        self.group_share = np.zeros((len(workload.class_groups), n_groups))
        cap = np.array([g.count * g.gpus for g in workload.spec.node_groups], dtype=np.float64)
        for c, gset in enumerate(workload.class_groups):
            total = float(cap[list(gset)].sum()) if gset else 0.0
            if total > 0:
                rigid = 1.0 - total / float(cap.sum())
                self.group_share[c, list(gset)] = cap[list(gset)] / total * rigid
        self.frac_groups = _frac_groups(workload)
        policy.bind(
            PolicyContext(workload=workload, estimate=self.est, capacity_gpus=workload.spec.total_gpus)
        )

    # ------------------------------------------------------------------------------------------
    def run(
        self,
        job_range: tuple[int, int] | None = None,
        metric_range: tuple[int, int] | None = None,
        record_reservations: bool = False,
        resume: Resume | None = None,
    ) -> SimResult:
        """Simulate jobs ``job_range`` (all by default) until every one of them has finished.

        ``metric_range`` marks the jobs whose metrics count (a window after its warm-up jobs).
        With ``record_reservations`` the first reservation time of every job is kept in
        ``self.first_reservation`` (used by the property tests of EASY backfill).

        ``resume``: start from a cluster that is already running (``Resume``) and stop after the
        first scheduling cycle: how ``shared.sim.cycle_on`` runs this loop's cycle on a cluster
        described by a snapshot. Python loop only; every allocation the run ends with (the resumed
        ones and those it started) is left in ``self.final_allocs``.
        """
        compiled = self._run_compiled(job_range, metric_range, record_reservations, resume)
        if compiled is not None:
            return compiled
        self.last_core = "python"
        self.allocations = {}
        wall0 = time.perf_counter()
        n = len(self.w.jobs)
        lo, hi = job_range or (0, n)
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"job_range {job_range} outside 0..{n}")
        st = (
            ClusterState(self.w.spec, self.frac_groups)
            if resume is None or resume.state is None
            else resume.state
        )
        rs = RunState(self, st, lo, hi, resume, record_reservations)
        self.final_allocs = rs.allocs
        batch = BatchPlacement(self, rs, self.batch_placer) if self.batch_placer is not None else None
        lone = self.lone_arrivals and rs.by_class and batch is None and not record_reservations
        cycles = self._events(rs, Cycle(self, rs, batch), resume is not None, lone)
        self.first_reservation = rs.first_res
        self.job_group = rs.job_group
        return self._result(rs, metric_range, cycles, batch, wall0)

    def _run_compiled(
        self,
        job_range: tuple[int, int] | None,
        metric_range: tuple[int, int] | None,
        record_reservations: bool,
        resume: Resume | None,
    ) -> SimResult | None:
        """The compiled core's result where ``core`` and ``shared.sim.compiled.run.unsupported``
        let it run this simulation, else None (``core_reason`` says why not)."""
        if resume is not None and self.core == "compiled":
            raise ValueError("the compiled core cannot resume a running cluster; use core='python'")
        if self.core != "python" and resume is None:
            from shared.sim.compiled.run import run_compiled, unsupported

            reason = unsupported(self, record_reservations)
            self.core_reason = reason
            if reason is None:
                self.last_core = "compiled"
                return run_compiled(self, job_range, metric_range)
            if self.core == "compiled":
                raise ValueError(f"the compiled core cannot run this simulation: {reason}")
        else:
            self.core_reason = "a resumed run" if resume is not None else "Simulator.core is 'python'"
        return None

    def _events(self, rs: RunState, cycle: Cycle, resumed: bool, lone_arrival: bool) -> int:
        """The event loop; returns the number of cycles run.

        At each event time every completion and every arrival up to it is applied, then one
        cycle runs, unless nothing was freed and every queued job failed on the raw free state
        in the last cycle (``skip_idle_cycles``): then only a new arrival can start, and the
        cycle runs only when one fits. A queue of one new arrival is tried directly
        (``lone_arrival``: a cycle would try it alone, with no reservation to respect, and would
        only note its own, which nothing behind it uses). A resumed run stops after its first
        event."""
        submit, heap, hi, groups_of = rs.submit, rs.heap, rs.hi, rs.groups_of
        end_due, arrive, place = rs.end_due, rs.arrive, rs.place
        start_job, note_time = rs.start_job, rs.note_time
        run_cycle_at = cycle.run
        skip_idle = self.skip_idle_cycles
        may_reserve = self.cfg.backfill != "none"
        cycles = 0
        all_blocked = False
        while True:
            i = rs.i
            t_arr = submit[i] if i < hi else INF
            t_end = heap[0][0] if heap else INF
            now = t_arr if t_arr < t_end else t_end
            if now == INF:
                break
            released = end_due(now) if heap and heap[0][0] <= now else False
            first_new = arrive(now)
            i, nq = rs.i, rs.nq
            if nq == 1 and i - first_new == 1 and lone_arrival:
                a_new = place(first_new, groups_of[first_new])
                if a_new is not None:
                    start_job(first_new, a_new, now)
                    all_blocked = True
                    cycles += 1
                elif released or not all_blocked or not skip_idle:
                    all_blocked = may_reserve
                    cycles += 1
            elif nq:
                run_cycle = released or not all_blocked or not skip_idle
                if not run_cycle:
                    for k in range(first_new, i):
                        if place(k, groups_of[k]):
                            run_cycle = True
                            break
                if run_cycle:
                    all_blocked = run_cycle_at(now)
                    cycles += 1
            note_time(now)
            if resumed:
                break  # one cycle on the resumed cluster, nothing after it
            if not heap and rs.i >= hi and rs.nq:
                raise SimulationError(
                    f"{rs.nq} job(s) can never start on an idle cluster (binding should have excluded them)"
                )
        return cycles

    def _result(
        self,
        rs: RunState,
        metric_range: tuple[int, int] | None,
        cycles: int,
        batch: BatchPlacement | None,
        wall0: float,
    ) -> SimResult:
        """The finished run as a ``SimResult``."""
        mask = np.zeros(rs.n, dtype=bool)
        a_, b_ = metric_range or (rs.lo, rs.hi)
        mask[a_:b_] = True
        tl_t, tl_busy, tl_q = rs.timeline()
        return SimResult(
            jobs=self.w.jobs,
            start=rs.start,
            end=rs.end,
            capacity_gpus=self.w.spec.total_gpus,
            timeline_t=tl_t,
            timeline_busy=tl_busy,
            timeline_queued=tl_q,
            metric_mask=mask,
            nodes_used=rs.nodes_used,
            policy=self.policy.describe(),
            placement=self.batch_placer.name if self.batch_placer is not None else self.placer.name,
            backfill=self.cfg.backfill,
            wall_seconds=time.perf_counter() - wall0,
            cycles=cycles,
            placer_stats=batch.stats() if batch is not None else {},
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
