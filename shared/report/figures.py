"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes.

Why Agg on ``Figure`` objects and no pyplot: the report is drawn in a worker thread of the query API
and in the CLI; pyplot's global state and backend selection are neither thread-safe nor needed. PNG
(not SVG) keeps the page small when a figure has tens of thousands of points.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from shared.report.data import FloatArray, ModelEventRecord, Outcomes, SnapshotRecord
from shared.report.stats import (
    METRIC_TITLES,
    METRICS,
    TOTAL,
    BusyTimeline,
    FallbackCount,
    binned_percentiles,
    group_order,
    outcome_groups,
    stage_values,
)

DPI = 100
#: the most groups (policies / model versions) drawn side by side; the tables list every one
MOST_GROUPS = 8
#: the most model versions drawn in the registry's timeline (the latest to have an event)
MOST_VERSIONS = 20
#: cluster-clock values above this are epoch seconds (2001-09-09), drawn as UTC dates
EPOCH_FROM = 1e9
_TIME_UNITS = (("h", 3600.0), ("min", 60.0))
#: busy-GPU timelines with more changes than this are drawn as ``STEP_BINS`` bins
MOST_STEPS = 4000
STEP_BINS = 800


@dataclass(frozen=True)
class Plot:
    """One figure of the page: its element id, title, caption and PNG bytes."""

    id: str
    title: str
    caption: str
    png: bytes


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def time_unit(values: FloatArray) -> tuple[str, float]:
    """(unit, divisor) that makes durations readable: the largest unit the median reaches twice."""
    arr = np.abs(values[np.isfinite(values)])
    typical = float(np.median(arr)) if len(arr) else 0.0
    for unit, scale in _TIME_UNITS:
        if typical >= 2.0 * scale:
            return unit, scale
    return "s", 1.0


@dataclass(frozen=True)
class Clock:
    """How cluster-clock times are drawn: UTC dates for epoch seconds, else hours or seconds."""

    epoch: bool
    scale: float
    label: str

    @classmethod
    def of(cls, lo: float, hi: float) -> Clock:
        if lo >= EPOCH_FROM:
            return cls(True, 1.0, "cluster clock (UTC)")
        if hi - lo >= 2 * 3600:
            return cls(False, 3600.0, "cluster clock (h)")
        return cls(False, 1.0, "cluster clock (s)")

    def x(self, t: FloatArray) -> FloatArray:
        if self.epoch:
            return np.asarray((t * 1000.0).astype("int64").astype("datetime64[ms]"))
        return np.asarray(t / self.scale)


