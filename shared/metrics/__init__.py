"""Scheduling metrics: per-job numbers, window summaries, bootstrap comparisons, tables and plots.

Typical use after a batch of simulations on the same windows::

    windows = make_windows(test_range, size=1000, count=50, seed=0)
    per_policy = {name: [summarize_window(run(name, w), w) for w in windows] for name in policies}
    cmp = PolicyComparison(per_policy, baseline="fcfs")
    rich.print(cmp.table()); cmp.write_json("out/report.json"); cmp.plot("out/")
"""

from shared.metrics.bootstrap import BootstrapCI, PairedDifference, bootstrap_ci, paired_difference
from shared.metrics.per_job import DEFAULT_BSLD_BOUND_S, JobMetrics, bounded_slowdown, job_metrics
from shared.metrics.plots import box_plot, wait_cdf_plot
from shared.metrics.report import PolicyComparison
from shared.metrics.specs import (
    DEFAULT_PLOT_METRICS,
    DEFAULT_TABLE_METRICS,
    LOAD_METRICS,
    METRICS,
    MetricSpec,
    get_spec,
)
from shared.metrics.summary import (
    DistStats,
    JobSelection,
    WindowMetrics,
    selection_index,
    summarize_window,
    window_means,
)
from shared.metrics.timeline import busy_gpu_seconds, idle_gpu_seconds_while_waiting, integrate_steps
from shared.metrics.windows import Window, chronological_split, excluded_in_window, make_windows

__all__ = [
    "DEFAULT_BSLD_BOUND_S",
    "DEFAULT_PLOT_METRICS",
    "DEFAULT_TABLE_METRICS",
    "LOAD_METRICS",
    "METRICS",
    "BootstrapCI",
    "DistStats",
    "JobMetrics",
    "JobSelection",
    "MetricSpec",
    "PairedDifference",
    "PolicyComparison",
    "Window",
    "WindowMetrics",
    "bootstrap_ci",
    "bounded_slowdown",
    "box_plot",
    "busy_gpu_seconds",
    "chronological_split",
    "excluded_in_window",
    "get_spec",
    "idle_gpu_seconds_while_waiting",
    "integrate_steps",
    "job_metrics",
    "make_windows",
    "paired_difference",
    "selection_index",
    "summarize_window",
    "wait_cdf_plot",
    "window_means",
]
