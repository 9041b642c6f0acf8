"""Running a ``Simulator`` on the compiled core: which runs it supports, and the glue.

The dispatch rule (``unsupported``) is deliberately narrow: the compiled core runs a simulation
only where it is known to give the Python simulator's schedule decision for decision; anything
else (fractional GPUs, CP-SAT, a policy with no compiled form, a shortcut switched off for a
test, recorded reservations, a policy that already ran) goes to the Python loop, and
``Simulator.last_core`` says which one ran and ``Simulator.core_reason`` why not the compiled one.

Which policies it runs is the policies' say, not a list of classes here
(``shared.policies.capabilities``): a policy with static keys and order classes runs as
``P_STATIC`` (its keys taken up front, as the Python loop takes them); a ``CompiledForm`` policy
gives its kind and columns (WFP3, UNICEP, multifactor); an ``ExternalCompiled`` one is asked at
every cycle that orders the queue (the learned policy); any other policy runs on the Python loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.capabilities import (
    CompiledForm,
    CompiledPolicy,
    ExternalCompiled,
    OrderClasses,
    TracksJobs,
    capable,
    hooks,
)
from shared.scheduling.binding import nodes_needed
from shared.scheduling.partition import row_classes
from shared.scheduling.placement import BestFit, FirstFit
from shared.scheduling.result import SimResult
from shared.scheduling.workload_memo import per_workload
from shared.sim.compiled.records import (
    ASK,
    FAIRSHARE,
    JOB,
    LOOP,
    P_EXTERNAL,
    P_MULTIFACTOR,
    P_STATIC,
    P_UNICEP,
    P_WFP3,
    Allocs,
    Cluster,
    Config,
    External,
    Fairshare,
    Free,
    Orders,
    Schedule,
    Shapes,
)

if TYPE_CHECKING:
    from shared.scheduling.binding import BoundWorkload
    from shared.sim.simulator import Simulator

#: the Simulator attributes that switch shortcuts, at the values the compiled core mirrors
_SHORTCUTS = (
    "precheck_queue",
    "visit_chunk",
    "skip_idle_cycles",
    "retire_dominated",
    "overlay_reservations",
    "node_release_profiles",
    "class_heads_queue",
    "head_chunk",
    "lone_arrivals",
    "lazy_reservations",
    "light_replay",
    "direct_gang_plans",
)
_DEFAULTS = {
    "precheck_queue": 32,
    "class_heads_queue": 8,
    "skip_idle_cycles": True,
    "retire_dominated": True,
    "lone_arrivals": True,
}
#: the JOB fields a compiled form may fill (the rest are the run's and the loop's own)
_POLICY_COLUMNS = frozenset({"key", "wfp3_est", "wfp3_width", "unicep_denom", "mf_static", "mf_demand"})
#: the FAIRSHARE fields a compiled form may set (the two versions are the loop's)
_FAIRSHARE_PARAMS = frozenset(FAIRSHARE.names or ()) - {"version", "weight_version"}
#: the kernels' policy kind of each ``CompiledPolicy.kind``
_KINDS = {"static": P_STATIC, "wfp3": P_WFP3, "unicep": P_UNICEP, "multifactor": P_MULTIFACTOR}
_MODES = {"easy": 0, "greedy": 1, "none": 2}
#: with clock-dependent keys and more than twice this many class heads, a cycle puts the heads
#: on its visit heap this many at a time (then twice as many), smallest (key, job) first
HEAD_CHUNK = 64


def available() -> bool:
    """Whether numba imports (the compiled core is optional at run time)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def unsupported(sim: Simulator, record_reservations: bool) -> str | None:
    """Why ``sim`` must run on the Python loop, or None when the compiled core gives the same
    schedule."""
    from shared.sim.simulator import Simulator

    if sim.core == "python":
        return "Simulator.core is 'python'"
    if not available():
        return "numba is not installed"
    if record_reservations:
        return "record_reservations (the Python loop records them)"
    if sim.cfg.reservation != "nodes" and sim.cfg.backfill == "easy":
        return f"reservation={sim.cfg.reservation!r} (compiled: node-pinned reservations)"
    if sim.batch_placer is not None or type(sim.placer) not in (FirstFit, BestFit):
        return f"placement {sim.placer.name!r} (compiled: first-fit, best-fit)"
    for name in _SHORTCUTS:
        if getattr(sim, name) != getattr(Simulator, name):
            return f"shortcut {name} changed from its default"
    for name, value in _DEFAULTS.items():
        if getattr(Simulator, name) != value:
            return f"Simulator.{name} is not {value!r}"
    if not capable(sim.policy, ExternalCompiled):
        reason = _policy_unsupported(sim)
        if reason is not None:
            return reason
    if len(sim.w.spec.node_groups) == 0:
        return "no node groups"
    return _layout(sim.w, sim.cfg.node_slack).unsupported


