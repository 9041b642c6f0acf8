"""The numbers behind the report's tables and figures: pure functions over ``ReportData``.

Why separate from the drawing: each number the page shows (a percentile, a fallback count, the mean of
busy GPUs) is computed here once, shown in a table and drawn from the same value, and can be checked
by hand in tests without parsing an image.

Percentiles are numpy's default (linear interpolation between order statistics).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from shared.report.data import FloatArray, Outcomes, SnapshotRecord

#: the name of the sum of the stages (the ``latency_ms`` column) among the stage latencies
TOTAL = "total"
#: label of fallbacks decided before any model decided for the cluster
NO_MODEL_YET = "(no model yet)"
METRICS = ("wait_s", "jct_s", "bsld")
METRIC_TITLES = {"wait_s": "wait", "jct_s": "JCT", "bsld": "bounded slowdown"}


def percentile(values: FloatArray | Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), NaN for no values."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if len(arr) else float("nan")


@dataclass(frozen=True)
class Distribution:
    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: FloatArray) -> Distribution:
        if not len(values):
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan)
        return cls(
            n=len(values),
            mean=float(np.mean(values)),
            p50=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            max=float(np.max(values)),
        )


def group_order(labels: Iterable[str], most: int | None = None) -> list[str]:
    """Labels by how often they occur (then by name); with ``most``, the most frequent ``most`` only."""
    counts = Counter(labels)
    ordered = sorted(counts, key=lambda k: (-counts[k], k))
    return ordered if most is None else ordered[:most]


def outcome_groups(outcomes: Outcomes, most: int | None = None) -> dict[str, FloatArray]:
    """Boolean masks of the jobs each policy / model version started, largest group first."""
    labels = np.asarray(outcomes.decided_by, dtype=object)
    return {g: labels == g for g in group_order(outcomes.decided_by, most)}


def outcome_summary(outcomes: Outcomes) -> dict[str, dict[str, Distribution]]:
    """Per policy / model version (largest first), the distribution of wait, JCT and bounded slowdown."""
    out: dict[str, dict[str, Distribution]] = {}
    for group, mask in outcome_groups(outcomes).items():
        out[group] = {m: Distribution.of(getattr(outcomes, m)[mask]) for m in METRICS}
    return out


@dataclass(frozen=True)
class DecisionCount:
    """Decisions of one policy / model version: snapshots decided, decision rows, jobs started."""

    decided_by: str
    snapshots: int
    rows: int
    placed: int
    fallbacks: int


def decision_counts(snapshots: Sequence[SnapshotRecord]) -> list[DecisionCount]:
    """Per policy / model version, most snapshots first."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for s in snapshots:
        a = acc[s.decided_by]
        a[0] += 1
        a[1] += s.rows
        a[2] += s.placed
        a[3] += s.fallback is not None
    rows = [DecisionCount(k, *v) for k, v in acc.items()]
    return sorted(rows, key=lambda r: (-r.snapshots, r.decided_by))


@dataclass(frozen=True)
class FallbackCount:
    """Snapshots decided by the base policy for one reason, while one model version was in charge."""

    model_version: str
    reason: str
    snapshots: int
    rows: int


def model_in_charge(snapshots: Sequence[SnapshotRecord]) -> list[str]:
    """For each snapshot (in sequence order), the model version in charge when it was decided.

    A fallback decision records no model version (the base policy decided); it is charged to the model
    version of the latest earlier decision the model made for the cluster, or ``NO_MODEL_YET``.
    """
    current = NO_MODEL_YET
    out = []
    for s in snapshots:
        if s.model_version is not None:
            current = s.model_version
        out.append(current)
    return out


def fallback_counts(snapshots: Sequence[SnapshotRecord]) -> list[FallbackCount]:
    """Fallbacks per model version in charge and reason, most snapshots first."""
    acc: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for s, version in zip(snapshots, model_in_charge(snapshots), strict=True):
        if s.fallback is None:
            continue
        a = acc[(version, s.fallback)]
        a[0] += 1
        a[1] += s.rows
    rows = [FallbackCount(v, r, n, rows) for (v, r), (n, rows) in acc.items()]
    return sorted(rows, key=lambda f: (-f.snapshots, f.model_version, f.reason))


