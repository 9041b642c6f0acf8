"""Exact integrals of the simulator's step-function timeline over a time interval.

The timeline is piecewise constant: row ``k`` holds from ``t[k]`` until ``t[k + 1]`` and the last
row holds forever; before ``t[0]`` nothing runs and nothing waits. Integrating the steps exactly
(instead of sampling, or averaging rows) matters because scheduling cycles are irregular: a burst
of cycles in one second must not outweigh an hour-long quiet step.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import FloatArray


def step_durations(t: npt.ArrayLike, t0: float, t1: float) -> FloatArray:
    """Seconds that each timeline step spends inside ``[t0, t1]`` (zero for steps outside it).

    Clipping every step boundary to the interval and differencing gives each step's overlap in
    one vectorized pass; the appended ``+inf`` is the open end of the last step.
    """
    times = np.asarray(t, dtype=np.float64)
    if times.ndim != 1:
        raise ValueError(f"timeline times must be one-dimensional, got shape {times.shape}")
    if len(times) > 1 and np.any(np.diff(times) < 0):
        raise ValueError("timeline times must be non-decreasing")
    if not t1 >= t0:
        raise ValueError(f"interval end {t1} is before its start {t0}")
    edges = np.clip(np.append(times, np.inf), t0, t1)
    durations: FloatArray = np.diff(edges)
    return durations


def integrate_steps(t: npt.ArrayLike, values: npt.ArrayLike, t0: float, t1: float) -> float:
    """Integral over ``[t0, t1]`` of the step function ``values`` (value-seconds)."""
    vals = np.asarray(values, dtype=np.float64)
    durations = step_durations(t, t0, t1)
    if len(vals) != len(durations):
        raise ValueError(f"timeline has {len(durations)} times but {len(vals)} values")
    return float(np.dot(vals, durations))


def busy_gpu_seconds(t: npt.ArrayLike, busy: npt.ArrayLike, t0: float, t1: float) -> float:
    """GPU-seconds used by all running jobs (window jobs or not) within ``[t0, t1]``."""
    return integrate_steps(t, busy, t0, t1)


def idle_gpu_seconds_while_waiting(
    t: npt.ArrayLike,
    busy: npt.ArrayLike,
    queued: npt.ArrayLike,
    capacity: float,
    t0: float,
    t1: float,
) -> float:
    """GPU-seconds left idle within ``[t0, t1]`` during steps in which at least one job waited.

    This is the cost a better scheduler could recover (head-of-line blocking, fragmentation, poor
    backfilling): idle capacity while the queue is empty is the workload's fault, not the
    policy's. Not clipped at zero, so a simulator that over-commits GPUs shows up as a negative.
    """
    busy_arr = np.asarray(busy, dtype=np.float64)
    waiting = np.asarray(queued) > 0
    if len(waiting) != len(busy_arr):
        raise ValueError(f"timeline has {len(busy_arr)} busy values but {len(waiting)} queued values")
    idle = np.where(waiting, capacity - busy_arr, 0.0)
    return integrate_steps(t, idle, t0, t1)


def value_at(t: npt.ArrayLike, values: npt.ArrayLike, at: float) -> float:
    """The step function ``values`` at time ``at``: the last row with ``t[k] <= at`` (the state
    after that cycle), 0 before the first row."""
    times = np.asarray(t, dtype=np.float64)
    vals = np.asarray(values, dtype=np.float64)
    if len(vals) != len(times):
        raise ValueError(f"timeline has {len(times)} times but {len(vals)} values")
    k = int(np.searchsorted(times, at, side="right")) - 1
    return float(vals[k]) if k >= 0 else 0.0


def mean_over(t: npt.ArrayLike, values: npt.ArrayLike, t0: float, t1: float) -> float:
    """Time average of the step function ``values`` over ``[t0, t1]``; for ``t1 == t0`` its value
    at ``t0`` (the limit of the average as the interval shrinks to its start)."""
    if t1 > t0:
        return integrate_steps(t, values, t0, t1) / (t1 - t0)
    if not t1 >= t0:
        raise ValueError(f"interval end {t1} is before its start {t0}")
    return value_at(t, values, t0)
