"""The report's numbers as the database hands them over: distributions, groups and bins, never rows.

Why aggregates and not rows: a store of a million decision rows holds tens of thousands of finished
jobs and a hundred thousand shadow ranks; reading them into Python cost seconds and hundreds of MB per
report (issue 20). The queries in ``shared.report.sql`` group, count and pick order statistics in SQL,
so what reaches Python is bounded by the number of groups, stages and time bins, whatever the store's
size. The one list per item left is a shadow model's rank agreement, one number per compared snapshot
(its histogram is drawn from them).

Percentiles are exact, and the same as numpy's default (linear interpolation between the order
statistics at ``(n - 1) * p / 100``): PostgreSQL's ``percentile_cont`` computes them; on SQLite, SQL
numbers the values of each group in order and returns only the two rows around each position, and
``interpolate`` finishes as numpy does. The one approximation is in drawing, not in any number shown:
a busy-GPU timeline of more than ``MOST_STEPS`` changes is drawn as bins whose edges may put an event
within rounding of an edge in the bin beside it (``BinnedBusy``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: the percentiles the report shows or draws (tables: 50, 90, 99; boxes: 5, 25, 50, 75, 95)
PERCENTS = (5, 25, 50, 75, 90, 95, 99)
METRICS = ("wait_s", "jct_s", "bsld")
#: the most groups (policies / model versions) drawn side by side; the tables list every one
MOST_GROUPS = 8
#: the most time bins of the figures over time
MOST_BINS = 24
#: the name of the sum of the stages (the ``latency_ms`` column) among the stage latencies
TOTAL = "total"
#: label of fallbacks decided before any model decided for the cluster
NO_MODEL_YET = "(no model yet)"
NAN = float("nan")


def time_edges_over(
    lo: float | None,
    hi: float | None,
    count: int,
    since: float | None,
    until: float | None,
    most: int = MOST_BINS,
) -> FloatArray:
    """Edges of at most ``most`` equal time bins over the window, or, when it is open, over the span
    ``[lo, hi]`` of ``count`` times (about one bin per five of them)."""
    start = since if since is not None else (lo if lo is not None else 0.0)
    end = until if until is not None else (hi if hi is not None else start)
    if end <= start:
        end = start + 1.0
    n = max(1, min(most, count // 5 if count else 1))
    return np.linspace(start, end, n + 1)


def positions(n: int, p: int) -> tuple[int, int]:
    """The two order statistics (0-based) numpy's linear percentile ``p`` of ``n`` values reads."""
    lo = (n - 1) * p // 100
    return lo, min(lo + 1, n - 1)


def interpolate(ordered: Mapping[int, float], n: int, p: int) -> float:
    """Percentile ``p`` of ``n`` values from the order statistics at ``positions(n, p)``.

    numpy's own formula (``_lerp``: from the lower value below the middle, from the upper above it),
    so the result equals ``np.percentile`` on the same values up to rounding."""
    if n <= 0:
        return NAN
    lo, hi = positions(n, p)
    a, b = ordered[lo], ordered[hi]
    t = (n - 1) * (p / 100.0) - lo
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t


@dataclass(frozen=True)
class Distribution:
    """One population's count, mean, percentiles and maximum (NaN when empty)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float
    p5: float = NAN
    p25: float = NAN
    p75: float = NAN
    p95: float = NAN

    @classmethod
    def of(cls, values: FloatArray) -> Distribution:
        """From values in memory (numpy's percentiles)."""
        if not len(values):
            return cls.empty()
        p5, p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(values, PERCENTS))
        return cls(
            n=len(values),
            mean=float(np.mean(values)),
            p50=p50,
            p90=p90,
            p99=p99,
            max=float(np.max(values)),
            p5=p5,
            p25=p25,
            p75=p75,
            p95=p95,
        )

    @classmethod
    def from_order(cls, n: int, mean: float, most: float, ordered: Mapping[int, float]) -> Distribution:
        """From SQL: the count, mean, maximum and the order statistics ``positions`` names."""
        if n <= 0:
            return cls.empty()
        q = {p: interpolate(ordered, n, p) for p in PERCENTS}
        return cls(n, mean, q[50], q[90], q[99], most, q[5], q[25], q[75], q[95])

    @classmethod
    def empty(cls) -> Distribution:
        return cls(0, NAN, NAN, NAN, NAN, NAN)


@dataclass(frozen=True)
class DecisionCount:
    """Decisions of one policy / model version: snapshots decided, decision rows, jobs started."""

    decided_by: str
    snapshots: int
    rows: int
    placed: int
    fallbacks: int


@dataclass(frozen=True)
class FallbackCount:
    """Snapshots decided by the base policy for one reason, while one model version was in charge.

    A fallback records no model version; it is charged to the model version of the latest earlier
    snapshot (by sequence) the model decided for the cluster, or ``NO_MODEL_YET``."""

    model_version: str
    reason: str
    snapshots: int
    rows: int


