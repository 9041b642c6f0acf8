"""Compiled (numba) update of ``PlacementCounts`` from the nodes that changed: one call for ~25.

Why: on a large cluster (openb: 1,213 nodes) the per-request placement counts are kept across
free states and updated from the few nodes a start or an end changed (``fast_ways.PlacementCounts``).
The numpy update compared the four node arrays with the snapshot, then subtracted and added the
changed nodes' contributions in about 25 numpy calls, each costing more than the arithmetic. Here
it is one pass. Every count is an integer (the partially used GPUs are integer-valued floats, far
below 2**53): the same values in any order. ``tests/features/test_fast_ways.py`` checks the kept
counts against a recount along simulated runs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.features.kernels import gang_cell

__all__ = ["count_kernel", "kind_table_kernel", "snapshot_kernel", "sync_kernel"]


@njit(cache=True)
def sync_kernel(
    free_gpus: np.ndarray,
    share: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    idle: np.ndarray,
    group_of_node: np.ndarray,
    raw: np.ndarray,
    derived: np.ndarray,
    counts: np.ndarray,
    single: np.ndarray,
    thr: np.ndarray,
    hist: np.ndarray,
    phist: np.ndarray,
    slots: np.ndarray,
    gang_gpus: np.ndarray,
    gang_req: np.ndarray,
    n_groups: int,
    n_bins: int,
    big: int,
    max_changed: int,
) -> int:  # pragma: no cover - compiled
    """``PlacementCounts._sync``'s update: the nodes whose (free GPUs, share, CPUs, memory)
    differ from the snapshot ``raw`` [4, N] have their old contribution (``raw``, ``derived`` [2,
    N]: GPU level, partially used free GPUs) subtracted and their new one added, for the single-node
    requests ``single`` (fitting nodes per group in ``counts[:, g]``, their partially used free
    GPUs in ``counts[:, n_groups + g]``; thresholds ``thr`` [R, 3]) and the gang histograms
    ``slots`` (``hist``/``phist`` [slot, group * n_bins + usable GPUs]; each slot's GPUs and
    (CPUs, memory) request in ``gang_gpus``/``gang_req``); then the snapshot takes the new
    values. Returns the number of changed nodes, or -1 (nothing written) when more than
    ``max_changed`` changed."""
    n = len(free_gpus)
    k = 0
    any_whole = False  # a node with a free whole GPU before or after: the gangs' histograms change
    for i in range(n):
        if free_gpus[i] != raw[0, i] or share[i] != raw[1, i] or cpu[i] != raw[2, i] or mem[i] != raw[3, i]:
            k += 1
            any_whole = any_whole or free_gpus[i] != 0 or raw[0, i] != 0
    if k == 0 or k > max_changed:
        return -1 if k else 0
    for i in range(n):
        if not (
            free_gpus[i] != raw[0, i] or share[i] != raw[1, i] or cpu[i] != raw[2, i] or mem[i] != raw[3, i]
        ):
            continue
        g = group_of_node[i]
        w = free_gpus[i]
        level = w * WHOLE_GPU_MILLI if w > 0 else min(share[i], 999)
        pf = 0 if idle[i] else w
        for version in range(2):  # as it was (-1), then as it is (+1)
            if version == 0:
                sign = -1
                v_w, v_cpu, v_mem = raw[0, i], raw[2, i], raw[3, i]
                v_level, v_pf = derived[0, i], derived[1, i]
            else:
                sign = 1
                v_w, v_cpu, v_mem = w, cpu[i], mem[i]
                v_level, v_pf = level, pf
            for s in range(len(single)):
                r = single[s]
                if v_level >= thr[r, 0] and v_cpu >= thr[r, 1] and v_mem >= thr[r, 2]:
                    counts[r, g] += sign
                    counts[r, n_groups + g] += sign * v_pf
            if any_whole:
                for t in range(len(slots)):
                    slot = slots[t]
                    gp = gang_gpus[slot]
                    usable = v_w
                    req_cpu, req_mem = gang_req[slot, 0], gang_req[slot, 1]
                    lim = v_cpu * gp // req_cpu if req_cpu > 0 else big
                    if lim < usable:
                        usable = lim
                    lim = v_mem * gp // req_mem if req_mem > 0 else big
                    if lim < usable:
                        usable = lim
                    cell = g * n_bins + usable
                    hist[slot, cell] += sign
                    phist[slot, cell] += sign * v_pf
        raw[0, i], raw[1, i], raw[2, i], raw[3, i] = w, share[i], cpu[i], mem[i]
        derived[0, i], derived[1, i] = level, pf
    return k


@njit(cache=True)
def count_kernel(
    rows: np.ndarray,
    gang: np.ndarray,
    slot_of: np.ndarray,
    raw: np.ndarray,
    derived: np.ndarray,
    group_of_node: np.ndarray,
    thr: np.ndarray,
    gang_gpus: np.ndarray,
    gang_req: np.ndarray,
    counts: np.ndarray,
    hist: np.ndarray,
    phist: np.ndarray,
    n_groups: int,
    n_bins: int,
    big: int,
) -> None:  # pragma: no cover - compiled
    """``PlacementCounts._count``: requests ``rows`` counted from scratch on the snapshot (``raw``
    [4, N]: free whole GPUs, share, CPUs, memory; ``derived`` [2, N]: GPU level, partially used
    free GPUs), node by node, with ``sync_kernel``'s per-node rules: a single-node request's
    fitting nodes and their partially used free GPUs per group (``counts``), a gang's histogram
    of usable GPUs per group (``hist``/``phist`` row ``slot_of[r]``). The numpy count went
    through a node table, a fit matrix and ``np.add.reduceat`` (~60 us for a 256-job queue's
    requests on the 1,213-node openb cluster); every value is an integer count: the same."""
    n = raw.shape[1]
    for t in range(len(rows)):
        r = rows[t]
        if gang[r]:
            slot = slot_of[r]
            for c in range(hist.shape[1]):
                hist[slot, c] = 0
                phist[slot, c] = 0.0
            gp = gang_gpus[slot]
            req_cpu, req_mem = gang_req[slot, 0], gang_req[slot, 1]
            for i in range(n):
                w = raw[0, i]
                if w <= 0:
                    continue
                usable = w
                lim = raw[2, i] * gp // req_cpu if req_cpu > 0 else big
                if lim < usable:
                    usable = lim
                lim = raw[3, i] * gp // req_mem if req_mem > 0 else big
                if lim < usable:
                    usable = lim
                cell = group_of_node[i] * n_bins + usable
                hist[slot, cell] += 1
                phist[slot, cell] += derived[1, i]
            continue
        for c in range(2 * n_groups):
            counts[r, c] = 0
        lv, cp, mm = thr[r, 0], thr[r, 1], thr[r, 2]
        for i in range(n):
            if derived[0, i] >= lv and raw[2, i] >= cp and raw[3, i] >= mm:
                g = group_of_node[i]
                counts[r, g] += 1
                counts[r, n_groups + g] += derived[1, i]


@njit(cache=True)
def snapshot_kernel(
    free_gpus: np.ndarray,
    share: np.ndarray,
    cpu: np.ndarray,
    mem: np.ndarray,
    idle: np.ndarray,
    raw: np.ndarray,
    derived: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``PlacementCounts._start``'s snapshot in place: every node's free GPUs, share, CPUs and
    memory into ``raw`` [4, N], its GPU level and partially used free GPUs into ``derived`` [2, N]
    (``fast_ways._node_level``'s integers)."""
    for i in range(len(free_gpus)):
        w = free_gpus[i]
        raw[0, i], raw[1, i], raw[2, i], raw[3, i] = w, share[i], cpu[i], mem[i]
        derived[0, i] = w * WHOLE_GPU_MILLI if w > 0 else min(share[i], 999)
        derived[1, i] = 0 if idle[i] else w


