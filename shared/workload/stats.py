"""Workload statistics, measured the same way on a trace and on a generated workload.

Why a module of its own: calibration is only meaningful if the number printed for the trace and the
number printed for the generator come from the same function; the calibration script, the docs
table and the tests all call these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HOUR = 3600.0
DAY = 86400.0
QUANTILES = (0.10, 0.50, 0.90, 0.99)
# Unix day 0 (1970-01-01) was a Thursday: Monday-based weekday = (unix day + 3) % 7.
UNIX_WEEKDAY_SHIFT = 3


def fold_gpu_counts(gpus: npt.ArrayLike, values: Sequence[int]) -> IntArray:
    """Map each count up to the next value in ``values`` (capped at the largest), e.g. 12 -> 16."""
    vals = np.asarray(sorted(values), dtype=np.int64)
    idx = np.minimum(np.searchsorted(vals, np.asarray(gpus), side="left"), len(vals) - 1)
    folded: IntArray = vals[idx]
    return folded


def gpu_mix(gpus: npt.ArrayLike, values: Sequence[int]) -> dict[int, float]:
    """Fraction of jobs per GPU count after folding onto ``values``."""
    folded = fold_gpu_counts(gpus, values)
    n = max(len(folded), 1)
    return {int(v): float(np.sum(folded == v)) / n for v in sorted(values)}


def duration_quantiles(
    runtime: npt.ArrayLike, cap: float | None = None, qs: Sequence[float] = QUANTILES
) -> FloatArray:
    """Runtime quantiles; ``cap`` clips first (to compare a trace with a wall-time-limited model)."""
    r = np.asarray(runtime, dtype=np.float64)
    if cap is not None:
        r = np.minimum(r, cap)
    out: FloatArray = np.quantile(r, qs)
    return out


def active_window(epoch: npt.ArrayLike, min_per_day: int = 100) -> tuple[float, float]:
    """[start, end) of the longest run of whole days with >= ``min_per_day`` submissions.

    Why: Philly's first 20 days hold a few dozen jobs and a 3-day outage follows day 100; those
    silences are artefacts of the trace's collection, not of user behaviour, and alone they push
    the inter-arrival CV from 2.5 to 15.
    """
    t = np.sort(np.asarray(epoch, dtype=np.float64))
    if len(t) == 0:
        return 0.0, 0.0
    first_day = np.floor(t[0] / DAY)
    day = (np.floor(t / DAY) - first_day).astype(np.int64)
    busy = np.bincount(day) >= min_per_day
    best, start = (0, 0), None
    for i, b in enumerate(np.append(busy, False).tolist()):
        if b and start is None:
            start = i
        elif not b and start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    if best == (0, 0):
        return float(t[0]), float(t[-1]) + 1.0
    return float((first_day + best[0]) * DAY), float((first_day + best[1]) * DAY)


def interarrivals(submit: npt.ArrayLike) -> FloatArray:
    d: FloatArray = np.diff(np.sort(np.asarray(submit, dtype=np.float64)))
    return d


def interarrival_cv(submit: npt.ArrayLike) -> float:
    """Coefficient of variation of the gaps between submits: 1 for Poisson, > 1 for bursty."""
    d = interarrivals(submit)
    return float(d.std() / d.mean()) if len(d) > 1 and d.mean() > 0 else float("nan")


def same_second_fraction(submit: npt.ArrayLike) -> float:
    """Fraction of gaps that are 0 s: jobs submitted together by a script."""
    d = interarrivals(np.floor(np.asarray(submit, dtype=np.float64)))
    return float(np.mean(d == 0)) if len(d) else float("nan")


def hourly_counts(submit: npt.ArrayLike) -> IntArray:
    t = np.asarray(submit, dtype=np.float64)
    h = ((t - np.floor(t.min() / HOUR) * HOUR) // HOUR).astype(np.int64)
    counts: IntArray = np.bincount(h)
    return counts


def hourly_dispersion(submit: npt.ArrayLike) -> float:
    """Variance / mean of jobs per hour (1 for Poisson at a constant rate)."""
    c = hourly_counts(submit)
    return float(c.var() / c.mean())


def burst_episodes(submit: npt.ArrayLike, threshold: float = 3.0, window_h: int = 168) -> dict[str, float]:
    """Classify hours as burst hours (count > threshold x the rolling weekly median) and describe them.

    Returns the fraction of burst hours, the mean run of consecutive burst hours, the ratio of the
    mean count in burst hours to that in other hours, and the share of jobs submitted in bursts.
    """
    c = hourly_counts(submit).astype(np.float64)
    half = window_h // 2
    padded = np.pad(c, (half, window_h - half - 1), mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, window_h)
    med = np.median(windows, axis=1)
    burst = c > threshold * np.maximum(med, 1.0)
    edges = np.diff(np.concatenate(([0], burst.astype(np.int64), [0])))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    normal_mean = c[~burst].mean() if (~burst).any() else float("nan")
    return {
        "burst_hour_fraction": float(burst.mean()),
        "burst_mean_run_h": float(runs.mean()) if len(runs) else 0.0,
        "burst_ratio": float(c[burst].mean() / normal_mean) if burst.any() else 1.0,
        "jobs_in_bursts": float(c[burst].sum() / c.sum()),
    }


def diurnal_profile(epoch: npt.ArrayLike) -> tuple[float, float]:
    """Amplitude and peak hour of the first harmonic of the hour-of-day submit profile."""
    t = np.asarray(epoch, dtype=np.float64)
    hour = ((t / HOUR) % 24.0).astype(np.int64)
    p = np.bincount(hour, minlength=24) / len(t) * 24.0
    ang = 2.0 * np.pi * np.arange(24) / 24.0
    a, b = 2.0 * np.mean(p * np.cos(ang)), 2.0 * np.mean(p * np.sin(ang))
    return float(np.hypot(a, b)), float((np.degrees(np.arctan2(b, a)) % 360.0) / 15.0)


def weekend_factor(epoch: npt.ArrayLike, start: float, end: float) -> float:
    """Jobs per weekend day / jobs per weekday over whole days of [start, end)."""
    t = np.asarray(epoch, dtype=np.float64)
    days = np.arange(np.floor(start / DAY), np.floor(end / DAY))
    weekday_of = (days.astype(np.int64) + UNIX_WEEKDAY_SHIFT) % 7
    job_wd = (np.floor(t / DAY).astype(np.int64) + UNIX_WEEKDAY_SHIFT) % 7
    wk = int(np.sum(job_wd < 5)) / max(int(np.sum(weekday_of < 5)), 1)
    we = int(np.sum(job_wd >= 5)) / max(int(np.sum(weekday_of >= 5)), 1)
    return float(we / wk) if wk > 0 else float("nan")


def zipf_mle(counts: npt.ArrayLike, grid: FloatArray | None = None) -> float:
    """Maximum-likelihood exponent s of a finite Zipf law p(rank) ~ rank^-s over the observed ranks."""
    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    c = c[c > 0]
    ranks = np.arange(1, len(c) + 1, dtype=np.float64)
    s_grid = grid if grid is not None else np.linspace(0.0, 4.0, 4001)
    log_r = np.log(ranks)
    norm = np.log(np.exp(-np.outer(s_grid, log_r)).sum(axis=1))
    ll = -s_grid * np.dot(c, log_r) - c.sum() * norm
    return float(s_grid[int(np.argmax(ll))])


def fractional_fraction(table: JobTable) -> float:
    """Fraction of GPU jobs that ask for a share (< 1000 milli) of one GPU."""
    g = table.gpus > 0
    return float(np.mean(table.gpu_milli[g] < WHOLE_GPU_MILLI)) if g.any() else float("nan")


def type_constrained_fraction(table: JobTable) -> float:
    """Fraction of GPU jobs whose type set is not "any"."""
    g = table.gpus > 0
    return float(np.mean(table.type_set[g] != 0)) if g.any() else float("nan")


def gpu_seconds_per_job(table: JobTable, cap: float | None = None) -> float:
    """Mean gpu demand x runtime (fractional shares count as their fraction)."""
    r = table.runtime if cap is None else np.minimum(table.runtime, cap)
    return float(np.mean(table.gpu_demand * r))
