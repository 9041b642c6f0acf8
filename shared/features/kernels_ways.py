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

__all__ = ["sync_kernel"]


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
