"""Compiled (numba) assembly of a simulated decision's cluster view: one call for ~20 numpy calls.

Why: ``SimViewBuilder.cluster_view`` concatenated the groups' free arrays, derived the free
shares, the idle nodes and the per-group sums (``ClusterView._derive``'s expressions) and gathered
the running jobs' GPUs: about 20 small numpy calls, 15 us in a tight loop and 25-40 us inside a
training episode (cold caches), each time a job started or ended. ``view_kernel`` does it in one
pass. Every output is an integer or a Boolean (the GPUs gathered, not computed): the same values
as the numpy expressions, in any order. ``tests/features/test_fast_view.py`` compares the views.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from shared.domain.jobs import WHOLE_GPU_MILLI

__all__ = ["view_kernel"]


@njit(cache=True)
def view_kernel(
    wholes: tuple[np.ndarray, ...],
    cpus: tuple[np.ndarray, ...],
    mems: tuple[np.ndarray, ...],
    gpn: np.ndarray,
    cap_cpu: np.ndarray,
    cap_mem: np.ndarray,
    run: np.ndarray,
    demand: np.ndarray,
    ints: np.ndarray,
    idle: np.ndarray,
    run_gpus: np.ndarray,
) -> bool:  # pragma: no cover - compiled
    """The per-state arrays of a ``ClusterView`` from the groups' free whole GPUs, CPUs and memory
    (group ``g``'s nodes: ``wholes[g]``, ``cpus[g]``, ``mems[g]``; capacities per node ``gpn[g]``,
    ``cap_cpu[g]``, ``cap_mem[g]``; every group at least one node), written into buffers the
    caller allocates (returning new arrays costs ~0.4 us each): ``ints`` [4 N + 3 G] holds the
    free GPUs, free shares (1000 where a whole GPU is free, else 0: groups that track shares are
    overwritten by the caller), CPUs and memory of the N nodes, then the idle nodes, free GPUs and
    free GPUs on partly used nodes of the G groups; ``idle`` [N] the idle nodes; ``run_gpus`` the
    GPUs ``demand[run]`` of the running jobs. Returns False, having written nothing, when the
    groups' arrays do not hold N nodes, the buffers have the wrong sizes or a running job is not
    one of ``demand``'s."""
    n_groups = len(wholes)
    n = len(idle)
    total = 0
    for g in range(n_groups):
        total += len(wholes[g])
        if len(cpus[g]) != len(wholes[g]) or len(mems[g]) != len(wholes[g]):
            return False
    if total != n or len(ints) != 4 * n + 3 * n_groups or len(run_gpus) != len(run):
        return False
    if len(gpn) != n_groups or len(cap_cpu) != n_groups or len(cap_mem) != n_groups:
        return False
    for r in range(len(run)):
        if run[r] < 0 or run[r] >= len(demand):
            return False
    i = 0
    for g in range(n_groups):
        w_g, c_g, m_g = wholes[g], cpus[g], mems[g]
        full_w, full_c, full_m = gpn[g], cap_cpu[g], cap_mem[g]
        n_idle = 0
        n_free = 0
        for k in range(len(w_g)):
            w, c, m = w_g[k], c_g[k], m_g[k]
            ints[i] = w
            ints[n + i] = WHOLE_GPU_MILLI if w > 0 else 0
            ints[2 * n + i] = c
            ints[3 * n + i] = m
            is_idle = w == full_w and c == full_c and m == full_m
            idle[i] = is_idle
            if is_idle:
                n_idle += 1
            n_free += w
            i += 1
        ints[4 * n + g] = n_idle
        ints[4 * n + n_groups + g] = n_free
        ints[4 * n + 2 * n_groups + g] = n_free - n_idle * full_w
    for r in range(len(run)):
        run_gpus[r] = demand[run[r]]
    return True