def _policy_unsupported(sim: Simulator) -> str | None:
    """Why the core cannot run ``sim``'s policy (not an ``ExternalCompiled`` one), or None."""
    policy = sim.policy
    name = type(policy).__name__
    own = capable(policy, CompiledForm)
    if not own and (policy.dynamic or capable(policy, TracksJobs)):
        return (
            f"policy {name} has no compiled form (compiled: static keys, CompiledForm and "
            "ExternalCompiled policies)"
        )
    if not capable(policy, OrderClasses) or cast(OrderClasses, policy).order_classes() is None:
        return "the policy declares no order classes"
    if own:
        # whether it has one now: the form of no jobs (its reason does not depend on the range,
        # and a window of a large workload then pays for the window's jobs only)
        form = compiled_form(sim, 0, 0)
        return f"policy {name}: {form}" if isinstance(form, str) else None
    if np.isnan(policy.keys(np.arange(len(sim.w.jobs)), 0.0)).any():
        return "static keys with NaN (the Python loop does not keep such heads sorted)"
    return None


def compiled_form(sim: Simulator, lo: int, hi: int) -> CompiledPolicy | str:
    """``sim``'s policy as the core runs jobs ``lo .. hi - 1`` (not an ``ExternalCompiled`` one):
    its own ``CompiledForm``, else its static keys (``P_STATIC``), taken at time 0 as the Python
    loop takes a static policy's keys (``RunState.static_keys``): with no clock and no hook
    between, any static policy gets the same keys in both loops, so a new one needs no form."""
    policy = sim.policy
    if capable(policy, CompiledForm):
        return cast(CompiledForm, policy).compiled_form(lo, hi)  # ``capable``: per class
    return CompiledPolicy("static", {"key": policy.keys(np.arange(lo, hi), 0.0)})


def run_compiled(
    sim: Simulator, job_range: tuple[int, int] | None, metric_range: tuple[int, int] | None
) -> SimResult:
    """``Simulator.run`` on the compiled core (the caller checked ``unsupported``)."""
    if capable(sim.policy, ExternalCompiled):
        return run_external(sim, job_range, metric_range)
    wall0 = time.perf_counter()
    run = _Prepared(sim, job_range, external=False)
    run.simulate(0)
    return run.result(metric_range, wall0)


