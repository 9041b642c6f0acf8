"""PNG figures in the style of the RLTune paper (Figs. 12/14/15): per-window box plots per policy
and a per-job CDF of wait time.

Why no pyplot: figures are built with ``matplotlib.figure.Figure`` and rendered by the Agg canvas
directly, so plotting works on headless evaluation nodes and never touches the global pyplot
state or backend of a caller (a notebook, a test run, another thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from shared.metrics.specs import MetricSpec, display_unit

DPI = 120


def _new_figure(n_policies: int) -> Figure:
    width = max(6.0, 1.1 * n_policies + 2.5)
    fig = Figure(figsize=(width, 4.8), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI)
    return path


def box_plot(
    values: Mapping[str, npt.ArrayLike],
    spec: MetricSpec,
    path: str | Path,
    *,
    baseline: str | None = None,
    subtitle: str = "",
) -> Path:
    """One box per policy over its per-window values of ``spec``; the triangle marks the mean.

    NaN windows are dropped per policy (a box with no data is drawn empty and named so). The
    baseline policy's median is drawn as a dashed reference line so that gains read at a glance.
    """
    names = list(values)
    arrays = [np.asarray(values[p], dtype=np.float64) for p in names]
    unit, scale = display_unit(spec, np.concatenate(arrays) if arrays else np.zeros(0))
    data = [a[~np.isnan(a)] / scale for a in arrays]
    labels = [p if len(d) else f"{p}\n(no data)" for p, d in zip(names, data, strict=True)]

    fig = _new_figure(len(names))
    ax = fig.add_subplot()
    ax.boxplot(data, tick_labels=labels, showmeans=True, meanprops={"markerfacecolor": "white"})
    if baseline is not None and baseline in values:
        base = data[names.index(baseline)]
        if len(base):
            ax.axhline(float(np.median(base)), ls="--", lw=1, color="grey", label=f"{baseline} median")
            ax.legend(loc="best", fontsize="small")
    n_windows = max((len(a) for a in arrays), default=0)
    better = "lower is better" if spec.lower_is_better else "higher is better"
    details = " · ".join(part for part in (subtitle, f"{n_windows} windows", better) if part)
    ax.set_title(f"{spec.title} per evaluation window\n{details}", fontsize="medium")
    ax.set_xlabel("Scheduling policy")
    ax.set_ylabel(f"{spec.title} ({unit})" if unit else spec.title)
    ax.grid(axis="y", alpha=0.3)
    if len(names) > 4 or max((len(p) for p in names), default=0) > 12:
        ax.tick_params(axis="x", labelrotation=20)
    return _save(fig, Path(path))


def wait_cdf_plot(
    waits: Mapping[str, npt.ArrayLike], path: str | Path, *, subtitle: str = "", symlog: bool = True
) -> Path:
    """Empirical CDF of per-job wait time, one line per policy.

    Jobs that never started (NaN) count in the denominator but never in the numerator, so the
    curve of a policy that starves jobs levels off below 1 instead of looking better. The x axis
    is symmetric-log by default because waits span zero to days.
    """
    fig = _new_figure(len(waits))
    ax = fig.add_subplot()
    for name, raw in waits.items():
        arr = np.asarray(raw, dtype=np.float64)
        started = np.sort(arr[~np.isnan(arr)])
        n_total = len(arr)
        if n_total == 0:
            continue
        y = np.arange(1, len(started) + 1) / n_total
        n_missing = n_total - len(started)
        label = f"{name} ({n_missing} never started)" if n_missing else name
        ax.step(np.concatenate([[0.0], started]), np.concatenate([[0.0], y]), where="post", label=label)
    if symlog:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_ylim(0.0, 1.02)
    title = "CDF of per-job wait time (never-started jobs never reach the curve)"
    ax.set_title(f"{title}\n{subtitle}" if subtitle else title, fontsize="medium")
    ax.set_xlabel("Wait time (s, symlog scale)" if symlog else "Wait time (s)")
    ax.set_ylabel("Fraction of jobs")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    return _save(fig, Path(path))
