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
  changes neither the reservation's time nor its plan (see ``settle``);
- an event that freed nothing, after a cycle in which every queued job failed on the raw free
  state (not merely on a reservation's caps), can only start one of the new arrivals: the cycle
  is skipped when none of them fits;
- for policies that order some classes of jobs by arrival (``Policy.order_classes``: every base
  policy), jobs with the same class, shape, CPUs, memory and estimate form one class: only its
  first queued job can be next, and a failure retires it whole, so a cycle orders a few hundred
  class heads instead of every queued job (``class_heads_cycle``); with static keys the heads
  stay sorted per shape between cycles (``shared.sim.heads``), so a cycle merges only the
  shapes it visits and touches only the heads it visits;
- a queue of one new arrival is tried directly (a cycle would try it alone, with no reservation).

Where it can (``shared.sim.compiled.run.unsupported``), ``run`` hands the whole simulation to a
compiled copy of this loop (``shared.sim.compiled``) that makes the same decisions, 3-10x faster;
``Simulator.core`` chooses the loop.
"""

from __future__ import annotations

import heapq
import math
import time
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.base import Policy, PolicyContext
from shared.scheduling.binding import BoundWorkload, nodes_needed
from shared.scheduling.partition import row_classes
from shared.scheduling.pinning import repin
from shared.scheduling.placement import (
    BestFit,
    Caps,
    FirstFit,
    Placer,
    alloc_fits,
    count_demand,
    make_placer,
    share_fits,
    whole_gpus_fit,
)
from shared.scheduling.releases import NodeReleases
from shared.scheduling.result import SimResult
from shared.scheduling.state import I64, Alloc, ClusterState, GroupState, top_from_hist
from shared.scheduling.workload_memo import per_workload
from shared.sim.config import SimConfig
from shared.sim.heads import Heads

if TYPE_CHECKING:
    from shared.placement import CpSatPlacer

INF = math.inf


@dataclass(frozen=True)
class Resume:
    """A cluster that is already running, for ``Simulator.run(resume=...)``.

    ``running``: job id -> (its allocation, its start time, its estimated end, exactly as the
    cluster reported it); its true end is unknown (it ends in no event of the run). An id may be a
    row of the workload or any id past its last row: a reservation's plan reads only the
    allocation and the estimated end, so a described cluster's running jobs need no rows.
    ``blocked``: resources held by nothing a reservation can plan to release (drained or down
    nodes, use the cluster reports but attributes to no job). The jobs of ``job_range`` must all
    have arrived by the time of the run's first event, which is when the one cycle runs.
    """

    running: dict[int, tuple[Alloc, float, float]]
    blocked: tuple[Alloc, ...] = ()
    #: the cluster with ``running`` and ``blocked`` already taken (built at once from a description,
    #: ``shared.schemas.snapshot_cluster``), used as the run's state; None: taken one by one
    state: ClusterState | None = None


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


@dataclass
class _Scratch:
    """A partial copy of the cluster used to find when a blocked job could start."""

    groups: list[GroupState | None]


@dataclass(slots=True)
class _Bound:
    """An EASY reservation known by its earliest possible time, its caps not yet built.

    ``when`` is exact unless CPUs or memory bind at ``point`` (the release after which the job
    fits GPU-wise); it never exceeds the exact time. ``group`` is the group of a gang fit (-1
    for a single-node fit, then ``node_pick`` holds the release, the group and the node).
    """

    job: int
    when: float
    point: tuple[float, int]
    group: int
    node_pick: tuple[tuple[float, int], int, int] | None


@dataclass(frozen=True, slots=True)
class _Columns:
    """A bound workload's per-job columns as Python lists, and what the run derives from them
    that depends on no policy, estimate or setting.

    Why cached: the hot loop reads jobs one at a time, where list indexing is several times
    cheaper than numpy scalar indexing, but converting the columns of the 82,247 Philly jobs cost
    about 40 ms per run, which a training episode over a short window paid every time. The
    lists are built once per workload (``_columns``) and only read by ``Simulator.run``.
    """

    submit: list[float]
    runtime: list[float]
    gpus: list[int]
    milli: list[int]
    cpu: list[int]
    mem: list[int]
    groups_of: list[tuple[int, ...]]
    shape: list[int]
    job_class: list[int]
    n_shapes: int
    shape_gclass: list[int]  # the class of eligible groups of each shape
    shape_min_cpu: list[int]  # per shape, the least CPUs and memory any of its jobs asks
    shape_min_mem: list[int]


def _columns(w: BoundWorkload) -> _Columns:
    """The ``_Columns`` of ``w``, kept per workload (``per_workload``)."""
    return per_workload(w, "columns", lambda: _build_columns(w))


def _build_columns(w: BoundWorkload) -> _Columns:
    jobs = w.jobs
    n = len(jobs)
    job_class = w.job_class.tolist()
    shape = w.shape.tolist()
    n_shapes = int(w.shape.max()) + 1 if n else 0
    shape_gclass = [0] * n_shapes
    for k_, c_ in zip(shape, job_class, strict=True):
        shape_gclass[k_] = c_
    smin = np.full(n_shapes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smin, w.shape, jobs.cpus_milli)
    shape_min_cpu = smin.tolist()
    smin[:] = np.iinfo(np.int64).max
    np.minimum.at(smin, w.shape, jobs.mem_mib)
    shape_min_mem = smin.tolist()
    return _Columns(
        submit=jobs.submit.tolist(),
        runtime=jobs.runtime.tolist(),
        gpus=jobs.gpus.tolist(),
        milli=jobs.gpu_milli.tolist(),
        cpu=jobs.cpus_milli.tolist(),
        mem=jobs.mem_mib.tolist(),
        groups_of=[w.class_groups[c] for c in job_class],
        shape=shape,
        job_class=job_class,
        n_shapes=n_shapes,
        shape_gclass=shape_gclass,
        shape_min_cpu=shape_min_cpu,
        shape_min_mem=shape_min_mem,
    )


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
    #: skip the cycle of an event that freed nothing when no new arrival fits (see ``cycle``)
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
    #: an EASY reservation's caps are built only when a job that may run past its earliest
    #: possible time wants its groups (``bound``, ``materialize``)
    lazy_reservations: bool = True
    #: a replayed reservation tracks only the nodes its releases touch until a fit test passes
    #: (``replay_light``) instead of releasing each job on full scratch copies
    light_replay: bool = True
    #: a bounded reservation of a gang of whole nodes under best-fit is planned from the arrays
    #: (``whole_node_plan``) instead of a scratch copy and the placer's gang walk
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
        self.allocations: dict[
            int, tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...] | None, int]
        ] = {}
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
        self.last_core = "python"
        self.allocations = {}
        record_allocs = self.record_allocations
        wall0 = time.perf_counter()
        w, cfg, placer, policy = self.w, self.cfg, self.placer, self.policy
        jobs = w.jobs
        n = len(jobs)
        lo, hi = job_range or (0, n)
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"job_range {job_range} outside 0..{n}")
        st = (
            ClusterState(w.spec, self.frac_groups) if resume is None or resume.state is None else resume.state
        )
        cols = _columns(w)
        submit, runtime, gpus, milli = cols.submit, cols.runtime, cols.gpus, cols.milli
        cpu, mem, groups_of, shape = cols.cpu, cols.mem, cols.groups_of, cols.shape
        if self._est_list is None:
            self._est_list = self.est.tolist()
        est = self._est_list
        slack = cfg.node_slack
        precheck_queue, visit_chunk, skip_idle = self.precheck_queue, self.visit_chunk, self.skip_idle_cycles
        retire = self.retire_dominated
        hist_precheck = type(placer) in (FirstFit, BestFit)  # ``whole_gpus_fit`` answers for these
        int_keys = policy.integer_keys
        overlay, profiles = self.overlay_reservations, self.node_release_profiles
        lazy = self.lazy_reservations and self.batch_placer is None
        light_replay = self.light_replay
        direct_gangs = self.direct_gang_plans and type(placer) is BestFit
        batch_placer = self.batch_placer
        if batch_placer is not None:
            from shared.placement import GroupCost, JobRequest, SolveStatus
        type_reserve = batch_placer is not None and cfg.cpsat_type_reserve
        demand_window = cfg.cpsat_demand_window
        demand_np = jobs.gpu_demand
        share_np = self.group_share
        node_caps = [(g.gpus, g.cpus_milli, g.mem_mib) for g in w.spec.node_groups]
        pstats: dict[str, float] = {
            "solves": 0,
            "solve_seconds": 0.0,
            "overridden": 0,
            "replans": 0,
            "held_back": 0,
        }
        call_ms: list[float] = []
        replan = cfg.cpsat_reservations
        releases = NodeReleases()
        mode = cfg.backfill
        count_mode = cfg.reservation == "count"
        max_res = cfg.max_reservations or 1 << 30
        static = not policy.dynamic
        static_keys = policy.keys(np.arange(n), 0.0) if static else None
        track = policy.tracks_jobs
        shape_np = w.shape
        class_np = w.job_class
        n_shapes = cols.n_shapes
        n_classes = len(w.class_groups)
        cpu_np, mem_np, est_np = jobs.cpus_milli, jobs.mem_mib, self.est

        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        nodes_used = np.zeros(n, dtype=np.int64)
        # the node group each job ran in: placement studies score idle GPUs per GPU type with it
        job_group = np.full(n, -1, dtype=np.int64)
        allocs: dict[int, Alloc] = {}
        policy.attach(st, allocs)
        heap: list[tuple[float, int]] = []
        run_sorted: list[tuple[float, int]] = []  # running jobs by estimated end, for reservations
        run_by_group: dict[int, list[tuple[float, int]]] = {}  # the same, per node group
        released_in = [0] * len(st.groups)  # jobs ended so far, per node group
        # the same summed over each class of eligible groups (the pre-check's signature)
        released_for = [0] * len(w.class_groups)
        classes_with: list[list[int]] = [[] for _ in st.groups]
        for c_, gset_ in enumerate(w.class_groups):
            for g_ in gset_:
                classes_with[g_].append(c_)
        job_class_of = cols.job_class
        blocked_since: dict[int, int] = {}  # shape -> releases in its groups when it fit nowhere
        # The queue in arrival order: jobs arrive in index order and are appended as ranges to
        # qbuf, which is compacted (started jobs dropped) when a cycle reads it: O(queue) numpy.
        in_queue = np.zeros(n, dtype=bool)
        qbuf = np.empty(max(n, 1), dtype=np.int64)
        qn = 0  # entries of qbuf in use
        q_upto = lo  # jobs below this index are in qbuf (or started)
        nq = 0
        shape_count: dict[int, int] = {}  # queued jobs per shape (GPU request + eligible groups)
        shape_rep: dict[int, int] = {}  # one job of each shape
        first_res = np.full(n, np.nan) if record_reservations else None
        # Order classes (``Policy.order_classes``) split by request: the jobs of one class share
        # shape, CPUs, memory and estimate, and the policy orders them by arrival, so only the
        # first queued job of a class can be next, and a failed request retires a class whole.
        order_cls = policy.order_classes()
        by_class = order_cls is not None and n > 0
        # a lone new arrival is tried without a cycle: only for policies whose keys have no side
        # effects beyond the clock (those that declare order classes)
        lone_arrival = self.lone_arrivals and by_class and batch_placer is None and not record_reservations
        bucket_queue = self.class_heads_queue
        head_chunk = self.head_chunk
        job_bucket: list[int] = []
        bucket_jobs: list[list[int]] = []  # per class, its jobs that arrived, in arrival order
        bucket_head: list[int] = []  # per class, the position of its first queued job
        head_pos = np.zeros(0, dtype=np.int64)  # the same as an array
        head_np = np.zeros(0, dtype=np.int64)  # per class, its first queued job (-1: none)
        queued = [False] * n  # in_queue as a list, for quick scalar reads
        shape_min_cpu: list[int] = []  # per shape, the least CPUs and memory any of its jobs asks
        shape_min_mem: list[int] = []
        if by_class:
            assert order_cls is not None
            bucket_np = row_classes(shape_np, cpu_np, mem_np, est_np, order_cls)
            job_bucket = bucket_np.tolist()
            n_buckets = int(bucket_np.max()) + 1  # ids 0..n_buckets - 1, every one used
            bucket_jobs = [[] for _ in range(n_buckets)]
            bucket_head = [0] * n_buckets
            head_pos = np.zeros(n_buckets, dtype=np.int64)
            head_np = np.full(n_buckets, -1, dtype=np.int64)
            shape_min_cpu, shape_min_mem = cols.shape_min_cpu, cols.shape_min_mem
        static_keys_l: list[float] | None = static_keys.tolist() if static_keys is not None else None
        # the heads of the order classes, sorted between cycles when keys do not move (and are
        # not NaN, which no sort orders consistently)
        heads = Heads(static_keys is not None and not bool(np.isnan(static_keys).any()))
        head_key: list[float] = static_keys_l if heads.sorted and static_keys_l is not None else [0.0] * n
        shape_gclass = cols.shape_gclass  # the class of eligible groups of each shape
        shape_gclass_np = np.array(shape_gclass, dtype=np.int64)
        tl_t: list[float] = []
        tl_busy: list[float] = []
        tl_q: list[int] = []
        cycles = 0
        all_blocked = False
        i = lo

        # per group with a reservation known by its bound only (``cycle``'s ``bounds``): the jobs
        # started there since; ``materialize`` adds them back to see the free state the reservation
        # was made on, so that building the caps late pins what building them at once would
        since_bound: dict[int, list[Alloc]] = {}

        if resume is not None:
            taken = resume.state is not None  # a state described with these allocations taken
            for held in resume.blocked if not taken else ():
                st.take(held)
            for j_, (on_, t0_, e_) in resume.running.items():
                # held until after the cycle (``end`` is unknown): released in no event of this run,
                # planned by reservations at its estimated end like any running job
                if not taken:
                    st.take(on_)
                allocs[j_] = on_
                if j_ < n:  # a row of the workload (else an id past it: only the plan reads it)
                    start[j_] = t0_
                    job_group[j_] = on_.group
                    nodes_used[j_] = len(on_.nodes)
                    heap.append((INF, j_))
                run_sorted.append((e_, j_))
                run_by_group.setdefault(on_.group, []).append((e_, j_))
                if profiles and st.groups[on_.group].gfree is None:
                    releases.add(j_, e_, on_)
            run_sorted.sort()  # one sort, not an insort per job
            for rg_ in run_by_group.values():
                rg_.sort()
            heapq.heapify(heap)
        self.final_allocs = allocs

        def start_job(j: int, a: Alloc, now: float) -> None:
            nonlocal nq
            st.take(a)
            if since_bound:
                started_here = since_bound.get(a.group)
                if started_here is not None:
                    started_here.append(a)
            allocs[j] = a
            in_queue[j] = False
            nq -= 1
            start[j] = now
            e = now + runtime[j]
            end[j] = e
            nodes_used[j] = len(a.nodes)
            job_group[j] = a.group
            if record_allocs:
                self.allocations[j] = (
                    a.group,
                    tuple(a.nodes),
                    tuple(a.whole),
                    None if a.gpu_ids is None else tuple(tuple(x) for x in a.gpu_ids),
                    a.frac_gpu,
                )
            heapq.heappush(heap, (e, j))
            insort(run_sorted, (now + est[j], j))
            insort(run_by_group.setdefault(a.group, []), (now + est[j], j))
            if profiles and st.groups[a.group].gfree is None:
                releases.add(j, now + est[j], a)
            k = shape[j]
            c = shape_count[k] - 1
            if c:
                shape_count[k] = c
            else:
                del shape_count[k]
            if by_class:
                queued[j] = False
                b = job_bucket[j]
                if head_np[b] == j:
                    lst = bucket_jobs[b]
                    h = bucket_head[b] + 1
                    while h < len(lst) and not queued[lst[h]]:
                        h += 1
                    bucket_head[b] = h
                    head_pos[b] = h
                    heads.remove(head_key[j], j, k)
                    if h < len(lst):
                        head_np[b] = nxt = lst[h]
                        heads.add(head_key[nxt], nxt, b, h, k)
                    else:
                        head_np[b] = -1
            if track:
                policy.on_start(j, now)

        def first_node_fit(
            node_groups: list[int], need: int, c_: int, mm: int
        ) -> tuple[tuple[float, int], int, int] | None:
            """The first release (in estimated-end order) after which a node of these groups holds
            the request, and the node the placer would pick then: with nothing fitting before, only
            the released job's nodes can newly fit, and among them best-fit takes the fullest
            (then lowest id), first-fit the lowest id."""
            first: tuple[float, int] | None = None
            picks: list[tuple[int, int, int, int, int]] = []  # (free GPUs, node, group, cpu, mem)
            for g in node_groups:
                for i, f in releases.group_fits(st.groups[g], need, c_, mm).items():
                    if f is None:
                        continue
                    if first is None or f[0] < first:
                        first, picks = f[0], [(f[1], i, g, f[2], f[3])]
                    elif f[0] == first:
                        picks.append((f[1], i, g, f[2], f[3]))
            if first is None:
                return None
            _, i, g, _, _ = min(picks) if placer.best else min(picks, key=lambda p: p[1])
            return first, g, i

        def gang_point(g: int, need: int, stop: tuple[float, int]) -> tuple[float, int] | None:
            """The first release in group g, before ``stop``, after which the free-GPU histogram
            of g could hold a gang of ``need`` GPUs (CPUs and memory not yet considered): the
            earliest time a reservation in g is possible. Whole-node gangs read it from the
            nodes' drain points; other gangs replay g's releases on the histogram alone."""
            gs0 = st.groups[g]
            runs = run_by_group.get(g)
            if not runs:
                return None
            if slack == 0 and need % gs0.G == 0:
                point = releases.kth_drain(gs0, need // gs0.G)
                if point is None:  # enough free nodes now: the first release is the first test
                    point = runs[0]
                return point if point < stop else None
            hist = [len(b) for b in gs0.bucket]
            free = gs0.free_whole
            span = nodes_needed(need, gs0.G) + slack
            whole: dict[int, int] = {}
            for e, r in runs:
                if (e, r) >= stop:
                    return None
                a = allocs[r]
                for t, i in enumerate(a.nodes):
                    dw = a.whole[t]
                    if dw:
                        w0 = whole.get(i)
                        if w0 is None:
                            w0 = int(gs0.whole[i])
                        hist[w0] -= 1
                        hist[w0 + dw] += 1
                        whole[i] = w0 + dw
                        free += dw
                if free >= need and top_from_hist(hist, span) >= need:
                    return (e, r)
            return None

        def bound(j: int, now: float) -> _Bound | None:
            """When blocked job j could start at the earliest, as a lower bound that is exact
            unless CPUs or memory bind at that point, or None where only ``replay`` answers
            (GPU shares, CPU-only jobs, shortcuts switched off).

            Nothing fits before the first release, so a fit appears right after some release:
            per node group, single-node requests read the first such release from cached per-node
            release profiles (exact, CPUs and memory included), gangs the first at which the
            free-GPU histogram holds them; the earliest of these is the bound.
            """
            gset = groups_of[j]
            need = gpus[j]
            if not (overlay and profiles and need and milli[j] == WHOLE_GPU_MILLI):
                return None
            if any(st.groups[g].gfree is not None for g in gset):
                return None
            c_, mm = cpu[j], mem[j]
            single = [g for g in gset if slack == 0 and need <= st.groups[g].G]
            node_pick = first_node_fit(single, need, c_, mm) if single else None
            best: tuple[float, int] = node_pick[0] if node_pick is not None else (INF, -1)
            hit = -1
            for g in gset:
                if g not in single:
                    point = gang_point(g, need, best)
                    if point is not None:
                        best, hit = point, g
            if best[0] == INF:
                return _Bound(j, INF, best, -1, None)
            return _Bound(j, max(best[0], now), best, hit, node_pick if hit < 0 else None)

        def changes_until(g: int, point: tuple[float, int]) -> dict[int, list[int]]:
            """The free [whole GPUs, CPUs, memory] of group g's nodes that running jobs ending up
            to ``point`` (in estimated-end order) release, per node they touch."""
            gs0 = st.groups[g]
            changes: dict[int, list[int]] = {}
            for e, r in run_by_group[g]:
                if (e, r) > point:
                    break
                a = allocs[r]
                for t, i in enumerate(a.nodes):
                    v = changes.get(i)
                    if v is None:
                        v = changes[i] = [int(gs0.whole[i]), int(gs0.cpu[i]), int(gs0.mem[i])]
                    v[0] += a.whole[t]
                    v[1] += a.cpu[t]
                    v[2] += a.mem[t]
            return changes

        def at_time(g: int, when: float) -> tuple[I64, I64, I64]:
            """Group g's free whole GPUs, CPUs and memory per node at ``when``: every running job
            whose estimated end is up to then released (ties at ``when`` included, as are jobs
            past their estimate when ``when`` is now). A reservation's pins and caps read this
            state: what is free at its time, not only after the release that made the job fit."""
            return st.groups[g].free_with(changes_until(g, (when, 1 << 62)))

        def pinned(
            g: int,
            nodes: list[int],
            takes: tuple[list[int], list[int], list[int]],
            at: tuple[I64, I64, I64],
            started: list[Alloc],
        ) -> list[int]:
            """A plan's nodes in group g re-pinned (``shared.scheduling.pinning``) against the free state
            the reservation is made on: now, plus what ``started`` (jobs started in the group since
            its bound) took."""
            gs0 = st.groups[g]
            if gs0.gfree is not None:
                return nodes  # groups that track GPU shares keep the placer's nodes
            now_w, now_c = gs0.whole, gs0.cpu
            if started:
                now_w, now_c = now_w.copy(), now_c.copy()
                for a in started:
                    if a.group == g:
                        for t, i in enumerate(a.nodes):
                            now_w[i] += a.whole[t]
                            now_c[i] += a.cpu[t]
            return repin(nodes, takes[0], takes[1], takes[2], now_w, now_c, at[0], at[1], at[2])

        def materialize(
            b: _Bound, now: float, caps_out: dict[int, tuple[float, Caps]], started: list[Alloc]
        ) -> float:
            """Turn a bound into the reservation (time and caps) that ``replay`` would find."""
            j = b.job
            need, c_, mm = gpus[j], cpu[j], mem[j]
            if b.when == INF:
                return INF
            if b.node_pick is not None:
                _, g, i = b.node_pick
                at = at_time(g, b.when)
                (i,) = pinned(g, [i], ([need], [c_], [mm]), at, started)
                cap = Caps.unlimited(st.groups[g].n)
                cap.whole[i] = at[0][i] - need
                cap.cpu[i] = at[1][i] - c_
                cap.mem[i] = at[2][i] - mm
                cap.block_shares(i)
                caps_out[g] = (b.when, counted(cap, g, b.when, gpus[j]))
                return b.when
            # a gang in group b.group: its nodes' free resources right after the bound's release;
            # another group cannot hold j there (it would have given an earlier bound)
            g = b.group
            gs0 = st.groups[g]
            changes = changes_until(g, b.point)
            G = gs0.G
            if direct_gangs and need > G > 0 and need % G == 0 and slack == 0 and gs0.gfree is None:
                return whole_node_plan(b, g, changes, now, caps_out, started)
            scratch = _Scratch([None] * len(st.groups))
            scratch.groups[g] = gs0.overlaid(changes)
            plan = placer.place(scratch, need, WHOLE_GPU_MILLI, c_, mm, (g,), None, slack)  # type: ignore[arg-type]
            if plan is None:
                # CPUs or memory bind: rare, replay from the start
                return replay(j, now, caps_out, started)
            return cap_plan(plan, scratch, b.when, caps_out, started)

        def whole_node_plan(
            b: _Bound,
            g: int,
            changes: dict[int, list[int]],
            now: float,
            caps_out: dict[int, tuple[float, Caps]],
            started: list[Alloc],
        ) -> float:
            """``materialize`` of a gang of k whole nodes under best-fit, without the scratch copy
            and the placer's gang walk: what that walk returns, read off the arrays.

            Best-fit's gang walk (``Placer._gang``) ranks nodes by usable GPUs (free GPUs, and what
            the CPUs and memory allow at the job's ratio), never above G per node; k x G GPUs on
            at most k nodes need k nodes at G, and the walk then takes, by its stable ranking and
            its tightest-node rule for the last piece, the k lowest-id nodes at G, each with G
            GPUs and its share of CPUs and memory. With fewer such nodes it finds nothing."""
            j = b.job
            need, c_, mm = gpus[j], cpu[j], mem[j]
            gs0 = st.groups[g]
            G = gs0.G
            k = need // G
            whole, cpus, mems = gs0.free_with(changes)
            usable = whole
            if c_:
                usable = np.minimum(usable, cpus * need // c_)
            if mm:
                usable = np.minimum(usable, mems * need // mm)
            full = np.flatnonzero(usable >= G)[:k].tolist()
            if len(full) < k:
                # CPUs or memory bind: rare, replay from the start
                return replay(j, now, caps_out, started)
            c_part = -(-c_ * G // need)
            m_part = -(-mm * G // need)
            whole, cpus, mems = at = at_time(g, b.when)
            full = pinned(g, full, ([G] * k, [c_part] * k, [m_part] * k), at, started)
            cap = Caps.unlimited(gs0.n)
            for i in full:
                cap.whole[i] = whole[i] - G
                cap.cpu[i] = cpus[i] - c_part
                cap.mem[i] = mems[i] - m_part
                cap.block_shares(i)
            caps_out[g] = (b.when, counted(cap, g, b.when, gpus[j]))
            return b.when

        def reserve(j: int, now: float, caps_out: dict[int, tuple[float, Caps]]) -> float:
            """Earliest estimated start of blocked job j and the caps that protect it."""
            b = bound(j, now)
            return replay(j, now, caps_out, []) if b is None else materialize(b, now, caps_out, [])

        def replay(
            j: int, now: float, caps_out: dict[int, tuple[float, Caps]], started: list[Alloc]
        ) -> float:
            """``reserve`` the plain way: running jobs are released, in order of estimated end, on
            a scratch copy of j's groups until j fits (the reference for every shortcut)."""
            gset = groups_of[j]
            need, m, c_, mm = gpus[j], milli[j], cpu[j], mem[j]
            single = need > 0 and (m < WHOLE_GPU_MILLI or need <= min(st.groups[g].G for g in gset))
            node_test = single and m == WHOLE_GPU_MILLI and slack == 0
            share_test = need > 0 and m < WHOLE_GPU_MILLI
            when = INF
            plan: Alloc | None = None
            scratch = _Scratch([None] * len(st.groups))
            if light_replay:
                found = replay_light(gset, need, m, c_, mm, node_test, share_test)
                if found is None:
                    return INF
                e_fit, plan, scratch, rest = found
                if plan is not None:
                    return cap_plan(plan, scratch, max(e_fit, now), caps_out, started)
                runs = run_sorted[rest:]  # the fit test passed but j did not fit: go on the plain way
            else:
                for g in gset:
                    scratch.groups[g] = st.groups[g].copy()
                runs = run_sorted
            for e, r in runs:
                a = allocs[r]
                gs = scratch.groups[a.group]
                if gs is None:
                    continue
                gs.give(a)
                if node_test:
                    ok = any(gs.whole[i] >= need and gs.cpu[i] >= c_ and gs.mem[i] >= mm for i in a.nodes)
                    if not ok:
                        continue
                elif share_test:
                    # a share fits only where a release left room on one GPU (nothing fit before)
                    mf = gs.maxfrac
                    if mf is None or not any(
                        mf[i] >= m and gs.cpu[i] >= c_ and gs.mem[i] >= mm for i in a.nodes
                    ):
                        continue
                elif need and m == WHOLE_GPU_MILLI and gs.top_whole(nodes_needed(need, gs.G) + slack) < need:
                    continue
                plan = placer.place(scratch, need, m, c_, mm, gset, None, slack)  # type: ignore[arg-type]
                if plan is not None:
                    when = max(e, now)
                    break
            if plan is None:
                return INF
            return cap_plan(plan, scratch, when, caps_out, started)

        def replay_light(
            gset: tuple[int, ...], need: int, m: int, c_: int, mm: int, node_test: bool, share_test: bool
        ) -> tuple[float, Alloc | None, _Scratch, int] | None:
            """The start of ``replay`` without scratch copies: releases, in order of estimated end,
            update only the free resources of the nodes they touch (and, for a gang, the free-GPU
            histogram), which is all the fit tests read; the scratch copies are built, once, when
            a test passes (each touched node set to its state after its releases, the state that
            ``give`` after ``give`` reaches). Returns None when no test passes, else (the estimated
            end of the release after which the test passed, the plan or None if j does not fit
            there after all, the scratch, the position in ``run_sorted`` after that release).

            Why: in groups that track GPU shares (every group of the embedded workload) release
            profiles do not apply and every reservation is a replay; a ``give`` on a full copy
            (numpy row updates, the partly used GPU lists) cost ten times this bookkeeping."""

            want = [False] * len(st.groups)
            for g in gset:
                want[g] = True
            touched: dict[int, dict[int, list[int]]] = {g: {} for g in gset}
            rows: dict[tuple[int, int], list[int]] = {}  # per-GPU free milli-GPUs of touched nodes

            def build(scratch: _Scratch, g2: int) -> None:
                """Group g2's scratch copy: each touched node set to its state after its releases."""
                gs = scratch.groups[g2] = st.groups[g2].copy()
                for i, v in touched[g2].items():
                    row2 = rows.get((g2, i))
                    if row2 is None:
                        gs.set_free(i, v[0], v[1], v[2])
                    else:
                        gs.set_shares(i, row2, v[1], v[2])

            gang = not node_test and not share_test and need > 0 and m == WHOLE_GPU_MILLI
            hists = {g: [len(b) for b in st.groups[g].bucket] for g in gset} if gang else {}
            pos = 0
            for e, r in run_sorted:
                pos += 1
                a = allocs[r]
                g = a.group
                if not want[g]:
                    continue
                gs0 = st.groups[g]
                gfree = gs0.gfree
                nodes_g = touched[g]
                for t, i in enumerate(a.nodes):
                    v = nodes_g.get(i)
                    if v is None:
                        # [free whole GPUs, milli-CPUs, MiB, the largest free share on one GPU]
                        v = nodes_g[i] = [
                            int(gs0.whole[i]),
                            int(gs0.cpu[i]),
                            int(gs0.mem[i]),
                            int(gs0.maxfrac[i]) if gs0.maxfrac is not None else 0,
                        ]
                        if gfree is not None:
                            rows[g, i] = gfree[i].tolist()
                    w0 = v[0]
                    v[1] += a.cpu[t]
                    v[2] += a.mem[t]
                    if gfree is None:
                        v[0] = w0 + a.whole[t]
                    else:
                        row = rows[g, i]
                        if a.gpu_ids is not None and a.gpu_ids[t]:
                            for gpu in a.gpu_ids[t]:
                                row[gpu] = WHOLE_GPU_MILLI
                        if a.frac_gpu >= 0:
                            row[a.frac_gpu] += a.milli
                        v[0] = row.count(WHOLE_GPU_MILLI)
                        v[3] = max(row) if gs0.G else 0
                    if gang and v[0] != w0:
                        hist = hists[g]
                        hist[w0] -= 1
                        hist[v[0]] += 1
                if node_test:
                    if not any(
                        v[0] >= need and v[1] >= c_ and v[2] >= mm for v in (nodes_g[i] for i in a.nodes)
                    ):
                        continue
                elif share_test:
                    if gfree is None or not any(
                        v[3] >= m and v[1] >= c_ and v[2] >= mm for v in (nodes_g[i] for i in a.nodes)
                    ):
                        continue
                elif gang and top_from_hist(hists[g], nodes_needed(need, gs0.G) + slack) < need:
                    continue
                scratch = _Scratch([None] * len(st.groups))
                # With a fit test, j can fit only in g: every other group of gset either did not
                # change since now, when j fitted nowhere, or failed the test (a necessary
                # condition) after its last release; placed over g alone, j gets what the placer
                # would give it over all of gset, and only g needs a scratch copy.
                tested = node_test or share_test or gang
                for g2 in (g,) if tested else gset:
                    build(scratch, g2)
                plan = placer.place(scratch, need, m, c_, mm, (g,) if tested else gset, None, slack)  # type: ignore[arg-type]
                if plan is None and tested:
                    for g2 in gset:  # the replay goes on the plain way, over every group of gset
                        if g2 != g:
                            build(scratch, g2)
                return e, plan, scratch, pos
            return None

        def cap_plan(
            plan: Alloc,
            scratch: _Scratch,
            when: float,
            caps_out: dict[int, tuple[float, Caps]],
            started: list[Alloc],
        ) -> float:
            """Record a reservation: later jobs may take on the plan's nodes (re-pinned where the
            placer chose nodes free now: ``pinned``) only what leaves the plan room at ``when``
            (free there on the scratch minus the plan)."""
            gs = scratch.groups[plan.group]
            assert gs is not None
            nodes = plan.nodes
            free_w, free_c, free_m = gs.whole, gs.cpu, gs.mem
            if gs.gfree is None:  # groups that track GPU shares keep the scratch's state
                free_w, free_c, free_m = at = at_time(plan.group, when)
                nodes = pinned(plan.group, nodes, (plan.whole, plan.cpu, plan.mem), at, started)
            cap = Caps.unlimited(gs.n)
            for k, i in enumerate(nodes):
                extra = 0
                if (
                    plan.frac_gpu >= 0
                    and gs.gfree is not None
                    and gs.gfree[i, plan.frac_gpu] == WHOLE_GPU_MILLI
                ):
                    extra = 1
                cap.whole[i] = free_w[i] - plan.whole[k] - extra
                cap.cpu[i] = free_c[i] - plan.cpu[k]
                cap.mem[i] = free_m[i] - plan.mem[k]
                cap.block_shares(i)
            caps_out[plan.group] = (when, counted(cap, plan.group, when, count_demand(plan)))
            return when

        def counted(cap: Caps, g: int, when: float, need: int) -> Caps:
            """``cap`` with, in count mode, textbook EASY's extra GPUs of a reservation in group g
            at ``when`` for a job taking ``need`` GPUs: free now, plus what running jobs with
            estimated ends up to ``when`` release, minus ``need``."""
            if count_mode:
                free = st.groups[g].free_whole
                for e, r in run_by_group.get(g, ()):
                    if e > when:
                        break
                    free += count_demand(allocs[r])
                cap.count = free - need
            return cap

        def place_under(j: int, gset: tuple[int, ...], caps: dict[int, Caps] | None) -> Alloc | None:
            """Place job j now under the reservations it would run past (``caps``): node caps,
            or in count mode only the groups whose extra GPUs hold it."""
            if caps and count_mode:
                need = gpus[j] if milli[j] >= WHOLE_GPU_MILLI else 1
                gset = tuple(g for g in gset if g not in caps or (caps[g].count or 0) >= need)
                if not gset:
                    return None
                caps = None
            return placer.place(st, gpus[j], milli[j], cpu[j], mem[j], gset, caps, slack)

        def candidates(now: float, shape_blocked: set[int]) -> tuple[I64, FloatArray, int]:
            """The queued jobs a cycle must visit, with their sort keys (arrival order).

            Jobs of a shape that fits nowhere can neither start nor change anything, except the
            first of them (by key, then arrival) per class of eligible groups: it may take an EASY
            reservation (a later job of the same class finds its groups already covered) or,
            without backfill, stop the queue. Only those and the jobs of fitting shapes remain.
            """
            nonlocal qn, q_upto
            if q_upto < i:
                qbuf[qn : qn + i - q_upto] = np.arange(q_upto, i)
                qn += i - q_upto
                q_upto = i
            q = qbuf[:qn]
            if qn != nq:
                q = q[in_queue[q]]
                qn = len(q)
                qbuf[:qn] = q
            else:
                q = q.copy()
            keys = static_keys[q] if static_keys is not None else policy.keys(q, now)
            if not shape_blocked:
                return q, keys, len(q)
            blocked_shape = np.zeros(n_shapes, dtype=bool)
            blocked_shape[list(shape_blocked)] = True
            bmask = blocked_shape[shape_np[q]]
            free = ~bmask
            if mode == "greedy":
                return q[free], keys[free], int(free.sum())
            qb, kb = q[bmask], keys[bmask]
            cb = class_np[qb]
            present = np.flatnonzero(np.bincount(cb, minlength=n_classes))
            if len(present) == 1:
                heads = [int(np.argmin(kb))]  # first minimum: ties go to the earliest arrival
            else:
                heads = []
                for c in present.tolist():
                    sub = np.flatnonzero(cb == c)
                    heads.append(int(sub[np.argmin(kb[sub])]))
            qf = q[free]
            return np.concatenate((qf, qb[heads])), np.concatenate((keys[free], kb[heads])), len(qf)

        def group_costs() -> dict[int, GroupCost]:
            """Tier (t)'s prices: per group, the GPU demand of the whole queue and of the last
            ``cpsat_demand_window`` arrivals expected to land there (each job spread over its
            eligible groups in proportion to their GPUs, weighted by its inflexibility) per free
            GPU. A job that can only use a few types loads them heavily,
            one that can run anywhere not at all: placing a flexible job on a cheap group keeps
            the scarce types for the jobs that have no alternative, and where no waiting job is
            constrained every price is 0 and the five-tier model decides as before (pricing all
            demand would push jobs to the emptiest groups: measured on Philly, 14% more idle
            GPU-hours than best-fit). CPUs and memory are priced at the same rate per node share,
            so CPU-heavy jobs pay for the node room they take."""
            q = qbuf[:qn]  # the queue, compacted by ``candidates`` in this cycle
            by_class = np.bincount(class_np[q], weights=demand_np[q], minlength=n_classes)
            if demand_window:
                # the last arrivals too, started or not: the queue alone forgets a scarce type
                # whenever its jobs happen to be running, and flexible jobs then fill it (one
                # 8-GPU G3-only openb job waited 51 min behind them with the queue alone)
                lo_w = max(lo, i - demand_window)
                by_class += np.bincount(class_np[lo_w:i], weights=demand_np[lo_w:i], minlength=n_classes)
            want = by_class @ share_np
            out = {}
            for g, (G, cpus, mems) in enumerate(node_caps):
                if G == 0 or want[g] <= 0:
                    continue
                r = float(want[g]) / max(st.groups[g].free_whole, 1)
                out[g] = GroupCost(r, r * G / cpus if cpus else 0.0, r * G / mems if mems else 0.0)
            return out

        def batch_requests(fq: I64, fk: FloatArray) -> list[JobRequest]:
            """The top K startable jobs of this cycle's order, then the look-ahead jobs."""
            assert batch_placer is not None
            cfg_k = batch_placer.settings.k + batch_placer.settings.lookahead
            if len(fq) > cfg_k:
                edge = np.partition(fk, cfg_k - 1)[cfg_k - 1]
                keep = fk <= edge
                fq, fk = fq[keep], fk[keep]
            ranked = fq[np.lexsort((fq, fk))][:cfg_k].tolist()
            k = batch_placer.settings.k
            return [
                JobRequest(
                    gpus[j],
                    milli[j] if gpus[j] else WHOLE_GPU_MILLI,
                    cpu[j],
                    mem[j],
                    groups_of[j],
                    weight=(k - min(r, k - 1)) / k,  # tier (b): higher rank, more weight
                    est_runtime=est[j],
                    job_id=j,
                )
                for r, j in enumerate(ranked)
            ]

        def batch_place(
            batch: list[JobRequest],
            ahead: list[JobRequest],
            now: float,
            reserved: dict[int, tuple[float, Caps]],
        ) -> dict[int, Alloc | None]:
            """CP-SAT's joint placement of ``batch``, under the reservations made so far: a job
            that would still run at a reservation's time respects its caps (as in the walk)."""
            assert batch_placer is not None
            caps = {g: c for g, (_, c) in reserved.items()}
            if reserved:
                batch = [
                    replace(
                        r,
                        capped=tuple(
                            g for g in r.groups if g in reserved and now + est[r.job_id] > reserved[g][0]
                        ),
                    )
                    for r in batch
                ]
            res = batch_placer.place_batch(
                st, batch, ahead, group_costs() if type_reserve else None, caps or None
            )
            pstats["solves"] += 1
            pstats[f"status_{res.status.value}"] = pstats.get(f"status_{res.status.value}", 0) + 1
            pstats["solve_seconds"] += res.wall_s
            if res.status is not SolveStatus.NOTHING_FITS:  # calls that built a model (latency target)
                call_ms.append(res.wall_s * 1e3)
            return {r.job_id: d.alloc for r, d in zip(batch, res.decisions, strict=True)}

        def first_in_order(at: I64, hk: FloatArray, hj: I64) -> int:
            """The entry of ``at`` that ``np.lexsort((hj, hk))`` puts first: the smallest key
            (NaN after every number), then the smallest job."""
            k_at = hk[at]
            num = ~np.isnan(k_at)
            if num.any():
                at = at[k_at == k_at[num].min()]
            return int(at[np.argmin(hj[at])])

        def list_heads(
            src: list[tuple[float, int, int, int]],
            rest: tuple[I64, I64, FloatArray] | None,
            want: int,
        ) -> tuple[I64, I64, FloatArray] | None:
            """Append to ``src`` the next heads of ``rest`` (classes, jobs, keys, not yet listed)
            in (key, job) order, at least ``want`` of them unless fewer are left, and return
            those left. The entries appended are the ones ``np.lexsort((jobs, keys))`` of all
            of ``rest`` puts first, in its order: every key up to the ``want``-th smallest
            comes before every larger key and every NaN (which sorts last), and of the heads
            with the ``want``-th smallest key, those of the smallest jobs come first."""
            if rest is None:
                return None
            act, hj, hk = rest
            if len(hk) > want:
                edge = np.partition(hk, want - 1)[want - 1]
                if not np.isnan(edge):
                    take = hk < edge
                    tied = np.flatnonzero(hk == edge)
                    room = want - int(np.count_nonzero(take))  # at least 1
                    if len(tied) > room:
                        # integer keys (Slurm priorities) tie by the thousand: of the tied
                        # heads only the ``room`` smallest jobs, which come first
                        cut = np.partition(hj[tied], room - 1)[room - 1]
                        tied = tied[hj[tied] <= cut]
                    take[tied] = True
                    sel = np.flatnonzero(take)
                    left = ~take
                    rest = (act[left], hj[left], hk[left])
                    act, hj, hk = act[sel], hj[sel], hk[sel]
                else:
                    rest = None
            else:
                rest = None
            srt = np.lexsort((hj, hk))
            src.extend(
                zip(
                    hk[srt].tolist(),
                    hj[srt].tolist(),
                    act[srt].tolist(),
                    head_pos[act[srt]].tolist(),
                    strict=True,
                )
            )
            return rest if rest is not None and len(rest[0]) else None

        def class_heads_cycle(
            now: float,
            shape_blocked: set[int],
            try_reserve: Callable[[int], None],
            settle: Callable[[tuple[int, ...], float], None],
            reserved: dict[int, tuple[float, Caps]],
        ) -> bool:
            """The visit of ``cycle`` over order classes: the same jobs in the same (key, arrival)
            order, but only the first queued job of each class is ordered at a time (the next one
            when it has been visited), and a failed request retires the classes it dominates (same
            shape, at least its CPUs and memory, estimate beyond the threshold), as the array
            filter of ``cycle`` retires the jobs."""
            soft = False
            # The order is a k-way merge: a heap of (key, job, class, position, source, index)
            # holds the next entry of each source (a sorted list of heads), plus the entries
            # pushed during the visit (source -1): the next job of a class whose head was
            # visited, and the first job per class of eligible groups of the shapes that fit
            # nowhere (class -1: it may take a reservation, or stop the queue without backfill;
            # the other heads of those shapes are passed over).
            srcs: list[list[tuple[float, int, int, int]]] = []
            order: list[tuple[float, int, int, int, int, int]] = []
            firsts: dict[int, tuple[float, int, int, int]] = {}
            # entries of the order whose shape is not retired whole: the visit ends at 0
            in_order: dict[int, int] = {}
            # heads not yet listed in source ``lazy_src`` (keys that move with the clock)
            lazy_rest: tuple[I64, I64, FloatArray] | None = None
            lazy_src = -1
            lazy_want = head_chunk
            if heads.sorted:
                for k, lst in heads.by_shape.items():
                    if k in shape_blocked:
                        gc = shape_gclass[k]
                        f = firsts.get(gc)
                        if f is None or lst[0] < f:
                            firsts[gc] = lst[0]
                        continue
                    e0 = lst[0]
                    order.append((e0[0], e0[1], e0[2], e0[3], len(srcs), 0))
                    srcs.append(lst.copy())  # starts in this cycle change the list
                    in_order[k] = len(lst)
            else:
                act = np.flatnonzero(head_np >= 0)
                hj = head_np[act]
                hk = policy.keys(hj, now)
                if shape_blocked:
                    # heads of blocked shapes only give the first head (by key, then job) per
                    # class of eligible groups, in that order; only the others are listed
                    blocked_shape = np.zeros(n_shapes, dtype=bool)
                    blocked_shape[list(shape_blocked)] = True
                    bm = blocked_shape[shape_np[hj]]
                    b_at = np.flatnonzero(bm)
                    if len(b_at):
                        gcs = shape_gclass_np[shape_np[hj[b_at]]]
                        fb_l = []
                        for gc in np.flatnonzero(np.bincount(gcs)).tolist():
                            fb_l.append(first_in_order(b_at[gcs == gc], hk, hj))
                        fb = np.array(fb_l, dtype=np.int64)
                        fb = fb[np.lexsort((hj[fb], hk[fb]))]
                        for e0 in zip(
                            hk[fb].tolist(),
                            hj[fb].tolist(),
                            act[fb].tolist(),
                            head_pos[act[fb]].tolist(),
                            strict=True,
                        ):
                            firsts[shape_gclass[shape[e0[1]]]] = e0
                        keep = ~bm
                        act, hj, hk = act[keep], hj[keep], hk[keep]
                src: list[tuple[float, int, int, int]] = []
                if head_chunk and len(act) > 2 * head_chunk:
                    # listed lazily: the visit often ends after a few heads (a committed head
                    # that does not fit, or a queue whose jobs all start), so only the
                    # smallest keys are sorted; the list grows when the visit reaches its end
                    lazy_rest = list_heads(src, (act, hj, hk), lazy_want)
                    lazy_src = 0 if lazy_rest is not None else -1
                else:
                    list_heads(src, (act, hj, hk), len(act))  # every head, one full sort
                if src:
                    e0 = src[0]
                    order.append((e0[0], e0[1], e0[2], e0[3], 0, 0))
                    srcs.append(src)
                in_order = {k: c for k, c in heads.per_shape.items() if k not in shape_blocked}
            live = sum(in_order.values())
            if mode != "greedy":
                for e0 in firsts.values():
                    order.append((e0[0], e0[1], -1, -1, -1, 0))
                live += len(firsts)
            heapq.heapify(order)
            retired: dict[int, list[tuple[int, int, float]]] = {}  # shape -> (CPUs, memory, threshold)
            dead: set[int] = set()  # shapes retired whole (a failure with their least CPUs and memory)

            def push_next(b: int, h: int) -> None:
                nonlocal live
                lst = bucket_jobs[b]
                h += 1
                while h < len(lst) and not queued[lst[h]]:
                    h += 1
                if h < len(lst):
                    j2 = lst[h]
                    k2 = static_keys_l[j2] if static_keys_l is not None else policy.key(j2, now)
                    heapq.heappush(order, (k2, j2, b, h, -1, 0))
                    in_order[shape[j2]] += 1
                    live += 1

            while live > 0:
                _, j, b, h, si, ix = heapq.heappop(order)
                if si >= 0:  # the source's next entry takes its place
                    lst = srcs[si]
                    if si == lazy_src and ix + 1 == len(lst):
                        lazy_want *= 2  # a long visit: list more heads at a time
                        lazy_rest = list_heads(lst, lazy_rest, lazy_want)
                        if lazy_rest is None:
                            lazy_src = -1
                    if ix + 1 < len(lst):
                        e1 = lst[ix + 1]
                        heapq.heappush(order, (e1[0], e1[1], e1[2], e1[3], si, ix + 1))
                if b < 0:  # the first job of a group class whose shape fits nowhere
                    live -= 1
                    if mode == "none":
                        return False
                    try_reserve(j)
                    continue
                k = shape[j]
                in_order[k] -= 1
                if k in dead:
                    continue
                live -= 1
                e_j, c_j, m_j = est[j], cpu[j], mem[j]
                recs = retired.get(k)
                if recs is not None and any(c_j >= cf and m_j >= mf and e_j > tf for cf, mf, tf in recs):
                    continue  # retired, and with it the rest of its class
                gset = groups_of[j]
                settle(gset, now + e_j)
                capped: tuple[int, ...] = ()
                caps: dict[int, Caps] | None = None
                if reserved:
                    finish = now + e_j
                    capped = tuple(g for g in gset if g in reserved and finish > reserved[g][0])
                    if capped:
                        caps = {g: reserved[g][1] for g in capped}
                a = place_under(j, gset, caps)
                if a is not None:
                    start_job(j, a, now)
                    if capped and a.group in capped:
                        reserved[a.group][1].consume(a)
                    push_next(b, h)
                    continue
                if mode == "none":
                    return False
                if capped:
                    soft = True
                    thr = max(reserved[g][0] for g in capped) - now
                else:
                    thr = -INF
                    if mode == "easy":
                        try_reserve(j)
                    if c_j <= shape_min_cpu[k] and m_j <= shape_min_mem[k]:
                        dead.add(k)
                        live -= in_order[k]
                        continue
                retired.setdefault(k, []).append((c_j, m_j, thr))
                if not e_j > thr:  # else the record retires the rest of j's class as well
                    push_next(b, h)
            return nq == 0 or (mode != "none" and not soft)

        def cycle(now: float) -> bool:
            """One scheduling pass; True when every job left queued failed on the raw free state.

            Resources (and reservation caps) only shrink within a cycle, so a request that failed
            keeps failing, and so does any queued request of the same shape asking for at least as
            many CPUs and as much memory and running at least as long: one vectorized filter
            retires all of those, and the cycle visits only jobs that may still start. Jobs are
            visited in (key, arrival) order, a chunk of the smallest keys at a time.
            """
            shape_blocked: set[int] = set()  # shapes whose GPUs fit nowhere now
            if nq > precheck_queue:
                # a long queue holds few distinct shapes: test each GPU request once, before ordering
                blocked = 0
                for k, count in shape_count.items():
                    r = shape_rep[k]
                    # a request that fit nowhere stays so until a job ends in one of its groups
                    sig = released_for[job_class_of[r]]
                    if blocked_since.get(k) == sig:
                        shape_blocked.add(k)
                        blocked += count
                    elif (
                        (
                            not whole_gpus_fit(st, gpus[r], groups_of[r], slack)
                            if milli[r] >= WHOLE_GPU_MILLI
                            else not share_fits(st, milli[r], groups_of[r])
                        )
                        if hist_precheck and gpus[r] and milli[r] > 0
                        else placer.place(st, gpus[r], milli[r], 0, 0, groups_of[r], None, slack) is None
                    ):
                        shape_blocked.add(k)
                        blocked += count
                        blocked_since[k] = sig
                    else:
                        blocked_since.pop(k, None)
                if blocked >= nq:
                    return mode != "none"
            reserved: dict[int, tuple[float, Caps]] = {}
            covered: set[int] = set()
            n_res = 0
            soft = False  # a job failed only because of a reservation's caps

            # A reservation is computed only when a later job wants nodes of its groups: until
            # then nothing has changed there, so computing it later gives the same result, and
            # a cycle in which no job behind the head can use those groups never pays for it.
            pending_res: dict[int, int] = {}  # group -> blocked head whose reservation is due

            def try_reserve(j: int) -> None:
                nonlocal n_res
                if n_res < max_res and covered.isdisjoint(groups_of[j]):
                    n_res += 1
                    covered.update(groups_of[j])
                    if first_res is None:
                        for g in groups_of[j]:
                            pending_res[g] = j
                        return
                    t_res = reserve(j, now, reserved)
                    if t_res < INF and np.isnan(first_res[j]):
                        first_res[j] = t_res

            # A due reservation is first only bounded (``bound``): a job that ends before the
            # bound cannot be capped by it, and starting such a job changes neither the time
            # nor the plan (it is released before the fit in the replay), so the caps are built
            # (``materialize``) only when a job that may run past the bound wants its groups.
            bounds: dict[int, _Bound] = {}  # group -> its reservation, known by a bound only
            since_bound.clear()

            def settle(gset: tuple[int, ...], finish: float) -> None:
                """Make the reservations on ``gset`` exact where a job running until ``finish``
                may be capped by them."""
                for g in gset:
                    h = pending_res.get(g)
                    if h is not None:
                        for g2 in groups_of[h]:
                            pending_res.pop(g2, None)
                        b = bound(h, now) if lazy else None
                        if b is None:
                            reserve(h, now, reserved)
                        else:
                            for g2 in groups_of[h]:
                                bounds[g2] = b
                                since_bound[g2] = []
                    b = bounds.get(g)
                    if b is not None and finish >= b.when:
                        started: list[Alloc] = []
                        for g2 in groups_of[b.job]:
                            bounds.pop(g2, None)
                            started += since_bound.pop(g2, [])
                        materialize(b, now, reserved, started)

            if by_class and nq > bucket_queue and batch_placer is None and retire:
                return class_heads_cycle(now, shape_blocked, try_reserve, settle, reserved)
            cq, ck, n_free = candidates(now, shape_blocked)
            alive = np.ones(len(cq), dtype=bool)
            preset: dict[int, Alloc | None] = {}
            batch: list[JobRequest] = []
            ahead: list[JobRequest] = []
            batch_pos: dict[int, int] = {}  # job -> its position in cq
            if batch_placer is not None and n_free:
                reqs = batch_requests(cq[:n_free], ck[:n_free])
                batch, ahead = reqs[: batch_placer.settings.k], reqs[batch_placer.settings.k :]
                preset = batch_place(batch, ahead, now, {})
                ids = np.array([r.job_id for r in batch], dtype=np.int64)
                hit = np.flatnonzero(np.isin(cq[:n_free], ids))
                batch_pos = dict(zip(cq[hit].tolist(), hit.tolist(), strict=True))
            preset_res = 0  # reservations the preset was solved under
            retire_cols: tuple[I64, I64, I64, FloatArray] | None = None
            pending = np.arange(len(cq))
            if len(cq) > visit_chunk and int_keys:
                lo_k, hi_k = float(ck.min()), float(ck.max())
                if max(abs(lo_k), abs(hi_k)) * (n + 1) < 2**52 and bool(np.all(ck == np.floor(ck))):
                    # integer keys (Slurm priorities) tie a lot, and selection over many equal
                    # values is slow: key x (n + 1) + job index is unique and sorts the same way
                    ck = ck * float(n + 1) + cq
            while len(pending):
                if len(pending) > visit_chunk:
                    pk = ck[pending]
                    edge = np.partition(pk, visit_chunk - 1)[visit_chunk - 1]
                    below = pk < edge
                    tied = np.flatnonzero(pk == edge)
                    room = visit_chunk - int(np.count_nonzero(below))
                    if len(tied) > room:
                        # many jobs share the edge key (integer priorities): take the earliest
                        # arrivals among them, the rest wait for the next chunk
                        if pending[tied[-1]] >= n_free:  # blocked heads sit after the arrival-ordered part
                            tied = tied[np.argsort(cq[pending[tied]], kind="stable")]
                        below[tied[:room]] = True
                    else:
                        below[tied] = True
                    chunk, pending = pending[below], pending[~below]
                else:
                    chunk, pending = pending, pending[:0]
                chunk = chunk[np.lexsort((cq[chunk], ck[chunk]))]
                for p, j in zip(chunk.tolist(), cq[chunk].tolist(), strict=True):
                    if not alive[p]:
                        continue
                    k = shape[j]
                    if k in shape_blocked:
                        if mode == "none":
                            return False  # committed head: nothing behind it may start
                        if mode == "easy":
                            try_reserve(j)
                        continue
                    e_j, c_j, m_j = est[j], cpu[j], mem[j]
                    gset = groups_of[j]
                    if pending_res or bounds:
                        settle(gset, now + e_j)
                    capped: tuple[int, ...] = ()
                    caps: dict[int, Caps] | None = None
                    if reserved:
                        finish = now + e_j
                        capped = tuple(g for g in gset if g in reserved and finish > reserved[g][0])
                        if capped:
                            caps = {g: reserved[g][1] for g in capped}
                    a: Alloc | None = None
                    if j in preset and replan and len(reserved) != preset_res:
                        # a reservation was made since the batch was solved: solve the jobs of
                        # the batch not yet visited again, under its caps, so that CP-SAT's
                        # decisions stay admissible instead of being overridden below
                        preset_res = len(reserved)
                        left = [r for r in batch if alive[batch_pos[r.job_id]]]
                        preset.update(batch_place(left, ahead, now, reserved))
                        pstats["replans"] += 1
                    if j in preset:
                        # the batch placer's choice, if reservations made since have not ruled it out
                        a = preset[j]
                        if a is not None and not alloc_fits(st, a, caps, milli[j]):
                            a = None
                            pstats["overridden"] += 1
                        if a is None and placer.place(st, gpus[j], milli[j], c_j, m_j, gset, caps, slack):
                            alive[p] = False
                            soft = True  # held back by the batch placer, not by lack of room
                            pstats["held_back"] += 1
                            continue
                    if a is None:
                        a = place_under(j, gset, caps)
                    alive[p] = False
                    if a is not None:
                        start_job(j, a, now)
                        if capped and a.group in capped:
                            reserved[a.group][1].consume(a)
                        continue
                    if mode == "none":
                        return False
                    # jobs running past the latest of these reservations are capped on a superset
                    # of these groups: with at least these requests they cannot start either
                    if capped:
                        soft = True
                        thr = max(reserved[g][0] for g in capped) - now
                    else:
                        thr = -INF
                        if mode == "easy":
                            try_reserve(j)
                    if not retire:
                        continue
                    if retire_cols is None:
                        retire_cols = (shape_np[cq], cpu_np[cq], mem_np[cq], est_np[cq])
                    s_, c_, m_, e_ = retire_cols
                    alive &= ~((s_ == k) & (c_ >= c_j) & (m_ >= m_j) & (e_ > thr))
                if len(pending):
                    pending = pending[alive[pending]]
            return nq == 0 or (mode != "none" and not soft)

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
                released_in[a.group] += 1
                for c_ in classes_with[a.group]:
                    released_for[c_] += 1
                del run_sorted[bisect_left(run_sorted, (start[r] + est[r], r))]
                rg = run_by_group[a.group]
                del rg[bisect_left(rg, (start[r] + est[r], r))]
                if profiles and st.groups[a.group].gfree is None:
                    releases.remove(r, start[r] + est[r], a)
                released = True
                if track:
                    policy.on_end(r, now)
            first_new = i
            while i < hi and submit[i] <= now:
                in_queue[i] = True
                nq += 1
                k = shape[i]
                shape_count[k] = shape_count.get(k, 0) + 1
                shape_rep.setdefault(k, i)
                if by_class:
                    queued[i] = True
                    b = job_bucket[i]
                    lst = bucket_jobs[b]
                    lst.append(i)
                    if head_np[b] < 0:
                        head_np[b] = i
                        bucket_head[b] = len(lst) - 1
                        head_pos[b] = len(lst) - 1
                        heads.add(head_key[i], i, b, len(lst) - 1, k)
                i += 1
            if nq == 1 and i - first_new == 1 and lone_arrival:
                # the queue is one new arrival: a cycle would try it alone, with no reservation
                # to respect (and would only note its own, which nothing behind it uses)
                a_new = placer.place(
                    st,
                    gpus[first_new],
                    milli[first_new],
                    cpu[first_new],
                    mem[first_new],
                    groups_of[first_new],
                    None,
                    slack,
                )
                if a_new is not None:
                    start_job(first_new, a_new, now)
                    all_blocked = True
                    cycles += 1
                elif released or not all_blocked or not skip_idle:
                    all_blocked = mode != "none"
                    cycles += 1
            elif nq:
                run_cycle = released or not all_blocked or not skip_idle
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
            tl_q.append(nq)
            if resume is not None:
                break  # one cycle on the resumed cluster, nothing after it
            if not heap and i >= hi and nq:
                raise SimulationError(
                    f"{nq} job(s) can never start on an idle cluster (binding should have excluded them)"
                )

        self.first_reservation = first_res
        self.job_group = job_group
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
            placement=batch_placer.name if batch_placer is not None else placer.name,
            backfill=cfg.backfill,
            wall_seconds=time.perf_counter() - wall0,
            cycles=cycles,
            placer_stats=(pstats | _latency_stats(call_ms)) if batch_placer is not None else {},
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


def _latency_stats(call_ms: list[float]) -> dict[str, float]:
    """p50/p99/max wall time of the batch placer's calls that built a model, in milliseconds."""
    if not call_ms:
        return {}
    a = np.asarray(call_ms)
    return {
        "call_ms_p50": float(np.percentile(a, 50)),
        "call_ms_p99": float(np.percentile(a, 99)),
        "call_ms_max": float(a.max()),
        "model_calls": float(len(a)),
    }
