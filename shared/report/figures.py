"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes.

Why Agg on ``Figure`` objects and no pyplot: the report is drawn in a worker thread of the query API
and in the CLI; pyplot's global state and backend selection are neither thread-safe nor needed. PNG
(not SVG) keeps the page small when a figure has thousands of points.

Why a cache: drawing is most of a report's time (tenths of a second per figure, seconds per page),
and the same figure is drawn again and again: by every client that asks for the same page, and by
each later request while the data behind it has not changed (the registry's events, last week's
range). Each figure function takes only the few numbers it draws (percentiles per bin and group,
box statistics, a step function of at most ``MOST_STEPS`` steps), and ``cached`` keeps the PNG of
the latest ``CACHE_SIZE`` distinct inputs, keyed by a digest of them: an input that differs in any
number is drawn anew, so the cache can never show stale data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any, ParamSpec

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure

from shared.report.aggregates import (
    METRICS,
    TOTAL,
    BinnedBusy,
    BusyTimeline,
    FallbackCount,
    FloatArray,
    OutcomeGroup,
)
from shared.report.data import ModelEventRecord
from shared.report.stats import METRIC_TITLES, group_order

DPI = 100
#: the most model versions drawn in the registry's timeline (the latest to have an event)
MOST_VERSIONS = 20
#: cluster-clock values above this are epoch seconds (2001-09-09), drawn as UTC dates
EPOCH_FROM = 1e9
_TIME_UNITS = (("h", 3600.0), ("min", 60.0))
#: distinct figures whose PNG is kept (a page has at most seven; a PNG is 30-150 KB)
CACHE_SIZE = 64


@dataclass(frozen=True)
class Plot:
    """One figure of the page: its element id, title, caption and PNG bytes."""

    id: str
    title: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class Margins:
    """Fixed space around and between a figure's axes, in inches.

    Why fixed where labels have a known size: matplotlib's constrained layout measures every label
    before placing the axes, which was 40-60% of drawing a figure; figures whose labels do not depend
    on the data (numbers, dates, stage names) get these margins instead. Figures labelled with model
    versions or reasons of any length keep the constrained layout."""

    left: float = 0.85
    right: float = 0.25
    bottom: float = 0.6
    top: float = 0.25
    wspace: float = 0.0
    hspace: float = 0.0