def _no_data(ax: object, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")  # type: ignore[attr-defined]


def outcome_boxes(outcomes: Outcomes) -> Plot:
    """Wait, JCT and bounded slowdown per policy / model version: boxes (quartiles, 5-95% whiskers)."""
    groups = outcome_groups(outcomes, MOST_GROUPS)
    names = list(groups)
    fig = _figure(max(9.0, 1.2 * len(names) * 3), 3.8)
    axes = fig.subplots(1, 3)
    for ax, metric in zip(axes, METRICS, strict=True):
        values = getattr(outcomes, metric)
        unit, scale = ("", 1.0) if metric == "bsld" else time_unit(values)
        data = [values[groups[g]] / scale for g in names]
        ax.boxplot(
            data,
            tick_labels=[f"{g}\n(n={len(d)})" for g, d in zip(names, data, strict=True)],
            whis=(5, 95),
            showfliers=False,
            showmeans=True,
            meanprops={"markerfacecolor": "white", "markeredgecolor": "black"},
        )
        ax.set_title(METRIC_TITLES[metric])
        ax.set_ylabel(f"{METRIC_TITLES[metric]} ({unit})" if unit else METRIC_TITLES[metric])
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    return Plot(
        "fig-outcomes",
        "Wait, JCT and bounded slowdown per policy / model version",
        "Finished jobs that started in the range, by who decided to start them. Boxes: quartiles; "
        "whiskers: 5th-95th percentile; triangle: mean.",
        to_png(fig),
    )


def outcomes_over_time(outcomes: Outcomes, edges: FloatArray) -> Plot:
    """Median wait, JCT and bounded slowdown per time bin (by start time), one line per group."""
    clock = Clock.of(float(edges[0]), float(edges[-1]))
    groups = outcome_groups(outcomes, MOST_GROUPS)
    fig = _figure(10.0, 7.5)
    axes = fig.subplots(3, 1, sharex=True)
    for ax, metric in zip(axes, METRICS, strict=True):
        values = getattr(outcomes, metric)
        unit, scale = ("", 1.0) if metric == "bsld" else time_unit(values)
        for group, mask in groups.items():
            centres, p = binned_percentiles(outcomes.start_s[mask], values[mask] / scale, edges, (50, 90))
            (line,) = ax.plot(clock.x(centres), p[:, 0], marker="o", markersize=3, label=group)
            ax.plot(clock.x(centres), p[:, 1], linestyle="--", linewidth=0.9, color=line.get_color())
        ax.set_ylabel(METRIC_TITLES[metric] + (f" ({unit})" if unit else ""))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[-1].set_xlabel(f"job start, {clock.label}")
    return Plot(
        "fig-outcomes-time",
        "Wait, JCT and bounded slowdown over time",
        f"Median (solid) and 90th percentile (dashed) per time bin ({len(edges) - 1} bins over the range) "
        "of the jobs that started in the bin, per policy / model version.",
        to_png(fig),
    )


def busy_gpus(timeline: BusyTimeline, capacity: int | None) -> Plot:
    """Busy GPUs of finished jobs over time, against the cluster's capacity when it is known."""
    clock = Clock.of(timeline.start, timeline.end)
    fig = _figure(10.0, 3.6)
    ax = fig.subplots()
    if len(timeline.times) <= MOST_STEPS:
        xs = np.append(timeline.times, timeline.end)
        ys = np.append(timeline.busy, timeline.busy[-1])
        ax.step(clock.x(xs), ys, where="post", label="busy GPUs (finished jobs)")
        ax.fill_between(clock.x(xs), ys, step="post", alpha=0.2)
        how = ""
    else:
        edges, mean, peak = timeline.resample(STEP_BINS)
        x = clock.x(edges)
        ax.stairs(peak, x, fill=True, alpha=0.25, color="tab:blue", label="busy GPUs, max per bin")
        ax.stairs(mean, x, color="tab:blue", label="busy GPUs, mean per bin")
        how = f" {len(timeline.times):,} changes drawn as {STEP_BINS} bins (mean and max per bin)."
    if capacity is not None:
        ax.axhline(capacity, color="black", linestyle="--", label=f"capacity ({capacity} GPUs)")
        ax.set_ylim(0, max(capacity, timeline.peak) * 1.08)
    ax.axhline(timeline.mean, color="tab:orange", linestyle=":", label=f"mean ({timeline.mean:.1f})")
    ax.set_ylabel("GPUs")
    ax.set_xlabel(clock.label)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    known = "" if capacity is not None else " The cluster's capacity is not known to the store."
    return Plot(
        "fig-utilization",
        "GPU utilization",
        "GPUs held by jobs that have finished (jobs still running have no outcome yet, so the right edge "
        "reads low)." + how + known,
        to_png(fig),
    )


def decision_latency(snapshots: Sequence[SnapshotRecord], stages: Sequence[str], edges: FloatArray) -> Plot:
    """p50 and p99 of each stage's latency per time bin: one small panel per stage, the total first."""
    clock = Clock.of(float(edges[0]), float(edges[-1]))
    names = [TOTAL, *stages]
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig = _figure(4.0 * cols, 2.6 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, squeeze=False)).ravel()
    for ax, stage in zip(axes, names, strict=False):
        times, values = stage_values(snapshots, stage)
        if not len(values):
            _no_data(ax, "no values")
        else:
            centres, p = binned_percentiles(times, values, edges, (50, 99))
            ax.plot(clock.x(centres), p[:, 0], marker="o", markersize=3, label="p50")
            ax.plot(clock.x(centres), p[:, 1], marker="^", markersize=3, linestyle="--", label="p99")
            ax.set_ylim(bottom=0)
        ax.set_title("total (sum of stages)" if stage == TOTAL else stage, fontsize=10)
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=7, labelbottom=True)
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8)
    fig.supxlabel(clock.label, fontsize=9)
    return Plot(
        "fig-latency",
        "Decision latency per stage",
        f"p50 and p99 per time bin ({len(edges) - 1} bins) over the decided snapshots, from the per-stage "
        "latencies stored with each decision (a stage named ..._wait is the time the message queued "
        "before that stage).",
        to_png(fig),
    )


