"""Named per-window metrics: how to read each one from a WindowMetrics and how to show it.

Why a registry: the table, the JSON report and the plots must agree on which direction is better
(wait: lower; utilization: higher) and on units; keeping that in one place prevents a plot from
calling an improvement a regression.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import FloatArray
from shared.metrics.summary import WindowMetrics

Kind = Literal["time", "ratio", "fraction", "gpu_hours"]


@dataclass(frozen=True)
class MetricSpec:
    """One per-window metric. Values are stored in base units: seconds, plain ratios, fractions."""

    key: str
    title: str  # for plot titles and axis labels
    short: str  # for table headers, where width is scarce
    kind: Kind
    lower_is_better: bool
    extract: Callable[[WindowMetrics], float]


METRICS: dict[str, MetricSpec] = {
    spec.key: spec
    for spec in (
        MetricSpec("wait_mean", "Mean wait time", "Wait", "time", True, lambda m: m.wait_s.mean),
        MetricSpec("wait_p95", "P95 wait time", "P95 wait", "time", True, lambda m: m.wait_s.p95),
        MetricSpec("wait_p99", "P99 wait time", "P99 wait", "time", True, lambda m: m.wait_s.p99),
        MetricSpec("jct_mean", "Mean job completion time", "JCT", "time", True, lambda m: m.jct_s.mean),
        MetricSpec("jct_p95", "P95 job completion time", "P95 JCT", "time", True, lambda m: m.jct_s.p95),
        MetricSpec("bsld_mean", "Mean bounded slowdown", "BSLD", "ratio", True, lambda m: m.bsld.mean),
        MetricSpec("bsld_p95", "P95 bounded slowdown", "P95 BSLD", "ratio", True, lambda m: m.bsld.p95),
        MetricSpec("utilization", "GPU utilization", "GPU util", "fraction", False, lambda m: m.utilization),
        MetricSpec(
            "idle_frac_while_waiting",
            "Idle GPU share while jobs wait",
            "Idle|queued",
            "fraction",
            True,
            lambda m: m.idle_frac_while_waiting,
        ),
        MetricSpec(
            "idle_gpu_hours_while_waiting",
            "Idle GPU-hours while jobs wait",
            "Idle|queued",
            "gpu_hours",
            True,
            lambda m: m.idle_gpu_hours_while_waiting,
        ),
        MetricSpec("makespan", "Makespan", "Makespan", "time", True, lambda m: m.makespan_s),
        MetricSpec("queue_mean", "Mean queue length", "Queue", "ratio", True, lambda m: m.queue_mean),
        MetricSpec(
            "queued_frac",
            "Share of time with a non-empty queue",
            "Queued",
            "fraction",
            True,
            lambda m: m.queued_frac,
        ),
    )
}

DEFAULT_TABLE_METRICS: tuple[str, ...] = (
    "wait_mean",
    "jct_mean",
    "bsld_mean",
    "utilization",
    "idle_frac_while_waiting",
)
DEFAULT_PLOT_METRICS: tuple[str, ...] = ("wait_mean", "jct_mean", "bsld_mean", "utilization")
#: how loaded the windows were, over their own spans (``PolicyComparison.load_table``)
LOAD_METRICS: tuple[str, ...] = ("utilization", "queue_mean", "queued_frac")

_TIME_UNITS: tuple[tuple[str, float], ...] = (("h", 3600.0), ("min", 60.0), ("s", 1.0))


def get_spec(key: str) -> MetricSpec:
    try:
        return METRICS[key]
    except KeyError:
        raise KeyError(f"unknown metric {key!r}; known: {sorted(METRICS)}") from None


def display_unit(spec: MetricSpec, values: npt.ArrayLike) -> tuple[str, float]:
    """(unit label, divisor) that makes ``values`` readable: times in s/min/h, fractions in %.

    Times pick the largest unit in which the typical magnitude is at least 2, so a column of
    hour-long waits reads "3.1 h" rather than "11160 s".
    """
    if spec.kind == "fraction":
        return "%", 0.01
    if spec.kind == "ratio":
        return "", 1.0
    if spec.kind == "gpu_hours":
        return "GPU·h", 1.0
    arr = np.abs(np.asarray(values, dtype=np.float64))
    arr = arr[np.isfinite(arr)]
    typical = float(np.median(arr)) if len(arr) else 0.0
    for unit, scale in _TIME_UNITS:
        if typical >= 2.0 * scale:
            return unit, scale
    return "s", 1.0


def extract(spec: MetricSpec, windows: list[WindowMetrics]) -> FloatArray:
    """Per-window values of one metric, in base units."""
    return np.array([spec.extract(w) for w in windows], dtype=np.float64)