@dataclass(frozen=True)
class SnapshotStats:
    """The decided snapshots of the range, counted and grouped (``len``: how many).

    ``decided``: per policy / model version, most snapshots first. ``fallbacks``: per model version in
    charge and reason, most snapshots first. ``latency``: per stage, ``TOTAL`` (the stored sum) first,
    then the stages in the order they first appear, the distribution over snapshots.
    ``latency_bins``: per stage with values, (bins x 2) p50 and p99 per time bin (NaN when empty).
    """

    count: int = 0
    rows: int = 0
    placed: int = 0
    decided: tuple[DecisionCount, ...] = ()
    fallbacks: tuple[FallbackCount, ...] = ()
    model_versions: frozenset[str] = frozenset()
    latency: Mapping[str, Distribution] = field(default_factory=dict)
    latency_bins: Mapping[str, FloatArray] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.count

    @property
    def stages(self) -> list[str]:
        """The stages other than ``TOTAL``, in the pipeline's order."""
        return [s for s in self.latency if s != TOTAL]


@dataclass(frozen=True)
class OutcomeGroup:
    """The finished jobs one policy / model version started (or ``unattributed``)."""

    decided_by: str
    n: int
    first_start: float
    last_start: float
    metrics: Mapping[str, Distribution]


@dataclass(frozen=True)
class OutcomeStats:
    """Finished jobs that started in the range, by who decided to start them.

    ``groups``: largest first, then by name. ``medians``: per metric, the median of the absolute values
    over every job (it picks the unit of the figures). ``over_time``: for the groups the figures draw,
    per metric, the p50 and p90 of the jobs that started in each time bin (``bins x 2``, NaN for an
    empty bin).
    """

    groups: tuple[OutcomeGroup, ...] = ()
    medians: Mapping[str, float] = field(default_factory=dict)
    over_time: Mapping[str, Mapping[str, FloatArray]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(g.n for g in self.groups)

    def __len__(self) -> int:
        return self.count

    @property
    def first_start(self) -> float | None:
        return min((g.first_start for g in self.groups), default=None)

    @property
    def last_start(self) -> float | None:
        return max((g.last_start for g in self.groups), default=None)

    def by_group(self) -> dict[str, Mapping[str, Distribution]]:
        return {g.decided_by: g.metrics for g in self.groups}


@dataclass(frozen=True)
class BusyTimeline:
    """Busy GPUs of finished jobs as a step function: ``busy[i]`` holds from ``times[i]`` to the next."""

    times: FloatArray
    busy: FloatArray
    start: float
    end: float

    @property
    def mean(self) -> float:
        """Time-weighted mean of busy GPUs over [start, end] (NaN for an empty span)."""
        if self.end <= self.start or not len(self.times):
            return NAN
        widths = np.diff(np.append(self.times, self.end))
        return float(np.sum(self.busy * widths) / (self.end - self.start))

    @property
    def peak(self) -> float:
        return float(np.max(self.busy)) if len(self.busy) else 0.0

    @property
    def changes(self) -> int:
        return len(self.times)

    def resample(self, bins: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(edges, time-weighted mean, max) of busy GPUs in ``bins`` equal bins over [start, end].

        Why: a figure 1000 pixels wide cannot show 200,000 steps, and drawing them takes seconds. The
        mean per bin keeps the area (so the mean line still matches), the max keeps the peaks. The
        database computes the same bins for a long timeline (``BinnedBusy``); this is its reference.
        """
        edges = np.linspace(self.start, self.end, bins + 1)
        ext = np.append(self.times, self.end)
        area = np.concatenate([[0.0], np.cumsum(self.busy * np.diff(ext))])
        mean = np.diff(np.interp(edges, ext, area)) / np.diff(edges)
        at_start = self.busy[np.clip(np.searchsorted(self.times, edges[:-1], side="right") - 1, 0, None)]
        peak = at_start.astype(np.float64)
        inside = np.clip(np.searchsorted(edges, self.times, side="right") - 1, 0, bins - 1)
        np.maximum.at(peak, inside, self.busy)
        return edges, mean, peak


@dataclass(frozen=True)
class BinnedBusy:
    """A timeline with too many changes to draw, as the database binned it: per equal bin over
    [start, end], the time-weighted mean and the max of busy GPUs (as ``BusyTimeline.resample``)."""

    edges: FloatArray
    bin_mean: FloatArray
    bin_peak: FloatArray
    start: float
    end: float
    mean: float
    peak: float
    changes: int


@dataclass(frozen=True)
class ShadowSummary:
    """One shadow model version beside the applied orders (``shared.report.shadow``'s docstring).

    ``rho`` and ``top_overlap``: one value per compared snapshot."""

    model_version: str
    applied_by: tuple[tuple[str, int], ...]  # who decided the applied orders, with snapshot counts
    snapshots: int
    compared: int
    rho: FloatArray
    top_overlap: FloatArray
    shadow_top_jobs: int  # finished jobs the shadow put in its top k at least once
    shadow_top_wait: float
    applied_top_jobs: int
    applied_top_wait: float


def finite_or_nan(value: object) -> float:
    """A number from SQL (None, Decimal, int or float) as a float; None as NaN."""
    if value is None:
        return NAN
    out = float(value)  # type: ignore[arg-type]
    return out if math.isfinite(out) else NAN