def run_external(
    sim: Simulator, job_range: tuple[int, int] | None, metric_range: tuple[int, int] | None
) -> SimResult:
    """``Simulator.run`` of a policy that orders the queue in Python (``ExternalCompiled``) on the
    compiled core: at each cycle that orders the queue the loop stops and the policy gives
    the keys of the whole queue, as in the Python loop (starts and ends since the last stop are
    passed to ``on_start``/``on_end`` first, at their own times)."""
    from shared.sim.compiled import kernels

    wall0 = time.perf_counter()
    policy = sim.policy
    assert isinstance(policy, ExternalCompiled)
    lo, hi = job_range or (0, len(sim.w.jobs))
    run = _Prepared(sim, job_range, external=True, hints=policy.external_hints(np.arange(lo, hi)))
    state = CompiledState(run)
    h = hooks(policy)
    if h.attach is not None:
        h.attach(state, state.allocs)  # type: ignore[arg-type]
    on_start, on_end = h.on_start, h.on_end
    ext, lo = run.ext, run.lo
    ev_j, ev_t = ext.event_job, ext.event_time
    # views of the fields the loop writes (a structured field read costs more than an index)
    n_events, queue_len, clock = ext.ask["n_events"], ext.ask["queue_len"], ext.ask["now"]
    ext_key = run.jobs["ext_key"]

    def ask() -> None:
        n_ev = int(n_events[0])
        if n_ev and policy.external_changed(n_ev) and on_start is not None and on_end is not None:
            for e in range(n_ev):
                j, t = int(ev_j[e]), float(ev_t[e])
                if j >= 0:
                    on_start(j + lo, t)
                else:
                    on_end(-j - 1 + lo, t)
        queue = ext.queue[: int(queue_len[0])]
        ext_key[queue] = policy.keys(queue + lo, float(clock[0]))

    handle = kernels.asking(ask)
    try:
        run.simulate(handle)
    finally:
        kernels.done(handle)
    return run.result(metric_range, wall0)


@dataclass(frozen=True)
class _Layout:
    """What the compiled core needs of a bound workload that no run changes: the node groups as
    arrays, per shape (GPU request and eligible groups) its GPUs, share, class of eligible groups
    and the least CPUs and memory any of its jobs asks (over the whole workload, as the Python
    loop's retirement rule reads them), and per job the most nodes its allocation may span."""

    gn: np.ndarray
    gG: np.ndarray
    gbase: np.ndarray
    gcpu: np.ndarray
    gmem: np.ndarray
    cg_ptr: np.ndarray
    cg_idx: np.ndarray
    n_shapes: int
    shape_gpus: np.ndarray
    shape_milli: np.ndarray
    shape_gclass: np.ndarray
    shape_min_cpu: np.ndarray
    shape_min_mem: np.ndarray
    span: np.ndarray
    #: why the core cannot run this workload, or None
    unsupported: str | None

    @classmethod
    def of(cls, w: BoundWorkload, slack: int) -> _Layout:
        jobs = w.jobs
        n = len(jobs)
        groups = w.spec.node_groups
        gn = np.array([g.count for g in groups], dtype=np.int64)
        gG = np.array([g.gpus for g in groups], dtype=np.int64)
        cg_len = [len(c) for c in w.class_groups]
        n_shapes = int(w.shape.max()) + 1 if n else 0
        shape_gpus = np.zeros(n_shapes, dtype=np.int64)
        shape_gpus[w.shape] = jobs.gpus
        shape_milli = np.zeros(n_shapes, dtype=np.int64)
        shape_milli[w.shape] = jobs.gpu_milli
        shape_gclass = np.zeros(n_shapes, dtype=np.int64)
        shape_gclass[w.shape] = w.job_class
        big = np.iinfo(np.int64).max
        shape_min_cpu = np.full(n_shapes, big, dtype=np.int64)
        np.minimum.at(shape_min_cpu, w.shape, jobs.cpus_milli)
        shape_min_mem = np.full(n_shapes, big, dtype=np.int64)
        np.minimum.at(shape_min_mem, w.shape, jobs.mem_mib)
        span = np.ones(n, dtype=np.int64)
        for c, gset in enumerate(w.class_groups):
            sel = np.flatnonzero(w.job_class == c)
            if not len(sel):
                continue
            for g in gset:
                G, cnt = int(gG[g]), int(gn[g])
                need = np.array([nodes_needed(int(x), G) for x in jobs.gpus[sel]], dtype=np.int64)
                span[sel] = np.maximum(span[sel], np.minimum(np.minimum(need, 10**9) + slack, cnt))
        with_gpus = jobs.gpus > 0
        shares = (jobs.gpu_milli <= 0) | ((jobs.gpu_milli < WHOLE_GPU_MILLI) & (jobs.gpus > 1))
        unsupported = None
        if (with_gpus & shares).any():
            unsupported = "a GPU share of 0 milli-GPUs, or a share asked for several GPUs"
        elif max((g.gpus for g in groups), default=0) > 62:
            unsupported = "more than 62 GPUs per node (the core keeps a node's GPUs in a 64-bit mask)"
        return cls(
            unsupported=unsupported,
            gn=gn,
            gG=gG,
            gbase=np.concatenate(([0], np.cumsum(gn)[:-1])).astype(np.int64),
            gcpu=np.array([g.cpus_milli for g in groups], dtype=np.int64),
            gmem=np.array([g.mem_mib for g in groups], dtype=np.int64),
            cg_ptr=np.concatenate(([0], np.cumsum(cg_len))).astype(np.int64),
            cg_idx=np.array([g for c in w.class_groups for g in c], dtype=np.int64),
            n_shapes=n_shapes,
            shape_gpus=shape_gpus,
            shape_milli=shape_milli,
            shape_gclass=shape_gclass,
            shape_min_cpu=shape_min_cpu,
            shape_min_mem=shape_min_mem,
            span=span,
        )