def stage_names(snapshots: Sequence[SnapshotRecord]) -> list[str]:
    """Stages in the order they first appear (the pipeline's order: each stage appends its own)."""
    seen: dict[str, None] = {}
    for s in snapshots:
        for k in s.latencies_ms:
            seen.setdefault(k, None)
    return list(seen)


def stage_values(snapshots: Sequence[SnapshotRecord], stage: str) -> tuple[FloatArray, FloatArray]:
    """(snapshot times, latencies in ms) of one stage, or of ``TOTAL`` (the stored sum)."""
    times, values = [], []
    for s in snapshots:
        v = s.latency_ms if stage == TOTAL else s.latencies_ms.get(stage)
        if v is not None:
            times.append(s.snapshot_time)
            values.append(v)
    return np.asarray(times, dtype=np.float64), np.asarray(values, dtype=np.float64)


def latency_summary(snapshots: Sequence[SnapshotRecord]) -> dict[str, Distribution]:
    """Per stage (total first), the distribution of its latency over snapshots."""
    return {
        stage: Distribution.of(stage_values(snapshots, stage)[1])
        for stage in [TOTAL, *stage_names(snapshots)]
    }


def time_edges(times: FloatArray, since: float | None, until: float | None, most: int = 24) -> FloatArray:
    """Edges of at most ``most`` equal time bins over the window (or over the times when open)."""
    lo = since if since is not None else (float(np.min(times)) if len(times) else 0.0)
    hi = until if until is not None else (float(np.max(times)) if len(times) else lo)
    if hi <= lo:
        hi = lo + 1.0
    n = max(1, min(most, len(times) // 5 if len(times) else 1))
    return np.linspace(lo, hi, n + 1)


def binned_percentiles(
    times: FloatArray, values: FloatArray, edges: FloatArray, qs: Sequence[float]
) -> tuple[FloatArray, FloatArray]:
    """(bin centres, percentiles per bin and ``q``; NaN for empty bins). The last bin is closed."""
    idx = np.clip(np.searchsorted(edges, times, side="right") - 1, 0, len(edges) - 2)
    out = np.full((len(edges) - 1, len(qs)), np.nan)
    for b in range(len(edges) - 1):
        sel = values[idx == b]
        if len(sel):
            out[b] = np.percentile(sel, list(qs))
    return (edges[:-1] + edges[1:]) / 2.0, out


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
            return float("nan")
        widths = np.diff(np.append(self.times, self.end))
        return float(np.sum(self.busy * widths) / (self.end - self.start))

    @property
    def peak(self) -> float:
        return float(np.max(self.busy)) if len(self.busy) else 0.0

    def resample(self, bins: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(edges, time-weighted mean, max) of busy GPUs in ``bins`` equal bins over [start, end].

        Why: a figure 1000 pixels wide cannot show 200,000 steps, and drawing them takes seconds. The
        mean per bin keeps the area (so the mean line still matches), the max keeps the peaks.
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


def busy_timeline(running: Outcomes, since: float | None, until: float | None) -> BusyTimeline | None:
    """GPUs held by finished jobs over time, cut to the window; None when no job ran in it."""
    if not len(running):
        return None
    lo = since if since is not None else float(np.min(running.start_s))
    hi = until if until is not None else float(np.max(running.end_s))
    start = np.clip(running.start_s, lo, hi)
    end = np.clip(running.end_s, lo, hi)
    keep = end > start
    if not np.any(keep) or hi <= lo:
        return None
    times = np.concatenate([start[keep], end[keep], [lo]])
    deltas = np.concatenate([running.gpus[keep], -running.gpus[keep], [0.0]])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    uniq, first = np.unique(times, return_index=True)
    level = np.cumsum(deltas)
    # the level after all changes at one instant: the last cumulative value of each distinct time
    last = np.append(first[1:], len(times)) - 1
    busy = level[last]
    inside = uniq < hi
    return BusyTimeline(uniq[inside], busy[inside], lo, hi)