@njit(cache=True)
def kind_table_kernel(
    idx: np.ndarray,
    job_kind: np.ndarray,
    kind_req: np.ndarray,
    kind_elig: np.ndarray,
    valid: np.ndarray,
    gang: np.ndarray,
    slot_of: np.ndarray,
    counts: np.ndarray,
    hist: np.ndarray,
    phist: np.ndarray,
    gang_gpus: np.ndarray,
    m_nodes: np.ndarray,
    need_ok: np.ndarray,
    free_g: np.ndarray,
    idle_g: np.ndarray,
    partial_g: np.ndarray,
    n_bins: int,
    mark: np.ndarray,
    stamp: int,
    table: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The kind values of the queued jobs ``idx`` from the kept counts, into ``table`` [K, 5]
    (row ``job_kind[j]``; rows of kinds not queued are left as they were): ways, stranded GPUs
    and feasibility summed over the kind's eligible groups, its pool's free GPUs and idle nodes.

    What ``PlacementCounts._assemble`` (the rows of the queue's distinct requests, gangs through
    ``fast_ways._gang_rows``) and ``fast._per_kind`` compute in ~30 numpy calls, once per kind
    (``mark[kind] == stamp``: done in this call). Every value is an integer-valued sum: exact in
    any order. Returns -1, having written nothing, when a queued job's request is not counted yet
    (``valid``), else the number of distinct kinds."""
    n_groups = len(free_g)
    for k in range(len(idx)):
        if not valid[kind_req[job_kind[idx[k]]]]:
            return -1
    n_kinds = 0
    for k in range(len(idx)):
        kind = job_kind[idx[k]]
        if mark[kind] == stamp:
            continue
        mark[kind] = stamp
        n_kinds += 1
        r = kind_req[kind]
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        a4 = 0.0
        for g in range(n_groups):
            if kind_elig[kind, g] == 0:
                continue
            a3 += free_g[g]
            a4 += idle_g[g]
            if not gang[r]:
                ways = counts[r, g]
                a0 += ways
                a1 += partial_g[g] - counts[r, n_groups + g]
                if ways > 0:
                    a2 += 1.0
                continue
            slot = slot_of[r]
            base = g * n_bins
            ways, stranded, feasible = gang_cell(
                hist[slot, base : base + n_bins],
                phist[slot, base : base + n_bins],
                m_nodes[r, g],
                gang_gpus[slot],
            )
            a0 += ways
            a1 += stranded
            if feasible and need_ok[r, g]:
                a2 += 1.0
        table[kind, 0] = a0
        table[kind, 1] = a1
        table[kind, 2] = a2
        table[kind, 3] = a3
        table[kind, 4] = a4
    return n_kinds