def _layout(w: BoundWorkload, slack: int) -> _Layout:
    """The ``_Layout`` of ``w`` for this node slack, kept per workload (``per_workload``): a
    training run simulates windows of one workload thousands of times."""
    return per_workload(w, f"compiled-layout/{slack}", lambda: _Layout.of(w, slack))


class _Prepared:
    """The compiled core's inputs for one ``Simulator.run`` (the named records of ``records``:
    the jobs, cluster, shapes, order classes, settings, multifactor state), its outputs (the
    schedule, allocations, free state, the exchange with an external policy), and the conversion
    of those into a ``SimResult``.

    The core sees only the jobs of the run's range, numbered from 0 (``lo`` is added back in
    the results and to the jobs an external policy is asked about): a window of a large trace
    costs what its jobs cost."""

    def __init__(
        self,
        sim: Simulator,
        job_range: tuple[int, int] | None,
        external: bool,
        hints: tuple[float, FloatArray | None] = (-math.inf, None),
    ) -> None:
        self.sim = sim
        w, cfg = sim.w, sim.cfg
        n = len(w.jobs)
        lo, hi = job_range or (0, n)
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"job_range {job_range} outside 0..{n}")
        m = hi - lo
        groups = w.spec.node_groups
        lay = _layout(w, cfg.node_slack)
        track = np.array([k in sim.frac_groups and g.gpus > 0 for k, g in enumerate(groups)], dtype=np.bool_)
        self.lo, self.hi, self.track = lo, hi, track
        self.cluster = Cluster(
            base=lay.gbase,
            nodes=lay.gn,
            gpus=lay.gG,
            cpus=lay.gcpu,
            mem=lay.gmem,
            track=track,
            class_ptr=lay.cg_ptr,
            class_groups=lay.cg_idx,
        )
        shapes = Shapes(
            gpus=lay.shape_gpus,
            milli=lay.shape_milli,
            gclass=lay.shape_gclass,
            min_cpus=lay.shape_min_cpu,
            min_mem=lay.shape_min_mem,
        )
        self.jobs = self._job_records(external)
        orders = self._orders(external)
        kind, fair = self._policy_columns(external)
        config = Config(
            kind=kind,
            mode=_MODES[cfg.backfill],
            best_fit=type(sim.placer) is BestFit,
            slack=int(cfg.node_slack),
            max_res=int(cfg.max_reservations or 1 << 30),
            head_chunk=HEAD_CHUNK,
        )
        # room for each job's allocation: the most nodes it may span in any of its groups
        pool_ptr = np.concatenate(([0], np.cumsum(lay.span[lo:hi]))).astype(np.int64)
        pool = int(pool_ptr[m])
        self.allocs = Allocs(
            ptr=pool_ptr,
            node=np.empty(pool, np.int64),
            whole=np.empty(pool, np.int64),
            cpus=np.empty(pool, np.int64),
            mem=np.empty(pool, np.int64),
            mask=np.empty(pool, np.int64),
        )
        tl = 2 * m + 2
        self.out = Schedule(
            start=np.full(m, np.nan),
            end=np.full(m, np.nan),
            nodes_used=np.zeros(m, np.int64),
            group=np.full(m, -1, np.int64),
            shared_gpu=np.full(m, -1, np.int64),
            timeline_t=np.empty(tl),
            timeline_busy=np.empty(tl),
            timeline_queued=np.empty(tl, np.int64),
            counts=np.zeros(1, dtype=LOOP),
        )
        # the free state (the loop fills in the idle cluster): per node, per group, per GPU
        n_nodes = int(lay.gn.sum())
        g_max = int(lay.gG.max())
        self.free = Free(
            whole=np.empty(n_nodes, np.int64),
            cpus=np.empty(n_nodes, np.int64),
            mem=np.empty(n_nodes, np.int64),
            hist=np.zeros((len(groups), g_max + 1), np.int64),
            group_whole=np.zeros(len(groups), np.int64),
            gpu_milli=np.full((n_nodes, max(g_max, 1)), 1000, np.int64),
            top_share=np.empty(n_nodes, np.int64),
        )
        self.ext = self._external(external, hints)
        self._args = (
            self.jobs,
            self.cluster,
            shapes,
            orders,
            config,
            fair,
            self.free,
            self.allocs,
            self.out,
            self.ext,
        )

    def _job_records(self, external: bool) -> np.ndarray:
        """The run's jobs as JOB records (the policy columns follow in ``_policy_columns``)."""
        sim, lo, hi = self.sim, self.lo, self.hi
        w, jobs = sim.w, sim.w.jobs
        rec = np.zeros(hi - lo, dtype=JOB)
        rec["submit"] = jobs.submit[lo:hi]
        rec["runtime"] = jobs.runtime[lo:hi]
        rec["est"] = sim.est[lo:hi]
        rec["gpus"] = jobs.gpus[lo:hi]
        rec["milli"] = jobs.gpu_milli[lo:hi]
        rec["cpus"] = jobs.cpus_milli[lo:hi]
        rec["mem"] = jobs.mem_mib[lo:hi]
        rec["shape"] = w.shape[lo:hi]
        rec["gclass"] = w.job_class[lo:hi]
        rec["user"] = jobs.user[lo:hi]
        if external:
            # an external policy may order the queue any way at every cycle: each job is a class
            rec["order"] = np.arange(hi - lo, dtype=np.int64)
        elif hi > lo:
            order_cls = cast(OrderClasses, sim.policy).order_classes()  # ``unsupported`` checked
            assert order_cls is not None
            cols = (jobs.cpus_milli[lo:hi], jobs.mem_mib[lo:hi], sim.est[lo:hi], order_cls[lo:hi])
            rec["order"] = row_classes(w.shape[lo:hi], *cols)
        return rec

    def _orders(self, external: bool) -> Orders:
        """The order classes' jobs in arrival order (CSR) and each job's place there."""
        bucket = self.jobs["order"]
        m = len(bucket)
        n_buckets = int(bucket.max()) + 1 if m else 0
        b_jobs = np.argsort(bucket, kind="stable").astype(np.int64)
        b_ptr = np.concatenate(([0], np.cumsum(np.bincount(bucket, minlength=n_buckets)))).astype(np.int64)
        b_of_pos = np.zeros(m, dtype=np.int64)
        b_of_pos[b_jobs] = np.arange(m)
        return Orders(ptr=b_ptr, jobs=b_jobs, pos=b_of_pos)

    def _policy_columns(self, external: bool) -> tuple[int, Fairshare]:
        """The policy kind, its per-job columns of the JOB records, and the multifactor state
        (the policy's ``compiled_form``: the kind's columns and fair-share parameters by name)."""
        params = np.zeros(1, dtype=FAIRSHARE)
        params["weight_version"] = -1.0
        n_users = 1
        if external:
            kind = P_EXTERNAL
        else:
            form = compiled_form(self.sim, self.lo, self.hi)
            assert not isinstance(form, str), form  # ``unsupported`` said it has one
            kind = _KINDS[form.kind]
            if form.kind == "static" and np.isnan(form.columns["key"]).any():
                raise ValueError("static keys with NaN (the Python loop does not keep such heads sorted)")
            for field, column in form.columns.items():
                if field not in _POLICY_COLUMNS:
                    raise ValueError(f"compiled form {form.kind!r}: {field!r} is not a policy column of JOB")
                self.jobs[field] = column
            for field, value in form.fairshare.items():
                if field not in _FAIRSHARE_PARAMS:
                    raise ValueError(f"compiled form {form.kind!r}: {field!r} is not a FAIRSHARE field")
                params[field] = value
            n_users = form.n_users
        zeros = np.zeros(n_users)
        return kind, Fairshare(params=params, usage=zeros, running=zeros.copy(), weight=zeros.copy())

    def _external(self, external: bool, hints: tuple[float, FloatArray | None]) -> External:
        """The exchange with an external policy (``hints``, its ``external_hints``: the hint
        keys go into the JOB records); empty arrays for a base policy."""
        lo, hi = self.lo, self.hi
        x = hi - lo if external else 0
        ask_from, static_keys = hints
        if static_keys is not None:
            self.jobs["key"] = static_keys
        ask = np.zeros(1, dtype=ASK)
        ask["lo"] = lo
        ask["static_keys"] = static_keys is not None
        ask["ask_from"] = ask_from
        return External(
            queue=np.empty(x, np.int64),
            event_job=np.empty(2 * x, np.int64),
            event_time=np.empty(2 * x),
            run_job=np.empty(x, np.int64),
            run_group=np.empty(x, np.int64),
            run_end=np.empty(x),
            ask=ask,
        )

    def simulate(self, handle: int) -> None:
        """The compiled loop (``kernels.simulate``) over these records; ``handle``: the callback
        that gives an external policy's keys (``kernels.asking``), 0 for a base policy."""
        from shared.sim.compiled import kernels

        kernels.simulate(*self._args, handle)

    def result(self, metric_range: tuple[int, int] | None, wall0: float) -> SimResult:
        """The finished run as the Python loop's ``SimResult`` (and the simulator's records)."""
        from shared.sim.simulator import SimulationError

        sim = self.sim
        w, cfg, policy = sim.w, sim.cfg, sim.policy
        jobs = w.jobs
        n = len(jobs)
        lo, hi = self.lo, self.hi
        start, end = np.full(n, np.nan), np.full(n, np.nan)
        nodes_used, job_group = np.zeros(n, np.int64), np.full(n, -1, np.int64)
        out = self.out
        for full, part in zip((start, end, nodes_used, job_group), out[:4], strict=True):
            full[lo:hi] = part
        tl_t, tl_busy, tl_q = out.timeline_t, out.timeline_busy, out.timeline_queued
        counts = out.counts[0]
        cycles, error, n_tl = int(counts["cycles"]), int(counts["error"]), int(counts["n_timeline"])
        if error:
            raise SimulationError(
                f"{error} job(s) can never start on an idle cluster (binding should have excluded them)"
            )
        sim.first_reservation = None
        sim.job_group = job_group
        if sim.record_allocations:
            sim.allocations = self._allocations()
        mask = np.zeros(n, dtype=bool)
        a_, b_ = metric_range or (self.lo, self.hi)
        mask[a_:b_] = True
        return SimResult(
            jobs=jobs,
            start=start,
            end=end,
            capacity_gpus=w.spec.total_gpus,
            timeline_t=tl_t[:n_tl].copy(),
            timeline_busy=tl_busy[:n_tl].copy(),
            timeline_queued=tl_q[:n_tl].copy(),
            metric_mask=mask,
            nodes_used=nodes_used,
            policy=policy.describe(),
            placement=sim.placer.name,
            backfill=cfg.backfill,
            wall_seconds=time.perf_counter() - wall0,
            cycles=cycles,
            placer_stats={},
        )

    def _allocations(
        self,
    ) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...] | None, int]]:
        """``Simulator.allocations`` of the finished run (node ids within their group)."""
        jobs = self.sim.w.jobs
        nodes_used, job_group, job_frac = self.out.nodes_used, self.out.group, self.out.shared_gpu
        a = self.allocs
        allocs: dict[
            int, tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...] | None, int]
        ] = {}
        for j in np.flatnonzero(job_group >= 0).tolist():
            p0, k = int(a.ptr[j]), int(nodes_used[j])
            jg = j + self.lo
            g = int(job_group[j])
            base = int(self.cluster.base[g])
            ids = None
            if self.track[g] and jobs.gpus[jg] > 0 and jobs.gpu_milli[jg] == WHOLE_GPU_MILLI:
                ids = tuple(
                    tuple(b for b in range(int(self.cluster.gpus[g])) if (mask >> b) & 1)
                    for mask in a.mask[p0 : p0 + k].tolist()
                )
            allocs[jg] = (
                g,
                tuple((a.node[p0 : p0 + k] - base).tolist()),
                tuple(a.whole[p0 : p0 + k].tolist()),
                ids,
                int(job_frac[j]),
            )
        return allocs


