"""numpy's pairwise summation, compiled (numba), for kernels that must repeat numpy's float sums.

Why one module: ``np.add.reduce`` of float64 adds in a fixed tree (blocks of at most 128 values in
8 lanes, halves cut at multiples of 8), so its last bit depends on that order. Two compiled paths
have to give numpy's bits: the featurizer's kernels (``shared.features.kernels``: queue demand and
mean urgency) and the simulator's compiled core (``shared.sim.compiled.kernels``: the multifactor
policy's total usage). Both call this.

numba caveat: a ``cache=True`` caller keeps this code compiled into its own cached machine code, and
numba re-validates that cache against the caller's file only. After editing this file, clear the
callers' caches (``__pycache__/*.nbi|*.nbc`` next to them) or touch their files.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["pairwise", "pairwise_sum"]


@njit(cache=True)
def _block(a: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]`` for n <= 128: sequential below 8 elements,
    else 8 accumulators combined as a tree, then the rest sequentially."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    total: float = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        total += a[lo + i]
        i += 1
    return total


@njit(cache=True)
def pairwise(a: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's ``pairwise_sum`` of ``a[lo:lo + n]``: blocks of at most 128 (``_block``), above
    that the sum of the two halves (split at a multiple of 8). Evaluated with an explicit stack:
    numba's cache cannot reload a recursive function."""
    if n <= 128:
        return _block(a, lo, n)
    s_lo = np.empty(128, dtype=np.int64)
    s_n = np.empty(128, dtype=np.int64)
    s_state = np.empty(128, dtype=np.int64)
    vals = np.empty(128)
    sp = 1
    vsp = 0
    s_lo[0], s_n[0], s_state[0] = lo, n, 0
    while sp > 0:
        top = sp - 1
        m = s_n[top]
        if m <= 128:
            vals[vsp] = _block(a, s_lo[top], m)
            vsp += 1
            sp -= 1
            continue
        n2 = m // 2
        n2 -= n2 % 8
        state = s_state[top]
        if state == 0:  # the left half first
            s_state[top] = 1
            s_lo[sp], s_n[sp], s_state[sp] = s_lo[top], n2, 0
            sp += 1
        elif state == 1:  # then the right half
            s_state[top] = 2
            s_lo[sp], s_n[sp], s_state[sp] = s_lo[top] + n2, m - n2, 0
            sp += 1
        else:  # left + right
            vals[vsp - 2] = vals[vsp - 2] + vals[vsp - 1]
            vsp -= 1
            sp -= 1
    return float(vals[0])


@njit(cache=True)
def pairwise_sum(a: np.ndarray) -> float:  # pragma: no cover - compiled
    """``np.add.reduce(a)`` of a contiguous float64 vector, in numpy's order: the identity 0.0
    plus the pairwise sum of the whole vector (an aligned contiguous array is reduced unbuffered,
    in one inner loop; checked against numpy up to 100,000 elements)."""
    return 0.0 + pairwise(a, 0, len(a))
