"""Compiled (numba) kernels of the featurizer's per-decision path: one call instead of ~70 numpy calls.

Why: at the 5-50 queued jobs of a training decision the features' arithmetic is a few hundred
floating-point operations; what cost ~100 us a decision was the fixed overhead of ~70 small numpy
calls (``WorkloadFeaturizer.observe``). ``observe_kernel`` computes, in one pass over the queue,
every column that needs no transcendental function and no BLAS product, the cluster-level values,
and the two signals of the sampling rule.

Bit for bit the same numbers as the numpy expressions (``shared.features.fast``), because:

- every per-job value is a short chain of IEEE-754 operations (``+ - * /``, ``min``, ``max``,
  comparisons) on the same inputs in the same order, each correctly rounded in both;
- ``log1p`` is never computed here: numpy's (SVML on AVX-512 machines) and libm's may differ in the
  last bit. ``num_ways`` reads ``log1p`` of its integer count from a table numpy computed; the wait
  is returned divided by the time unit, for the caller to take numpy's ``log1p``;
- the sums whose order matters (``queue_demand``, ``mean_urgency``) repeat numpy's pairwise
  summation (``pairwise_sum``); the released GPUs are integer-valued sums (exact in any order), and
  the caller uses the kernel's only when every job's GPU demand is an integer (``released_exact``);
- ``demand_supply`` (two BLAS matrix-vector products) and ``user_share`` stay numpy's.

``tests/features/test_features_kernels.py`` compares the kernel with the numpy path on random and
simulated decisions, and ``pairwise_sum`` with ``np.add.reduce``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from shared.pairwise_sum import pairwise_sum

__all__ = ["N_EXTRA", "observe_kernel", "pairwise_sum", "released_kernel"]

#: per-job columns the kernel writes after the ``JOB_FEATURES`` ones: raw ways, free GPUs of the pool
N_EXTRA = 2

# JOB_FEATURES positions (shared.features.catalog; checked by the featurizer at import)
_SUBMIT_TIME, _WAIT, _FREE_NODES, _CAN_NOW, _NUM_WAYS = 4, 5, 8, 9, 10
_DEMAND_SUPPLY, _URGENCY, _FUTURE, _FRAGMENTATION = 11, 13, 14, 15
# CLUSTER_FEATURES positions
_C_FREE, _C_FRAG, _C_DEMAND, _C_URGENCY, _C_RUNNABLE, _C_FUTURE = 0, 1, 2, 4, 5, 6


@njit(cache=True)
def observe_kernel(
    idx: np.ndarray,
    now: float,
    table: np.ndarray,
    rowmap: np.ndarray,
    direct: bool,
    skip_blocked: bool,
    static_t: np.ndarray,
    static_cols: np.ndarray,
    submit: np.ndarray,
    est: np.ndarray,
    demand: np.ndarray,
    pool_cap: np.ndarray,
    pool_nodes: np.ndarray,
    log_ways_empty: np.ndarray,
    log1p_int: np.ndarray,
    elig: np.ndarray,
    pred: np.ndarray,
    pred_col: int,
    free_g: np.ndarray,
    partial_g: np.ndarray,
    total_cap: float,
    run_group: np.ndarray,
    run_gpus: np.ndarray,
    run_end: np.ndarray,
    released_exact: bool,
    unit: float,
    bsld_floor: float,
    near_horizon: float,
    multi_ways: float,
    demand_share: np.ndarray,
    job: np.ndarray,
    wait_scaled: np.ndarray,
    can_now: np.ndarray,
    cluster: np.ndarray,
    share_q: np.ndarray,
    elig_q: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The decision's columns into ``job`` [Q, n_job + N_EXTRA] and ``cluster`` [n_cluster].

    Per queued job ``k`` (``idx[k]`` into the workload), its kind values (ways, stranded GPUs,
    feasibility, pool's free GPUs, pool's idle nodes) are row ``k`` of ``table`` when ``direct``,
    else row ``rowmap[idx[k]]``. Returns -1 (having written only ``can_now``) when
    ``skip_blocked`` and no job fits now; else the number of jobs with at least ``multi_ways``
    ways. Columns not written: ``wait`` (``wait_scaled`` gets wait / unit, for numpy's
    ``log1p``), ``demand_supply``, ``user_share``; ``future_availability`` (job and cluster) only
    when ``released_exact``; cluster ``queue_length`` never (``cluster`` is zeroed first). Also
    gathers ``demand_share[idx]`` and ``elig[idx]`` into ``share_q``, ``elig_q``: the operands
    of ``demand_supply``'s numpy products (cheaper here than in a call of their own). With
    ``pred_col >= 0`` (a feature set with the prediction features) it writes
    ``predicted_urgency`` there from ``pred`` (the prediction, -1 when unknown: 0 then), as
    ``compute.predicted_urgency``; the other prediction features are static columns."""
    q = len(idx)
    for i in range(len(cluster)):
        cluster[i] = 0.0
    runnable = 0
    for k in range(q):
        r = k if direct else rowmap[idx[k]]
        c = table[r, 2] > 0
        can_now[k] = c
        if c:
            runnable += 1
    if skip_blocked and runnable == 0:
        return -1
    n_groups = elig.shape[1]
    for k in range(q):
        j = idx[k]
        share_q[k] = demand_share[j]
        for g in range(n_groups):
            elig_q[k, g] = elig[j, g]
    n_static = static_t.shape[0]
    n_job = job.shape[1] - N_EXTRA
    multi = 0
    oldest = now
    for k in range(q):
        s = submit[idx[k]]
        if k == 0 or s < oldest:
            oldest = s
    span = now - oldest
    urgency = np.empty(q)
    for k in range(q):
        j = idx[k]
        r = k if direct else rowmap[j]
        ways = table[r, 0]
        stranded = table[r, 1]
        pfree = table[r, 3]
        pidle = table[r, 4]
        for s in range(n_static):
            job[k, static_cols[s]] = static_t[s, j]
        w = max(now - submit[j], 0.0)
        wait_scaled[k] = w / unit
        den = w + max(est[j], bsld_floor)
        u = w / den if den > 0 else 0.0
        urgency[k] = u
        job[k, _URGENCY] = u
        if pred_col >= 0:
            p = pred[j]
            if p >= 0.0:
                den_p = w + max(p, bsld_floor)
                job[k, pred_col] = w / den_p if den_p > 0 else 0.0
            else:
                job[k, pred_col] = 0.0
        job[k, _CAN_NOW] = 1.0 if can_now[k] else 0.0
        if ways >= multi_ways:
            multi += 1
        lw = log_ways_empty[j]
        job[k, _NUM_WAYS] = log1p_int[int(ways)] / lw if lw > 0 else 0.0
        pn = pool_nodes[j]
        job[k, _FREE_NODES] = pidle / pn if pn > 0 else 0.0
        job[k, _FRAGMENTATION] = stranded / pfree if pfree > 0 else 0.0
        if span > 0:
            job[k, _SUBMIT_TIME] = min(max((submit[j] - oldest) / span, 0.0), 1.0)
        else:
            job[k, _SUBMIT_TIME] = 0.0
        job[k, n_job] = ways
        job[k, n_job + 1] = pfree
    # cluster-level values (per-group counts are integers: exact sums)
    total_free = 0
    partial = 0
    for g in range(len(free_g)):
        total_free += free_g[g]
        partial += partial_g[g]
    cluster[_C_FREE] = float(total_free) / total_cap if total_cap > 0 else 0.0
    cluster[_C_FRAG] = float(partial) / float(total_free) if total_free > 0 else 0.0
    qdemand = np.empty(q)
    for k in range(q):
        qdemand[k] = demand[idx[k]]
    total_demand = pairwise_sum(qdemand)
    cluster[_C_DEMAND] = total_demand / (total_demand + total_cap) if total_cap > 0 else 0.0
    cluster[_C_URGENCY] = pairwise_sum(urgency) / q if q else 0.0
    cluster[_C_RUNNABLE] = runnable / q if q else 0.0
    if released_exact:
        _released_columns(
            idx, now, est, elig, pool_cap, run_group, run_gpus, run_end, near_horizon, total_cap, job, cluster
        )
    return multi