def _figure(
    width: float, height: float, margins: Margins | None = None, rows: int = 1, cols: int = 1
) -> Figure:
    """A figure on the Agg canvas: constrained layout, or ``margins`` for a ``rows`` x ``cols`` grid."""
    if margins is None:
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    else:
        fig = Figure(figsize=(width, height), dpi=DPI)
        m = margins
        axes_w = (width - m.left - m.right - (cols - 1) * m.wspace) / cols
        axes_h = (height - m.bottom - m.top - (rows - 1) * m.hspace) / rows
        fig.subplots_adjust(
            left=m.left / width,
            right=1 - m.right / width,
            bottom=m.bottom / height,
            top=1 - m.top / height,
            wspace=m.wspace / axes_w,
            hspace=m.hspace / axes_h,
        )
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _digest(value: Any, h: Any) -> None:
    """Feed ``value`` to the hash ``h``: numbers, text, arrays, mappings, sequences, dataclasses."""
    if value is None or isinstance(value, bool | int | float | str):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, np.ndarray):
        h.update(f"array:{value.dtype.str}:{value.shape};".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, datetime):
        h.update(f"datetime:{value.isoformat()};".encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(f"{type(value).__qualname__}(".encode())
        for f in dataclasses.fields(value):
            _digest(f.name, h)
            _digest(getattr(value, f.name), h)
        h.update(b")")
    elif isinstance(value, Mapping):
        h.update(b"{")
        for k, v in value.items():
            _digest(k, h)
            _digest(v, h)
        h.update(b"}")
    elif isinstance(value, list | tuple):
        h.update(b"[")
        for v in value:
            _digest(v, h)
        h.update(b"]")
    else:
        raise TypeError(f"cannot digest {type(value).__name__} for the figure cache")


class FigureCache:
    """The PNGs of the latest distinct figure inputs (least recently used dropped), thread-safe."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._plots: OrderedDict[bytes, Plot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Plot | None:
        with self._lock:
            plot = self._plots.get(key)
            if plot is None:
                self.misses += 1
                return None
            self._plots.move_to_end(key)
            self.hits += 1
            return plot

    def put(self, key: bytes, plot: Plot) -> None:
        with self._lock:
            self._plots[key] = plot
            self._plots.move_to_end(key)
            while len(self._plots) > self.size:
                self._plots.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._plots.clear()
            self.hits = self.misses = 0


CACHE = FigureCache()
P = ParamSpec("P")


def cached(draw: Callable[P, Plot]) -> Callable[P, Plot]:
    """``draw`` answered from ``CACHE`` when it was called with equal inputs before."""

    @wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Plot:
        h = hashlib.blake2b(digest_size=20)
        _digest((draw.__module__, draw.__qualname__, args, sorted(kwargs.items())), h)
        key = h.digest()
        plot = CACHE.get(key)
        if plot is None:
            plot = draw(*args, **kwargs)
            CACHE.put(key, plot)
        return plot

    return wrapper


def unit_of_median(typical: float) -> tuple[str, float]:
    """(unit, divisor) that makes durations readable: the largest unit that ``typical``, the median
    of their absolute values, reaches twice."""
    if not np.isfinite(typical):
        typical = 0.0
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


Units = Mapping[str, tuple[str, float]]


def metric_label(metric: str, units: Units) -> str:
    unit = units[metric][0]
    return f"{METRIC_TITLES[metric]} ({unit})" if unit else METRIC_TITLES[metric]


@cached
def outcome_boxes(groups: Sequence[OutcomeGroup], units: Units) -> Plot:
    """Wait, JCT and bounded slowdown per policy / model version: boxes (quartiles, 5-95% whiskers).

    ``groups``: the largest ``MOST_GROUPS``; ``units``: per metric, its unit and divisor."""
    fig = _figure(max(9.0, 1.2 * len(groups) * 3), 3.8)
    axes = fig.subplots(1, 3)
    for ax, metric in zip(axes, METRICS, strict=True):
        scale = units[metric][1]
        stats = []
        for g in groups:
            d = g.metrics[metric]
            stats.append(
                {
                    "label": f"{g.decided_by}\n(n={d.n})",
                    "med": d.p50 / scale,
                    "q1": d.p25 / scale,
                    "q3": d.p75 / scale,
                    "whislo": d.p5 / scale,
                    "whishi": d.p95 / scale,
                    "mean": d.mean / scale,
                    "fliers": [],
                }
            )
        ax.bxp(
            stats,
            showfliers=False,
            showmeans=True,
            meanprops={"markerfacecolor": "white", "markeredgecolor": "black"},
        )
        ax.set_title(METRIC_TITLES[metric])
        ax.set_ylabel(metric_label(metric, units))
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    return Plot(
        "fig-outcomes",
        "Wait, JCT and bounded slowdown per policy / model version",
        "Finished jobs that started in the range, by who decided to start them. Boxes: quartiles; "
        "whiskers: 5th-95th percentile; triangle: mean.",
        to_png(fig),
    )


@cached
def outcomes_over_time(
    over_time: Mapping[str, Mapping[str, FloatArray]], units: Units, edges: FloatArray
) -> Plot:
    """Median and p90 of wait, JCT and bounded slowdown per time bin (by start time), one line per
    group; ``over_time``: per group, per metric, (bins x 2) p50 and p90."""
    clock = Clock.of(float(edges[0]), float(edges[-1]))
    centres = (edges[:-1] + edges[1:]) / 2.0
    fig = _figure(10.0, 7.5, Margins(left=0.9, bottom=0.6, top=0.15, hspace=0.15), rows=3)
    axes = fig.subplots(3, 1, sharex=True)
    for ax, metric in zip(axes, METRICS, strict=True):
        scale = units[metric][1]
        for group, series in over_time.items():
            p = series[metric] / scale
            (line,) = ax.plot(clock.x(centres), p[:, 0], marker="o", markersize=3, label=group)
            ax.plot(clock.x(centres), p[:, 1], linestyle="--", linewidth=0.9, color=line.get_color())
        ax.set_ylabel(metric_label(metric, units))
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


@cached
def busy_gpus(timeline: BusyTimeline | BinnedBusy, capacity: int | None) -> Plot:
    """Busy GPUs of finished jobs over time, against the cluster's capacity when it is known."""
    clock = Clock.of(timeline.start, timeline.end)
    fig = _figure(10.0, 3.6, Margins(left=0.8, bottom=0.6, top=0.15))
    ax = fig.subplots()
    if isinstance(timeline, BusyTimeline):
        xs = np.append(timeline.times, timeline.end)
        ys = np.append(timeline.busy, timeline.busy[-1])
        ax.step(clock.x(xs), ys, where="post", label="busy GPUs (finished jobs)")
        ax.fill_between(clock.x(xs), ys, step="post", alpha=0.2)
        how = ""
    else:
        x = clock.x(timeline.edges)
        bins = len(timeline.edges) - 1
        ax.stairs(
            timeline.bin_peak, x, fill=True, alpha=0.25, color="tab:blue", label="busy GPUs, max per bin"
        )
        ax.stairs(timeline.bin_mean, x, color="tab:blue", label="busy GPUs, mean per bin")
        how = f" {timeline.changes:,} changes drawn as {bins} bins (mean and max per bin)."
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


@cached
def decision_latency(series: Mapping[str, FloatArray | None], edges: FloatArray) -> Plot:
    """p50 and p99 of each stage's latency per time bin: one small panel per stage, the total first.

    ``series``: per stage (``TOTAL`` first), (bins x 2) p50 and p99, or None when it has no values."""
    clock = Clock.of(float(edges[0]), float(edges[-1]))
    centres = (edges[:-1] + edges[1:]) / 2.0
    names = list(series)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    grid = Margins(left=0.6, right=0.2, bottom=0.75, top=0.3, wspace=0.55, hspace=0.75)
    fig = _figure(4.0 * cols, 2.6 * rows, grid, rows, cols)
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, squeeze=False)).ravel()
    for ax, stage in zip(axes, names, strict=False):
        p = series[stage]
        if p is None:
            _no_data(ax, "no values")
        else:
            ax.plot(clock.x(centres), p[:, 0], marker="o", markersize=3, label="p50")
            ax.plot(clock.x(centres), p[:, 1], marker="^", markersize=3, linestyle="--", label="p99")
            ax.set_ylim(bottom=0)
        ax.set_title("total (sum of stages)" if stage == TOTAL else stage, fontsize=10)
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.tick_params(axis="x", labelsize=7, labelbottom=True)
        if clock.epoch:  # a panel is 4 inches wide: few dates, written short
            locator = AutoDateLocator(maxticks=5)  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
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


@cached
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


@cached
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
