"""The report's numbers computed in numpy from records in memory: the reference the SQL is held to.

The report reads aggregates from the database (``shared.report.sql``); these functions are how the
report used to compute the same numbers from every snapshot and job in memory (numpy's percentiles,
the busy-GPU step function), kept here so tests can check, on any history, that the database gives
the same numbers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.report.aggregates import (
    NO_MODEL_YET,
    TOTAL,
    BusyTimeline,
    DecisionCount,
    Distribution,
    FallbackCount,
    FloatArray,
    ShadowSummary,
    time_edges_over,
)
from shared.report.data import decided_by
from shared.report.shadow import spearman
from shared.report.sql import TOP_K


@dataclass(frozen=True)
class SnapshotRecord:
    """One decided snapshot (the decision for it is one row per job in ``decisions``)."""

    correlation_id: str
    snapshot_time: float
    sequence: int
    policy: str
    model_version: str | None
    fallback: str | None
    latencies_ms: dict[str, float]
    latency_ms: float | None
    rows: int
    placed: int

    @property
    def decided_by(self) -> str:
        return decided_by(self.policy, self.model_version)


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
    lo = float(np.min(times)) if len(times) else None
    hi = float(np.max(times)) if len(times) else None
    return time_edges_over(lo, hi, len(times), since, until, most)


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
class Jobs:
    """Finished jobs in memory as parallel arrays: the input of the reference ``busy_timeline``."""

    start_s: FloatArray
    end_s: FloatArray
    gpus: FloatArray

    def __len__(self) -> int:
        return len(self.start_s)


def busy_timeline(running: Jobs, since: float | None, until: float | None) -> BusyTimeline | None:
    """GPUs held by finished jobs over time, cut to the window; None when no job ran in it.

    The reference in numpy: the report reads the same step function from the database
    (``shared.report.sql.busy_timeline``), and the tests hold the two to each other."""
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


@dataclass(frozen=True)
class ShadowSnapshot:
    """One snapshot as a shadow model ranked it, beside what was applied (arrays in shadow rank order).

    ``applied_rank`` is NaN for a job the applied decision does not rank (no decision stored for the
    snapshot: its vector was stale); ``wait_s`` is NaN for a job with no outcome yet.
    """

    model_version: str
    correlation_id: str
    snapshot_time: float
    applied_by: str
    job_ids: tuple[str, ...]
    shadow_rank: FloatArray
    applied_rank: FloatArray
    wait_s: FloatArray


def shadow_summaries(records: Sequence[ShadowSnapshot], k: int = TOP_K) -> list[ShadowSummary]:
    """One summary per shadow model version, by name."""
    by_version: dict[str, list[ShadowSnapshot]] = {}
    for r in records:
        by_version.setdefault(r.model_version, []).append(r)
    out = []
    for version in sorted(by_version):
        snaps = by_version[version]
        rhos: list[float] = []
        overlaps: list[float] = []
        shadow_top: dict[str, float] = {}
        applied_top: dict[str, float] = {}
        for s in snaps:
            both = np.isfinite(s.applied_rank)
            n = int(both.sum())
            if n < 2:
                continue
            ids = [j for j, keep in zip(s.job_ids, both, strict=True) if keep]
            applied = np.argsort(np.argsort(s.applied_rank[both], kind="stable"), kind="stable")
            shadow = np.argsort(np.argsort(s.shadow_rank[both], kind="stable"), kind="stable")
            waits = s.wait_s[both]
            rhos.append(spearman(s.applied_rank[both], s.shadow_rank[both]))
            top = min(k, n)
            overlaps.append(float(np.sum((applied < top) & (shadow < top))) / top)
            for i, job in enumerate(ids):
                if np.isfinite(waits[i]):
                    if shadow[i] < k:
                        shadow_top[job] = float(waits[i])
                    if applied[i] < k:
                        applied_top[job] = float(waits[i])
        applied_by = Counter(s.applied_by for s in snaps)
        out.append(
            ShadowSummary(
                model_version=version,
                applied_by=tuple(sorted(applied_by.items(), key=lambda kv: (-kv[1], kv[0]))),
                snapshots=len(snaps),
                compared=len(rhos),
                rho=np.array(rhos, dtype=np.float64),
                top_overlap=np.array(overlaps, dtype=np.float64),
                shadow_top_jobs=len(shadow_top),
                shadow_top_wait=float(np.mean(list(shadow_top.values()))) if shadow_top else float("nan"),
                applied_top_jobs=len(applied_top),
                applied_top_wait=float(np.mean(list(applied_top.values()))) if applied_top else float("nan"),
            )
        )
    return out