@njit(cache=True)
def _end_bins(srt: np.ndarray, run_end: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Each running job's bin: the index of the first threshold of ``srt`` (ascending) at or after
    its end (``np.searchsorted(srt, run_end)``, "left"; ``len(srt)`` past the last). Running jobs
    come sorted by end (``RunningJobs``), so the bin is found by walking on from the previous
    job's, with a binary search where an end is smaller than the one before."""
    n = len(srt)
    bins = np.empty(len(run_end), dtype=np.int64)
    b = 0
    prev = -np.inf
    for r in range(len(run_end)):
        end = run_end[r]
        if end >= prev:
            while b < n and srt[b] < end:
                b += 1
        else:
            b = np.searchsorted(srt, end)
        prev = end
        bins[r] = b
    return bins


@njit(cache=True)
def gang_cell(
    hist: np.ndarray, phist: np.ndarray, mm: int, gp: int
) -> tuple[float, float, bool]:  # pragma: no cover
    """A gang request's ways, stranded GPUs and feasibility in one node group, from the group's
    histogram over usable GPUs per node (``hist[v]``: nodes that can give ``v`` of the gang's
    ``gp`` GPUs; ``phist[v]``: those nodes' free GPUs when partially used), at most ``mm`` nodes.

    ``at_least`` counts nodes with ``u >= v`` from the top; the gang fits when the sum of
    ``min(at_least, mm)`` reaches ``gp``, and a node counts as a way when it can give at least
    ``gp - (the other mm - 1 nodes' best)`` GPUs; the nodes below that threshold strand their free
    GPUs. Shared by ``kinds_kernel`` (from scratch) and ``kernels_ways.kind_table_kernel`` (from
    the kept counts). Integer-valued sums: exact in any order."""
    n_bins = len(hist)
    at_least = 0
    top_m = 0
    top_m1 = 0
    for v in range(n_bins - 1, 0, -1):
        at_least += hist[v]
        top_m += min(at_least, mm)
        top_m1 += min(at_least, mm - 1)
    feasible = top_m >= gp
    thr = max(1, gp - top_m1) if feasible else n_bins - 1
    ways = 0.0
    for v in range(thr, n_bins):
        ways += hist[v]
    stranded = 0.0
    for v in range(thr):
        stranded += phist[v]
    return ways, stranded, feasible


@njit(cache=True)
def _released_columns(
    idx: np.ndarray,
    now: float,
    est: np.ndarray,
    elig: np.ndarray,
    pool_cap: np.ndarray,
    run_group: np.ndarray,
    run_gpus: np.ndarray,
    run_end: np.ndarray,
    near_horizon: float,
    total_cap: float,
    job: np.ndarray,
    cluster: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``future_availability``: the GPUs of each group's running jobs estimated to end by each
    job's threshold (``now + est``) and by ``now + near_horizon``, as ``released_gpus`` (a running
    job counts for every threshold at or after its end). Integer-valued GPUs: exact sums."""
    q = len(idx)
    n_groups = elig.shape[1]
    limits = np.empty(q + 1)
    for k in range(q):
        limits[k] = now + est[idx[k]]
    limits[q] = now + near_horizon
    order = np.argsort(limits)
    srt = limits[order]
    n_bins = q + 2
    hist = np.zeros((n_groups, n_bins))
    # each running job's bin: the first threshold at or after its end
    bins = _end_bins(srt, run_end)
    for r in range(len(run_end)):
        hist[run_group[r], bins[r]] += run_gpus[r]
    for g in range(n_groups):
        for b in range(1, n_bins):
            hist[g, b] += hist[g, b - 1]
    rank = np.empty(q + 1, dtype=np.int64)
    for i in range(q + 1):
        rank[order[i]] = i
    for k in range(q):
        j = idx[k]
        b = rank[k]
        released = 0.0
        for g in range(n_groups):
            if elig[j, g] != 0:
                released += hist[g, b]
        cap = pool_cap[j]
        job[k, _FUTURE] = min(released / cap, 1.0) if cap > 0 else 0.0
    near = 0.0
    for g in range(n_groups):
        near += hist[g, rank[q]]
    cluster[_C_FUTURE] = min(near / total_cap, 1.0) if total_cap > 0 else 0.0


@njit(cache=True)
def kinds_kernel(
    free_gpus: np.ndarray,
    free_share: np.ndarray,
    free_cpu: np.ndarray,
    free_mem: np.ndarray,
    idle: np.ndarray,
    group_of_node: np.ndarray,
    free_g: np.ndarray,
    idle_g: np.ndarray,
    partial_g: np.ndarray,
    n_bins: int,
    level: np.ndarray,
    req_gpus: np.ndarray,
    req_cpu: np.ndarray,
    req_mem: np.ndarray,
    gang: np.ndarray,
    m_nodes: np.ndarray,
    need_ok: np.ndarray,
    kind_req: np.ndarray,
    kind_elig: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``WorkloadFeaturizer._kinds_on``: per job kind (request ``kind_req``, eligible groups
    ``kind_elig``), into ``out`` [K, 5]: ways, stranded GPUs and feasibility summed over its
    eligible groups, its pool's free GPUs and idle nodes.

    The per-request rows follow ``fast_ways.request_rows`` (``ways.request_ways``'s rules), node
    by node: single-node requests fit where the node's GPU level, CPUs and memory reach the
    request's; gangs through the histogram of usable GPUs per group. Every value is an integer
    count: the same in any order."""
    n_req = len(level)
    n_groups = len(free_g)
    n_nodes = len(free_gpus)
    rows = np.zeros((n_req, n_groups, 3))
    # per node: GPU level (1000 per free whole GPU, else the largest free share below 1000) and
    # the free GPUs it holds if partially used
    node_level = np.empty(n_nodes, dtype=np.int64)
    node_partial = np.empty(n_nodes, dtype=np.int64)
    for n in range(n_nodes):
        w = free_gpus[n]
        node_level[n] = w * 1000 if w > 0 else min(free_share[n], 999)
        node_partial[n] = 0 if idle[n] else w
    hist = np.zeros((n_groups, n_bins), dtype=np.int64)
    phist = np.zeros((n_groups, n_bins), dtype=np.int64)
    big = np.int64(1) << np.int64(40)
    for r in range(n_req):
        if not gang[r]:
            lv, c, m = level[r], req_cpu[r], req_mem[r]
            for n in range(n_nodes):
                if node_level[n] >= lv and free_cpu[n] >= c and free_mem[n] >= m:
                    g = group_of_node[n]
                    rows[r, g, 0] += 1.0
                    rows[r, g, 1] -= node_partial[n]
            for g in range(n_groups):
                rows[r, g, 1] += partial_g[g]
                rows[r, g, 2] = 1.0 if rows[r, g, 0] > 0 else 0.0
            continue
        gp, c, m = req_gpus[r], req_cpu[r], req_mem[r]
        hist[:] = 0
        phist[:] = 0
        for n in range(n_nodes):
            w = free_gpus[n]
            if w <= 0:
                continue
            u = w
            lim = free_cpu[n] * gp // c if c > 0 else big
            if lim < u:
                u = lim
            lim = free_mem[n] * gp // m if m > 0 else big
            if lim < u:
                u = lim
            g = group_of_node[n]
            hist[g, u] += 1
            phist[g, u] += node_partial[n]
        for g in range(n_groups):
            ways, stranded, feasible = gang_cell(hist[g], phist[g], m_nodes[r, g], gp)
            rows[r, g, 0] = ways
            rows[r, g, 1] = stranded
            rows[r, g, 2] = 1.0 if feasible and need_ok[r, g] else 0.0
    for k in range(len(kind_req)):
        r = kind_req[k]
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        a4 = 0.0
        for g in range(n_groups):
            if kind_elig[k, g] != 0:
                a0 += rows[r, g, 0]
                a1 += rows[r, g, 1]
                a2 += rows[r, g, 2]
                a3 += free_g[g]
                a4 += idle_g[g]
        out[k, 0] = a0
        out[k, 1] = a1
        out[k, 2] = a2
        out[k, 3] = a3
        out[k, 4] = a4


@njit(cache=True)
def finish_kernel(
    job: np.ndarray,
    cols: np.ndarray,
    wait_log: np.ndarray,
    log_horizon: float,
    pool_demand: np.ndarray,
    cluster: np.ndarray,
    critic_cols: np.ndarray,
    obs: np.ndarray,
    critic: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The observation ``obs`` [Q, len(cols)] (float32) from the kernel's columns ``job``, with
    the two numpy-computed ones finished here: ``wait`` (``min(log1p(wait / unit) / log_horizon,
    1)`` from ``wait_log``) and ``demand_supply`` (``pool_demand / (pool_demand + pool's free
    GPUs)``, 0 where that is 0); and the critic values ``cluster[critic_cols]`` (float32)."""
    q = job.shape[0]
    n_job = job.shape[1] - N_EXTRA
    for i in range(len(cols)):
        c = cols[i]
        for k in range(q):
            if c == _WAIT:
                v = min(wait_log[k] / log_horizon, 1.0)
            elif c == _DEMAND_SUPPLY:
                den = pool_demand[k] + job[k, n_job + 1]
                v = pool_demand[k] / den if den > 0 else 0.0
            else:
                v = job[k, c]
            obs[k, i] = np.float32(v)
    for i in range(len(critic_cols)):
        critic[i] = np.float32(cluster[critic_cols[i]])


@njit(cache=True)
def _masked_row_sum(cum: np.ndarray, b: int, elig: np.ndarray, j: int) -> float:  # pragma: no cover
    """``np.add.reduce(cum[b] * elig[j])`` in numpy's order (``pairwise_sum``'s, for a row of at
    most 128 groups, without materializing the products: the same products, the same tree)."""
    n = cum.shape[1]
    if n > 128:
        row = np.empty(n)
        for g in range(n):
            row[g] = cum[b, g] * elig[j, g]
        big: float = pairwise_sum(row)
        return big
    if n < 8:
        res = 0.0
        for g in range(n):
            res += cum[b, g] * elig[j, g]
        return 0.0 + res
    r0, r1 = cum[b, 0] * elig[j, 0], cum[b, 1] * elig[j, 1]
    r2, r3 = cum[b, 2] * elig[j, 2], cum[b, 3] * elig[j, 3]
    r4, r5 = cum[b, 4] * elig[j, 4], cum[b, 5] * elig[j, 5]
    r6, r7 = cum[b, 6] * elig[j, 6], cum[b, 7] * elig[j, 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += cum[b, i] * elig[j, i]
        r1 += cum[b, i + 1] * elig[j, i + 1]
        r2 += cum[b, i + 2] * elig[j, i + 2]
        r3 += cum[b, i + 3] * elig[j, i + 3]
        r4 += cum[b, i + 4] * elig[j, i + 4]
        r5 += cum[b, i + 5] * elig[j, i + 5]
        r6 += cum[b, i + 6] * elig[j, i + 6]
        r7 += cum[b, i + 7] * elig[j, i + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        total += cum[b, i] * elig[j, i]
        i += 1
    out: float = 0.0 + total
    return out


@njit(cache=True)
def released_kernel(
    idx: np.ndarray,
    now: float,
    est: np.ndarray,
    elig: np.ndarray,
    pool_cap: np.ndarray,
    run_group: np.ndarray,
    run_gpus: np.ndarray,
    run_end: np.ndarray,
    near_horizon: float,
    total_cap: float,
    elig_id: np.ndarray,
    patterns: np.ndarray,
    job: np.ndarray,
    cluster: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``future_availability`` (job column and cluster value) with numpy's floats when the GPU
    demands are not integers (``observe_kernel``'s ``released_exact`` False: fractional GPUs, as
    on the openb cluster), into ``job[:, _FUTURE]`` and ``cluster[_C_FUTURE]``.

    Why: there the numpy path (``fast.released_gpus``, then ``_job_column``) binned the 4,402
    running jobs of the busy openb cluster in ~20 numpy calls, ~45 us of a 0.23 ms decision.
    The same floats as ``fast.released_gpus`` and ``compute._released_gpus``, because every sum
    is numpy's own order:

    - one bin per distinct threshold (``released_gpus``'s): a running job's bin is the first
      threshold at or after its end (``searchsorted`` "left"), and a (bin, group) cell adds its
      running jobs' GPUs in their order, from 0.0 (``np.bincount``);
    - the cumulative sums along the bins are sequential (``cumsum``);
    - a job's released GPUs are ``np.add.reduce(released * elig, axis=1)``: numpy's pairwise sum
      of the row's products (0.0 outside the pool; ``_masked_row_sum``), and the near horizon's
      the same sum of its row (``pairwise_sum``). That sum depends only on the job's bin and its
      eligibility row: computed once per (bin, row) met, where the workload's distinct rows are
      given (``patterns`` [P, n_groups], job ``j``'s ``elig_id[j]``; P = 0: once per job)."""
    q = len(idx)
    n_groups = elig.shape[1]
    limits = np.empty(q + 1)
    for k in range(q):
        limits[k] = now + est[idx[k]]
    limits[q] = now + near_horizon
    order = np.argsort(limits)
    # the distinct thresholds, ascending, and each threshold's bin among them
    srt = np.empty(q + 1)
    rank = np.empty(q + 1, dtype=np.int64)
    n_distinct = 0
    for i in range(q + 1):
        v = limits[order[i]]
        if n_distinct == 0 or v != srt[n_distinct - 1]:
            srt[n_distinct] = v
            n_distinct += 1
        rank[order[i]] = n_distinct - 1
    srt = srt[:n_distinct]
    n_bins = n_distinct + 1
    cum = np.zeros((n_bins, n_groups))
    bins = _end_bins(srt, run_end)
    for r in range(len(run_end)):
        cum[bins[r], run_group[r]] += run_gpus[r]
    for b in range(1, n_bins):
        for g in range(n_groups):
            cum[b, g] = cum[b - 1, g] + cum[b, g]
    n_pat = len(patterns)
    memo = np.full(n_bins * n_pat, -1.0)  # released GPUs are >= 0
    for k in range(q):
        j = idx[k]
        if n_pat == 0:
            released = _masked_row_sum(cum, rank[k], elig, j)
        else:
            p = elig_id[j]
            key = rank[k] * n_pat + p
            released = memo[key]
            if released < 0.0:
                released = memo[key] = _masked_row_sum(cum, rank[k], patterns, p)
        cap = pool_cap[j]
        job[k, _FUTURE] = min(released / cap, 1.0) if cap > 0 else 0.0
    near = pairwise_sum(np.ascontiguousarray(cum[rank[q]]))
    cluster[_C_FUTURE] = min(near / total_cap, 1.0) if total_cap > 0 else 0.0