class _GroupFree:
    """One node group's free resources as ``GroupState`` names them, viewing the compiled
    core's per-node arrays (they change in place as the loop runs)."""

    def __init__(self, run: _Prepared, g: int) -> None:
        free = run.free
        a = int(run.cluster.base[g])
        self.n = int(run.sim.w.spec.node_groups[g].count)
        self.whole = free.whole[a : a + self.n]
        self.cpu = free.cpus[a : a + self.n]
        self.mem = free.mem[a : a + self.n]
        self.maxfrac = free.top_share[a : a + self.n] if run.track[g] else None


class _GroupOf(Mapping[int, "_GroupOf.Alloc"]):
    """The running jobs' allocations as a policy reads them in ``on_start``: their group."""

    class Alloc:
        __slots__ = ("group",)

        def __init__(self, group: int) -> None:
            self.group = group

    def __init__(self, job_group: np.ndarray, lo: int) -> None:
        self._group = job_group  # of jobs lo, lo + 1, ...
        self._lo = lo

    def __getitem__(self, j: int) -> _GroupOf.Alloc:
        k = j - self._lo
        if not 0 <= k < len(self._group) or self._group[k] < 0:
            raise KeyError(j)
        return _GroupOf.Alloc(int(self._group[k]))

    def __iter__(self) -> Iterator[int]:
        return iter((np.flatnonzero(self._group >= 0) + self._lo).tolist())

    def __len__(self) -> int:
        return int((self._group >= 0).sum())


