"""Compiled (numba) best-fit scans of the placer's walk (``shared.placement.walk``).

Why: a burst decision on the openb cluster starts several hundred queued jobs, and for each one the
walk looks for best-fit's node. Its Python scan over the GPU buckets visited a few hundred nodes per
job late in the walk (many with the GPUs free but not the CPUs or memory), about 15-20 us per job,
a third of the placer's time on a burst. One compiled pass over the slots of the job's node groups
(``least_left``) costs 1-3 us and finds the same node.

Why it is the same node: with the job's groups in ascending order (the walk only uses these scans
then), slot order is (group, node) order, so the first slot with the least score among the fitting
ones is best-fit's choice: least GPUs (or CPUs, for a job of no GPU) left, then the earliest group,
then the lowest node id (``WalkState._single_vector`` and ``_cpu_only`` compute it the same way with
numpy). ``tests/placement/test_placement_kernels.py`` compares them on random states.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["least_left", "replay_free", "warm_up"]


@njit(cache=True, nogil=True)
def least_left(
    whole: npt.NDArray[np.int64],
    cpu: npt.NDArray[np.int64],
    mem: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    blocked: npt.NDArray[np.bool_],
    gpus: int,
    cpu_req: int,
    mem_req: int,
    first: bool = False,
) -> int:  # pragma: no cover - compiled; tested through its callers and directly
    """The first slot of least score among those of ``[starts[k], ends[k])`` (in that order) with at
    least ``gpus`` whole GPUs, ``cpu_req`` milli-CPUs and ``mem_req`` MiB free and not ``blocked``;
    -1 if none. The score is the free whole GPUs, or the free CPUs for a job of no GPU
    (``gpus == 0``); ``first``: every fitting slot scores alike (the first one is taken).
    ``blocked`` of length 0 blocks nothing."""
    best = -1
    best_score = np.int64(0)
    any_blocked = len(blocked) > 0
    for k in range(len(starts)):
        for s in range(starts[k], ends[k]):
            if whole[s] < gpus or cpu[s] < cpu_req or mem[s] < mem_req:
                continue
            if any_blocked and blocked[s]:
                continue
            if first:
                return s
            score = whole[s] if gpus > 0 else cpu[s]
            if best < 0 or score < best_score:
                best, best_score = s, score
                if gpus > 0 and score == gpus:  # nothing can leave fewer GPUs: the first is the one
                    return best
    return best


@njit(cache=True, nogil=True)
def replay_free(
    t: float,
    k: int,
    slot: npt.NDArray[np.int64],
    weight: npt.NDArray[np.float64],
    whole_e: npt.NDArray[np.int64],
    total_w: npt.NDArray[np.float64],
    total_n: npt.NDArray[np.int64],
    km: int,
    m_slot: npt.NDArray[np.int64],
    m_milli: npt.NDArray[np.int64],
    s_time: npt.NDArray[np.float64],
    s_slot: npt.NDArray[np.int64],
    s_res: npt.NDArray[np.int64],
    s_milli: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
    now_whole: npt.NDArray[np.int64],
    now_cpu: npt.NDArray[np.int64],
    now_mem: npt.NDArray[np.int64],
    now_share: npt.NDArray[np.int64],
    usable: npt.NDArray[np.bool_],
    cap: npt.NDArray[np.int64],
    cap_share: npt.NDArray[np.int64],
) -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
]:  # pragma: no cover - compiled; tested against the numpy rule
    """Free whole GPUs, CPUs, memory and largest share per slot at time ``t`` of a release replay
    (``services.placer.stage._Replay.free_at``, whose docstring gives the rules): the first ``k``
    running-job entries (sorted by end) and the first ``km`` shares have ended, and this decision's
    starts with ``s_time <= t``.

    Every step is the numpy rule's, in the same order: the released weights are summed entry by
    entry (as ``np.bincount`` does), a share of used CPUs and memory is ``floor(used * fraction)``
    of the same float64 product, and everything else is integer arithmetic.
    """
    n = len(now_whole)
    rel_n = np.zeros(n, dtype=np.int64)
    rel_w = np.zeros(n, dtype=np.float64)
    rel_whole = np.zeros(n, dtype=np.float64)
    for j in range(k):
        s = slot[j]
        rel_n[s] += 1
        rel_w[s] += weight[j]
        rel_whole[s] += whole_e[j]
    share = now_share.copy()
    for j in range(km):
        s = m_slot[j]
        if m_milli[j] > share[s]:
            share[s] = m_milli[j]
    mine_w = np.zeros(n, dtype=np.float64)
    mine_c = np.zeros(n, dtype=np.float64)
    mine_m = np.zeros(n, dtype=np.float64)
    for j in range(len(s_time)):
        if s_time[j] <= t:
            s = s_slot[j]
            mine_w[s] += s_res[j, 0]
            mine_c[s] += s_res[j, 1]
            mine_m[s] += s_res[j, 2]
            if s_milli[j] > share[s]:
                share[s] = s_milli[j]
    whole = np.zeros(n, dtype=np.int64)
    cpu = np.zeros(n, dtype=np.int64)
    mem = np.zeros(n, dtype=np.int64)
    out_share = np.zeros(n, dtype=np.int64)
    for s in range(n):
        if not usable[s]:
            continue
        # the share of the node's jobs ended: by GPUs held, by count where they hold none
        frac = rel_w[s] / total_w[s] if total_w[s] > 0 else rel_n[s] / max(total_n[s], 1)
        if rel_n[s] == total_n[s] and total_n[s] > 0:  # the node's last known job ended
            back_w, back_c, back_m = used[0, s], used[1, s], used[2, s]
        else:
            back_w = min(np.int64(rel_whole[s]), used[0, s])
            back_c = np.int64(np.floor(used[1, s] * frac))
            back_m = np.int64(np.floor(used[2, s] * frac))
        back_w += np.int64(mine_w[s])
        back_c += np.int64(mine_c[s])
        back_m += np.int64(mine_m[s])
        w = min(cap[0, s], now_whole[s] + back_w)
        whole[s] = w
        cpu[s] = min(cap[1, s], now_cpu[s] + back_c)
        mem[s] = min(cap[2, s], now_mem[s] + back_m)
        out_share[s] = cap_share[s] if w > 0 else min(share[s], cap_share[s])
    return whole, cpu, mem, out_share


def warm_up() -> None:
    """Compile (or load from the cache) the kernels now, not on a decision's path."""
    one = np.ones(1, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    nothing = np.zeros(0, dtype=np.bool_)
    for first in (False, True):
        least_left(one, one, one, np.zeros(1, dtype=np.int64), one, nothing, 1, 1, 1, first)
    caps = np.ones((3, 1), dtype=np.int64)
    weights = np.ones(1, dtype=np.float64)
    never = np.zeros(0, dtype=np.float64)
    starts = np.zeros((0, 3), dtype=np.int64)
    usable = np.ones(1, dtype=np.bool_)
    zero = np.zeros(1, dtype=np.int64)
    replay_free(1.0, 1, zero, weights, one, weights, one, 0, none, none, never, none, starts, none,
                caps, one, one, one, one, usable, caps, one)  # fmt: skip
