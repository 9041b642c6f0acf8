"""A reference EASY backfilling simulator, small enough to check by eye (issue 18, part 2).

Why it exists: Hylo's simulator (``shared/sim``) schedules gangs on node groups with node-pinned
reservations and many exact shortcuts, and its EASY was found to start some jobs later than
textbook EASY does. This file is the yardstick the parity tests hold it to: EASY as Mu'alem and
Feitelson (2001) describe it, on one flat pool of ``total`` processors, with a single reservation,
written for clarity and sharing no code with ``shared.sim`` or ``shared.policies``.

Semantics:

- Events: at each distinct event time t, every job whose (actual) end is <= t completes, then
  every job with submit <= t arrives, then one scheduling pass runs. A job runs for its runtime,
  whatever its estimate (a job that overruns its estimate is not killed).
- Pass: the queue is walked in priority order and jobs start while they fit (procs <= free). The
  first job that does not fit, the head, gets the reservation: running jobs (those started earlier
  in this pass included) are walked in order of estimated end ``max(start + estimate, t)``, ties by
  job index, freeing their processors until the head fits; that end is the shadow time. The extra
  processors are those free at the shadow time (every running job whose estimated end is <= the
  shadow counts, ties included) beyond what the head needs. Every later job starts iff
  ``procs <= free`` and either ``t + estimate <= shadow`` (it ends by the shadow: a job ending
  exactly at the shadow counts) or ``procs <= extra``; a job started by the second rule only (it
  runs past the shadow) uses up ``procs`` extra processors.
- Orders: ``fcfs`` = (submit, index); ``sjf`` = (floor(estimate), procs, submit, index).

The caller excludes jobs that ask for more than ``total`` processors (as Hylo's binding does);
such jobs, like any other malformed input, raise ``ValueError`` here.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort

import numpy as np
import numpy.typing as npt

ORDERS = ("fcfs", "sjf")


def _checked(name: str, values: npt.ArrayLike, n: int | None) -> npt.NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        raise ValueError(f"{name} must be a 1-D array of {n if n is not None else 'n'} values")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} must be finite and >= 0")
    return arr


def easy_starts(
    submit: npt.ArrayLike,
    runtime: npt.ArrayLike,
    estimate: npt.ArrayLike,
    procs: npt.ArrayLike,
    total: int,
    order: str = "fcfs",
) -> npt.NDArray[np.float64]:
    """Start time of every job under textbook EASY on ``total`` processors (see the module doc)."""
    sub = _checked("submit", submit, None)
    n = len(sub)
    run = _checked("runtime", runtime, n)
    est = _checked("estimate", estimate, n)
    width = _checked("procs", procs, n)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    if int(total) != total or total < 1:
        raise ValueError(f"total must be a positive integer, not {total!r}")
    if ((width != np.floor(width)) | (width < 1) | (width > total)).any():
        raise ValueError(f"procs must be integers in 1..{total} (exclude larger jobs first)")
    s, r, e, p = sub.tolist(), run.tolist(), est.tolist(), [int(v) for v in width.tolist()]
    key: list[tuple[float, ...]] = (
        [(s[j], j) for j in range(n)]
        if order == "fcfs"
        else [(math.floor(e[j]), p[j], s[j], j) for j in range(n)]
    )

    start = np.full(n, np.nan)
    arrivals = sorted(range(n), key=lambda j: (s[j], j))
    queue: list[tuple[tuple[float, ...], int]] = []  # (key, job), sorted by key
    ends: list[tuple[float, int]] = []  # heap of (actual end, job)
    running: dict[int, float] = {}  # job -> estimated end (start + estimate)
    free, a = int(total), 0

    def reservation(head: int, now: float) -> tuple[float, int]:
        """(shadow time, extra processors) for the head, from the running jobs' estimated ends."""
        by_end = sorted((max(end, now), j) for j, end in running.items())
        avail = free
        for end, j in by_end:
            avail += p[j]
            if avail >= p[head]:
                extra = free + sum(p[k] for when, k in by_end if when <= end) - p[head]
                return end, extra
        raise AssertionError("the head fits an empty machine, so some release must make room")

    def begin(j: int, now: float) -> None:
        nonlocal free
        start[j] = now
        free -= p[j]
        running[j] = now + e[j]
        heapq.heappush(ends, (now + r[j], j))

    while a < n or ends:
        now = min(s[arrivals[a]] if a < n else math.inf, ends[0][0] if ends else math.inf)
        while ends and ends[0][0] <= now:
            _, j = heapq.heappop(ends)
            free += p[j]
            del running[j]
        while a < n and s[arrivals[a]] <= now:
            insort(queue, (key[arrivals[a]], arrivals[a]))
            a += 1
        # one scheduling pass; the head's reservation is computed when a job behind it first fits
        # (nothing starts in between, so it is the one computed when the head is found)
        waiting: list[tuple[tuple[float, ...], int]] = []
        head, shadow, extra = -1, None, 0  # shadow: None until computed
        for item in queue:
            j = item[1]
            if p[j] > free:
                head = j if head < 0 else head
                waiting.append(item)
                continue
            if head < 0:
                begin(j, now)
                continue
            if shadow is None:
                shadow, extra = reservation(head, now)
            if now + e[j] <= shadow:
                begin(j, now)
            elif p[j] <= extra:
                begin(j, now)
                extra -= p[j]
            else:
                waiting.append(item)
        queue = waiting
    return start
