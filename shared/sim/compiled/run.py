"""Running a ``Simulator`` on the compiled core: which runs it supports, and the glue.

The dispatch rule (``unsupported``) is deliberately narrow: the compiled core runs a simulation
only where it is known to give the Python simulator's schedule decision for decision; anything
else (fractional GPUs, CP-SAT, a learned or subclassed policy, a shortcut switched off for a
test, recorded reservations, a policy that already ran) goes to the Python loop, and
``Simulator.last_core`` says which one ran and ``Simulator.core_reason`` why not the compiled one.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.policies.classic import F1, FCFS, SJF, UNICEP, WFP3
from shared.policies.multifactor import SlurmMultifactor
from shared.sim.binding import nodes_needed
from shared.sim.partition import row_classes
from shared.sim.placement import BestFit, FirstFit
from shared.sim.result import SimResult

if TYPE_CHECKING:
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
_POLICIES = (FCFS, SJF, WFP3, UNICEP, F1, SlurmMultifactor)
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
    if sim.batch_placer is not None or type(sim.placer) not in (FirstFit, BestFit):
        return f"placement {sim.placer.name!r} (compiled: first-fit, best-fit)"
    for name in _SHORTCUTS:
        if getattr(sim, name) != getattr(Simulator, name):
            return f"shortcut {name} changed from its default"
    for name, value in _DEFAULTS.items():
        if getattr(Simulator, name) != value:
            return f"Simulator.{name} is not {value!r}"
    policy = sim.policy
    if type(policy) not in _POLICIES:
        return f"policy {type(policy).__name__} (compiled: the six base policies)"
    if policy.order_classes() is None:
        return "the policy declares no order classes"
    if isinstance(policy, SlurmMultifactor) and (
        policy.last != 0.0 or policy.usage.any() or policy.running.any()
    ):
        return "the multifactor policy has usage from an earlier run"
    jobs = sim.w.jobs
    if not policy.dynamic and np.isnan(policy.keys(np.arange(len(jobs)), 0.0)).any():
        return "static keys with NaN (the Python loop does not keep such heads sorted)"
    with_gpus = jobs.gpus > 0
    if (with_gpus & ((jobs.gpu_milli <= 0) | ((jobs.gpu_milli < WHOLE_GPU_MILLI) & (jobs.gpus > 1)))).any():
        return "a GPU share of 0 milli-GPUs, or a share asked for several GPUs"
    if max((g.gpus for g in sim.w.spec.node_groups), default=0) > 62:
        return "more than 62 GPUs per node (the core keeps a node's GPUs in a 64-bit mask)"
    if len(sim.w.spec.node_groups) == 0:
        return "no node groups"
    return None


def run_compiled(
    sim: Simulator, job_range: tuple[int, int] | None, metric_range: tuple[int, int] | None
) -> SimResult:
    """``Simulator.run`` on the compiled core (the caller checked ``unsupported``)."""
    from shared.sim.compiled import kernels
    from shared.sim.simulator import SimulationError

    wall0 = time.perf_counter()
    w, cfg, policy = sim.w, sim.cfg, sim.policy
    jobs = w.jobs
    n = len(jobs)
    lo, hi = job_range or (0, n)
    if not 0 <= lo <= hi <= n:
        raise ValueError(f"job_range {job_range} outside 0..{n}")
    groups = w.spec.node_groups
    gn = np.array([g.count for g in groups], dtype=np.int64)
    gG = np.array([g.gpus for g in groups], dtype=np.int64)
    gbase = np.concatenate(([0], np.cumsum(gn)[:-1])).astype(np.int64)
    gcpu = np.array([g.cpus_milli for g in groups], dtype=np.int64)
    gmem = np.array([g.mem_mib for g in groups], dtype=np.int64)
    track = np.array([k in sim.frac_groups and g.gpus > 0 for k, g in enumerate(groups)], dtype=np.bool_)
    cg_len = [len(c) for c in w.class_groups]
    cg_ptr = np.concatenate(([0], np.cumsum(cg_len))).astype(np.int64)
    cg_idx = np.array([g for c in w.class_groups for g in c], dtype=np.int64)

    est = sim.est
    jf = np.zeros((n, 9), dtype=np.float64)
    jf[:, kernels.F_SUBMIT] = jobs.submit
    jf[:, kernels.F_RUNTIME] = jobs.runtime
    jf[:, kernels.F_EST] = est
    ji = np.zeros((n, 8), dtype=np.int64)
    ji[:, kernels.I_GPUS] = jobs.gpus
    ji[:, kernels.I_MILLI] = jobs.gpu_milli
    ji[:, kernels.I_CPU] = jobs.cpus_milli
    ji[:, kernels.I_MEM] = jobs.mem_mib
    ji[:, kernels.I_SHAPE] = w.shape
    ji[:, kernels.I_GCLASS] = w.job_class
    ji[:, kernels.I_USER] = jobs.user
    order_cls = policy.order_classes()
    assert order_cls is not None
    bucket = (
        row_classes(w.shape, jobs.cpus_milli, jobs.mem_mib, est, order_cls) if n else np.zeros(0, np.int64)
    )
    ji[:, kernels.I_BUCKET] = bucket
    n_buckets = int(bucket.max()) + 1 if n else 0
    sub = bucket[lo:hi]
    b_jobs = (np.argsort(sub, kind="stable") + lo).astype(np.int64)
    b_ptr = np.concatenate(([0], np.cumsum(np.bincount(sub, minlength=n_buckets)))).astype(np.int64)
    b_of_pos = np.zeros(n, dtype=np.int64)
    b_of_pos[b_jobs] = np.arange(len(b_jobs))

    mf = np.zeros(8, dtype=np.float64)
    n_users = 1
    if isinstance(policy, SlurmMultifactor):
        kind = kernels.P_MULTIFACTOR
        wt = policy.w
        jf[:, kernels.F_MFSTATIC] = (
            wt.job_size * policy.size_factor + wt.partition * policy.part_factor + wt.qos * policy.qos_factor
        )
        jf[:, kernels.F_DEMAND] = policy.demand
        n_users = len(policy.usage)
        mf[:] = [
            policy.last,
            policy._lambda,
            0.0,
            policy.share,
            float(wt.fairshare),
            wt.age / wt.max_age_s,
            wt.max_age_s,
            2.0,
        ]
    elif isinstance(policy, WFP3):
        kind = kernels.P_WFP3
        jf[:, kernels.F_EST1] = np.maximum(est, 1.0)
        jf[:, kernels.F_WIDTH] = np.maximum(jobs.gpus, 1)
    elif isinstance(policy, UNICEP):
        kind = kernels.P_UNICEP
        # the same numpy expressions as ``UNICEP.keys`` (elementwise: the same values)
        width = np.log2(np.maximum(jobs.gpus, 1) + 1.0)
        jf[:, kernels.F_DENOM] = width * np.maximum(est, 1.0)
    else:
        kind = kernels.P_STATIC
        jf[:, kernels.F_KEY] = policy.keys(np.arange(n), 0.0)

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

    # room for each job's allocation: the most nodes it may span in any of its groups
    slack = cfg.node_slack
    span = np.ones(n, dtype=np.int64)
    for c, gset in enumerate(w.class_groups):
        sel = np.flatnonzero(w.job_class == c)
        if not len(sel):
            continue
        for g in gset:
            G, cnt = int(gG[g]), int(gn[g])
            need = np.array([nodes_needed(int(x), G) for x in jobs.gpus[sel]], dtype=np.int64)
            span[sel] = np.maximum(span[sel], np.minimum(np.minimum(need, 10**9) + slack, cnt))
    pool_ptr = np.concatenate(([0], np.cumsum(span))).astype(np.int64)

    out = kernels.simulate(
        jf, ji, lo, hi, cg_ptr, cg_idx, gbase, gn, gG, gcpu, gmem, track, b_ptr, b_jobs, b_of_pos,
        shape_gpus, shape_milli, shape_gclass, shape_min_cpu, shape_min_mem, n_shapes,
        kind, _MODES[cfg.backfill], type(sim.placer) is BestFit, slack,
        cfg.max_reservations or 1 << 30, mf, n_users, pool_ptr, HEAD_CHUNK,
    )  # fmt: skip
    start, end, nodes_used, job_group, job_frac, p_node, p_w, p_mask, tl_t, tl_busy, tl_q, stats = out
    cycles, error = int(stats[0]), int(stats[1])
    if error:
        raise SimulationError(
            f"{error} job(s) can never start on an idle cluster (binding should have excluded them)"
        )
    sim.first_reservation = None
    sim.job_group = job_group
    if sim.record_allocations:
        allocs: dict[
            int, tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...] | None, int]
        ] = {}
        for j in np.flatnonzero(job_group >= 0).tolist():
            p0, k = int(pool_ptr[j]), int(nodes_used[j])
            g = int(job_group[j])
            base = int(gbase[g])
            ids = None
            if track[g] and jobs.gpus[j] > 0 and jobs.gpu_milli[j] == WHOLE_GPU_MILLI:
                ids = tuple(
                    tuple(b for b in range(int(gG[g])) if (mask >> b) & 1)
                    for mask in p_mask[p0 : p0 + k].tolist()
                )
            allocs[j] = (
                g,
                tuple((p_node[p0 : p0 + k] - base).tolist()),
                tuple(p_w[p0 : p0 + k].tolist()),
                ids,
                int(job_frac[j]),
            )
        sim.allocations = allocs
    mask = np.zeros(n, dtype=bool)
    a_, b_ = metric_range or (lo, hi)
    mask[a_:b_] = True
    return SimResult(
        jobs=jobs,
        start=start,
        end=end,
        capacity_gpus=w.spec.total_gpus,
        timeline_t=tl_t,
        timeline_busy=tl_busy,
        timeline_queued=tl_q,
        metric_mask=mask,
        nodes_used=nodes_used,
        policy=policy.describe(),
        placement=sim.placer.name,
        backfill=cfg.backfill,
        wall_seconds=time.perf_counter() - wall0,
        cycles=cycles,
        placer_stats={},
    )