class _Running:
    """The running jobs as ``shared.features.sim_views.RunningJobs`` gives them (job, group,
    estimated end, sorted by estimated end, ties by start), kept by the compiled core."""

    def __init__(self, ext: External) -> None:
        self._count = ext.ask["n_running"]  # a view: the loop keeps it
        self._job, self._group, self._end = ext.run_job, ext.run_group, ext.run_end

    def __len__(self) -> int:
        return int(self._count[0])

    def buffers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The arrays behind ``jobs``, ``group`` and ``est_end`` and the count in use."""
        return self._job, self._group, self._end, int(self._count[0])

    @property
    def jobs(self) -> np.ndarray:
        return self._job[: self._count[0]]

    @property
    def group(self) -> np.ndarray:
        return self._group[: self._count[0]]

    @property
    def est_end(self) -> np.ndarray:
        return self._end[: self._count[0]]


class CompiledState:
    """What an external policy sees of the compiled core's cluster: ``groups`` (free whole GPUs,
    milli-CPUs, MiB and largest free GPU share per node), ``running`` (the running jobs, see
    ``_Running``), both live, and ``allocs`` (each started job's group). The policies that
    are ``ExternalCompiled`` read nothing else."""

    def __init__(self, run: _Prepared) -> None:
        self.running = _Running(run.ext)
        self.groups = [_GroupFree(run, g) for g in range(len(run.cluster.base))]
        self.allocs = _GroupOf(run.out.group, run.lo)