def fallbacks(rows: Sequence[FallbackCount], most_reasons: int = 6) -> Plot:
    """Fallback snapshots per model version in charge, stacked by reason (the most frequent ones)."""
    versions = group_order((r.model_version for r in rows for _ in range(r.snapshots)), None)
    reasons = group_order((r.reason for r in rows for _ in range(r.snapshots)), None)
    shown = reasons[:most_reasons]
    fig = _figure(10.0, max(2.2, 0.55 * len(versions) + 1.6))
    ax = fig.subplots()
    left = np.zeros(len(versions))
    for reason in [*shown, "other"]:
        counts = np.array(
            [
                sum(
                    r.snapshots
                    for r in rows
                    if r.model_version == v
                    and (r.reason == reason or (reason == "other" and r.reason not in shown))
                )
                for v in versions
            ],
            dtype=np.float64,
        )
        if not counts.any():
            continue
        label = reason if len(reason) <= 60 else reason[:57] + "..."
        ax.barh(versions, counts, left=left, label=label)
        left += counts
    ax.invert_yaxis()
    ax.set_xlabel("snapshots decided by the base policy")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return Plot(
        "fig-fallbacks",
        "Fallbacks per model version",
        "Snapshots the base policy decided instead of the model, by the model version in charge and reason.",
        to_png(fig),
    )


EVENT_STYLE = {
    "registered": ("o", "tab:gray"),
    "gate-passed": ("P", "tab:green"),
    "gate-refused": ("X", "tab:red"),
    "promoted": ("^", "tab:blue"),
    "retired": ("v", "black"),
    "rolled-back": ("D", "tab:purple"),
}


def model_events(events: Sequence[ModelEventRecord]) -> Plot:
    """Registry events on a wall-clock axis, one row per model version (the latest ``MOST_VERSIONS``)."""
    versions = list(dict.fromkeys(e.version for e in reversed(events)))[:MOST_VERSIONS][::-1]
    left_out = len(set(e.version for e in events)) - len(versions)
    events = [e for e in events if e.version in versions]
    fig = _figure(10.0, max(2.2, 0.45 * len(versions) + 1.4))
    ax = fig.subplots()
    for kind, (marker, color) in EVENT_STYLE.items():
        chosen = [e for e in events if e.event == kind]
        if chosen:
            xs = np.array([np.datetime64(e.at.replace(tzinfo=None), "ms") for e in chosen])
            ys = [versions.index(e.version) for e in chosen]
            ax.scatter(xs, ys, marker=marker, color=color, s=60, label=kind, zorder=3)
    ax.set_yticks(range(len(versions)), versions)
    ax.set_ylim(len(versions) - 0.5, -0.5)
    ax.set_xlabel("wall clock (UTC)")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return Plot(
        "fig-models",
        "Model versions: registry events",
        "Registrations, gate verdicts, promotions, retirements and rollbacks (wall clock)."
        + (
            f" {left_out} older versions are left out of the figure; the table lists them."
            if left_out
            else ""
        ),
        to_png(fig),
    )
