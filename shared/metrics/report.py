"""Compare scheduling policies over the same evaluation windows: table, JSON and plots.

Why one builder for all three outputs: the numbers in the console table, the JSON that goes into
the results archive and the figures in a write-up must come from the same bootstrap runs with the
same seed; computing them in one object (and caching each interval) guarantees that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.table import Table
from rich.text import Text

from shared.domain.jobs import FloatArray
from shared.metrics.bootstrap import (
    DEFAULT_CI,
    DEFAULT_N_BOOT,
    BootstrapCI,
    PairedDifference,
    bootstrap_ci,
    paired_difference,
)
from shared.metrics.plots import box_plot, wait_cdf_plot
from shared.metrics.specs import (
    DEFAULT_PLOT_METRICS,
    DEFAULT_TABLE_METRICS,
    LOAD_METRICS,
    MetricSpec,
    display_unit,
    extract,
    get_spec,
)
from shared.metrics.summary import WindowMetrics


def _json_clean(obj: Any) -> Any:
    """Replace NaN/inf by None recursively, so the output is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_clean(v) for v in obj]
    return obj


def _safe_filename(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


class PolicyComparison:
    """Per-window metrics of several policies on the same windows, and what to make of them.

    ``windows[policy][k]`` must describe the same window ``k`` for every policy; when windows carry
    labels (``summarize_window`` sets them from a ``Window``), mismatches are rejected, since an
    unpaired comparison would silently compare different workloads. ``baseline`` (default: the
    first policy) is the reference for the relative columns.

    ``baselines`` names the policies a careful admin could run instead (every non-clairvoyant
    base policy, the predictor-based ones included): per metric, the best of them by its mean
    over the windows is "the best baseline" (``best_baseline``), and ``vs_best`` compares any
    other policy with it, paired, so a learned policy is judged against the strongest
    alternative and not only against the one it was trained over.
    """

    def __init__(
        self,
        windows: Mapping[str, Sequence[WindowMetrics]],
        *,
        baseline: str | None = None,
        metrics: Sequence[str] = DEFAULT_TABLE_METRICS,
        n_boot: int = DEFAULT_N_BOOT,
        ci: float = DEFAULT_CI,
        seed: int = 0,
        title: str = "Policy comparison",
        baselines: Sequence[str] = (),
    ) -> None:
        if not windows:
            raise ValueError("PolicyComparison needs at least one policy")
        self.windows: dict[str, list[WindowMetrics]] = {p: list(w) for p, w in windows.items()}
        counts = {p: len(w) for p, w in self.windows.items()}
        if min(counts.values()) == 0:
            raise ValueError(f"every policy needs at least one window, got {counts}")
        if len(set(counts.values())) > 1:
            raise ValueError(f"policies must be evaluated on the same windows, got counts {counts}")
        self._check_labels()
        self.baseline = baseline if baseline is not None else next(iter(self.windows))
        if self.baseline not in self.windows:
            raise KeyError(f"baseline {self.baseline!r} is not one of {self.policies}")
        self.specs: list[MetricSpec] = [get_spec(k) for k in metrics]
        self.n_boot = n_boot
        self.ci = ci
        self.seed = seed
        self.title = title
        unknown = [b for b in baselines if b not in self.windows]
        if unknown:
            raise KeyError(f"baselines {unknown} are not among {self.policies}")
        self.baselines: list[str] = list(baselines)
        self._ci_cache: dict[tuple[str, str], BootstrapCI] = {}
        self._diff_cache: dict[tuple[str, str, str], PairedDifference] = {}

    def _check_labels(self) -> None:
        reference_policy, reference = next(iter(self.windows.items()))
        ref_labels = [w.label for w in reference]
        for policy, wins in self.windows.items():
            for k, (mine, ref) in enumerate(zip((w.label for w in wins), ref_labels, strict=True)):
                if mine and ref and mine != ref:
                    raise ValueError(
                        f"window {k} is {mine!r} for {policy!r} but {ref!r} for {reference_policy!r}"
                    )

    @property
    def policies(self) -> list[str]:
        return list(self.windows)

    @property
    def n_windows(self) -> int:
        return len(next(iter(self.windows.values())))

    def values(self, metric: str) -> dict[str, FloatArray]:
        """Per-window values of ``metric`` for each policy, in base units."""
        spec = get_spec(metric)
        return {p: extract(spec, w) for p, w in self.windows.items()}

    def summary(self, metric: str, policy: str) -> BootstrapCI:
        """Mean over windows with its bootstrap interval."""
        key = (metric, policy)
        if key not in self._ci_cache:
            vals = extract(get_spec(metric), self.windows[policy])
            if np.isnan(vals).all():
                self._ci_cache[key] = BootstrapCI.no_data(self.ci, len(vals))
            else:
                self._ci_cache[key] = bootstrap_ci(vals, self.n_boot, self.ci, self.seed)
        return self._ci_cache[key]

    def vs_baseline(self, metric: str, policy: str) -> PairedDifference | None:
        """Paired comparison of ``policy`` against the baseline (None for the baseline itself)."""
        if policy == self.baseline:
            return None
        return self.paired(metric, policy, self.baseline)

    def paired(self, metric: str, policy: str, reference: str) -> PairedDifference:
        """Paired comparison of ``policy`` against ``reference`` over the windows (cached)."""
        key = (metric, policy, reference)
        if key not in self._diff_cache:
            spec = get_spec(metric)
            a = extract(spec, self.windows[policy])
            b = extract(spec, self.windows[reference])
            if (np.isnan(a) | np.isnan(b)).all():
                self._diff_cache[key] = PairedDifference.no_data(spec.lower_is_better, self.ci, len(a))
            else:
                self._diff_cache[key] = paired_difference(
                    a, b, lower_is_better=spec.lower_is_better, n_boot=self.n_boot, ci=self.ci, seed=self.seed
                )
        return self._diff_cache[key]

    def best_baseline(self, metric: str) -> str | None:
        """The baseline (of ``baselines``) with the best mean of ``metric`` over the windows; ties
        go to the one listed first; None without baselines or data."""
        spec = get_spec(metric)
        best: tuple[float, str] | None = None
        for name in self.baselines:
            mean = self.summary(metric, name).mean
            if math.isnan(mean):
                continue
            score = mean if spec.lower_is_better else -mean
            if best is None or score < best[0]:
                best = (score, name)
        return None if best is None else best[1]

    def vs_best(self, metric: str, policy: str) -> PairedDifference | None:
        """Paired comparison of ``policy`` against the best baseline of ``metric`` (None when
        there is none, or ``policy`` is it)."""
        best = self.best_baseline(metric)
        if best is None or best == policy:
            return None
        return self.paired(metric, policy, best)

    def no_wait_share(self, policy: str) -> float:
        """Share of the windows in which no job waited under ``policy`` (every job started on
        arrival): there, no order could have done better, so a gain can only come from the
        other windows. Reported beside every comparison (issue 19, item 4)."""
        waited = [w.wait_s.mean > 0 or w.n_unstarted > 0 for w in self.windows[policy]]
        return 1.0 - float(np.mean(waited))

    def _totals(self, policy: str) -> dict[str, int]:
        wins = self.windows[policy]
        return {
            "n_jobs": sum(w.n_jobs for w in wins),
            "n_unstarted": sum(w.n_unstarted for w in wins),
            "n_unfinished": sum(w.n_unfinished for w in wins),
            "excluded": sum(w.excluded for w in wins),
        }

    def table(self, *, compact: bool = False) -> Table:
        """Rich table: one row per policy; per metric the mean [CI] and the gain vs the baseline.

        Gains are positive when the policy is better than the baseline, whatever the metric's
        direction; they are green (red) when the whole interval lies above (below) zero. The full
        layout gives each gain its own column and needs about 195 characters for the default five
        metrics; ``compact=True`` stacks the gain under the value and fits in about 115.
        """
        pct = round(self.ci * 100)
        table = Table(
            title=self.title,
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            caption=(
                f"mean over {self.n_windows} windows [{pct}% bootstrap CI, {self.n_boot} resamples]; "
                f"{'lines 3-4' if compact else f'vs {self.baseline}'} = relative improvement over "
                f"{self.baseline}, positive = better; ↓/↑: lower/higher is better; no wait: share "
                "of windows in which no job waited"
            ),
        )
        table.add_column("Policy", style="bold")
        units: dict[str, tuple[str, float]] = {}
        for spec in self.specs:
            all_vals = np.concatenate(list(self.values(spec.key).values()))
            unit, scale = display_unit(spec, all_vals)
            units[spec.key] = (unit, scale)
            arrow = "↓" if spec.lower_is_better else "↑"
            # Two-line headers: rich sizes columns by their widest line, header included.
            header = f"{spec.short} {arrow}\n({unit})" if unit else f"{spec.short} {arrow}"
            table.add_column(header, justify="right")
            if not compact:
                table.add_column(f"vs\n{self.baseline}", justify="right")
        if not compact:
            table.add_column("No-wait\nwindows", justify="right")
        table.add_column("Unfinished\njobs", justify="right")
        table.add_column("Excluded\njobs", justify="right")

        for policy in self.policies:
            no_wait = f"{self.no_wait_share(policy):.0%}"
            name = Text(policy, style="bold")
            if compact:  # under the name, so that the table keeps its width
                name.append(f"\nno wait {no_wait}", style="dim")
            cells: list[str | Text] = [name]
            for spec in self.specs:
                value = self._value_cell(self.summary(spec.key, policy), *units[spec.key])
                gain = self._gain_cell(self.vs_baseline(spec.key, policy))
                if compact:
                    cells.append(Text("\n").join([value, gain]))
                else:
                    cells.extend([value, gain])
            totals = self._totals(policy)
            if not compact:
                cells.append(no_wait)
            unfinished = f"{totals['n_unfinished']} / {totals['n_jobs']}"
            cells.append(Text(unfinished, style="bold red" if totals["n_unfinished"] else ""))
            cells.append(str(totals["excluded"]))
            table.add_row(*cells)
        return table

    def best_table(self, policies: Sequence[str]) -> Table | None:
        """``policies`` (e.g. the learned rows) against the best baseline of each metric: its
        name, and each policy's relative gain [CI] over it, paired; None without baselines."""
        if not self.baselines:
            return None
        pct = round(self.ci * 100)
        table = Table(
            title="Against the best baseline of each metric",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            caption=f"best of {', '.join(self.baselines)} by the mean over {self.n_windows} windows; "
            f"relative improvement over it [{pct}% paired bootstrap CI], positive = better",
        )
        table.add_column("Policy", style="bold")
        for spec in self.specs:
            best = self.best_baseline(spec.key)
            table.add_column(f"{spec.short}\nvs {best or 'n/a'}", justify="right")
        for policy in policies:
            table.add_row(policy, *[self._gain_cell(self.vs_best(spec.key, policy)) for spec in self.specs])
        return table

    def load_table(self, offered: Sequence[float] | None = None) -> Table:
        """How loaded the windows were: per policy the mean [CI] over windows of GPU utilization,
        mean queue length and share of time with a non-empty queue, each over the window's own
        span (first to last arrival; ``summarize_window``). A queue that is rarely empty says the
        cluster was loaded whatever the utilization (fragmentation, GPU types); one that is always
        empty, that no policy could do much.

        ``offered``, one value per window, is the offered load over each window's span (the
        utilization if every job started on arrival, ``shared.domain.load.load_over``): shown as a
        first row under utilization, so that the two read side by side. Below saturation the
        policies' utilization follows it; where they fall short of it, jobs queue."""
        pct = round(self.ci * 100)
        table = Table(
            title="Load over each window's span (first to last arrival)",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            caption=f"mean over {self.n_windows} windows [{pct}% bootstrap CI]; queue: jobs waiting, "
            "the window's or not"
            + ("; offered: the utilization if every job started on arrival" if offered is not None else ""),
        )
        table.add_column("Policy", style="bold")
        specs = [get_spec(k) for k in LOAD_METRICS]
        headers = {
            "utilization": "GPU utilization\n(%)",
            "queue_mean": "Mean queue\n(jobs)",
            "queued_frac": "Queue non-empty\n(% of time)",
        }
        for spec in specs:
            table.add_column(headers.get(spec.key, spec.title), justify="right")
        if offered is not None:
            if len(offered) != self.n_windows:
                raise ValueError(f"{len(offered)} offered loads for {self.n_windows} windows")
            ci = bootstrap_ci(np.asarray(offered, dtype=np.float64), self.n_boot, self.ci, self.seed)
            dash = Text("-", style="dim")
            cells: list[str | Text] = [Text("offered load", style="italic")]
            cells += [self._value_cell(ci, "%", 0.01) if s.key == "utilization" else dash for s in specs]
            table.add_row(*cells)
        for policy in self.policies:
            cells = [policy]
            for spec in specs:
                unit, scale = display_unit(spec, extract(spec, self.windows[policy]))
                cells.append(self._value_cell(self.summary(spec.key, policy), unit, scale))
            table.add_row(*cells)
        return table

    @staticmethod
    def _value_cell(s: BootstrapCI, unit: str, scale: float) -> Text:
        """Mean on the first line, its interval dimmed on the second (keeps columns narrow)."""
        if s.n == 0:
            return Text("n/a", style="dim")
        fmt = ".1f" if unit == "%" else ".3g"
        text = Text(f"{s.mean / scale:{fmt}}\n")
        text.append(f"[{s.low / scale:{fmt}}, {s.high / scale:{fmt}}]", style="dim")
        return text

    @staticmethod
    def _gain_cell(diff: PairedDifference | None) -> Text:
        if diff is None:
            return Text("baseline", style="dim")
        if math.isnan(diff.rel_improvement):
            return Text("n/a", style="dim")
        style = "green" if diff.rel_low > 0 else "red" if diff.rel_high < 0 else ""
        text = Text(f"{diff.rel_improvement:+.1%}\n", style=style)
        # the interval drops the % signs (the line above carries the unit) to keep the column narrow
        text.append(f"[{100 * diff.rel_low:+.1f}, {100 * diff.rel_high:+.1f}]", style="dim")
        return text

    def to_dict(self) -> dict[str, Any]:
        """Everything behind the table, plus every window's summary, as strict-JSON-ready data."""
        policies: dict[str, Any] = {}
        for policy in self.policies:
            metrics: dict[str, Any] = {}
            for spec in self.specs:
                diff = self.vs_baseline(spec.key, policy)
                metrics[spec.key] = {
                    **self.summary(spec.key, policy).to_dict(),
                    "values": extract(spec, self.windows[policy]).tolist(),
                    "vs_baseline": diff.to_dict() if diff is not None else None,
                }
                best = self.vs_best(spec.key, policy)
                if best is not None:
                    metrics[spec.key]["vs_best_baseline"] = best.to_dict()
            policies[policy] = {
                "totals": self._totals(policy),
                "metrics": metrics,
                "load": {k: self.summary(k, policy).to_dict() for k in LOAD_METRICS},
                "no_wait_share": self.no_wait_share(policy),
                "windows": [w.to_json_dict() for w in self.windows[policy]],
            }
        out = {
            "title": self.title,
            "baseline": self.baseline,
            "baselines": self.baselines,
            "best_baseline": {s.key: self.best_baseline(s.key) for s in self.specs},
            "n_windows": self.n_windows,
            "window_labels": [w.label for w in self.windows[self.baseline]],
            "ci": self.ci,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "metrics": {
                s.key: {"title": s.title, "kind": s.kind, "lower_is_better": s.lower_is_better}
                for s in self.specs
            },
            "policies": policies,
        }
        cleaned: dict[str, Any] = _json_clean(out)
        return cleaned

    def write_json(self, path: str | Path) -> Path:
        """Write ``to_dict()`` as indented strict JSON; returns the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")
        return target

    def plot(
        self,
        out_dir: str | Path,
        *,
        prefix: str = "",
        metrics: Sequence[str] = DEFAULT_PLOT_METRICS,
        cdf: bool = True,
    ) -> list[Path]:
        """Write one box-plot PNG per metric and (if ``cdf``) a wait-time CDF; returns the paths.

        Files are ``<prefix>box_<metric>.png`` and ``<prefix>cdf_wait.png`` in ``out_dir``. The CDF
        uses the per-job waits kept in each WindowMetrics; summaries read back from JSON have none,
        and then the CDF is skipped rather than drawn empty.
        """
        directory = Path(out_dir)
        stem = _safe_filename(prefix)
        subtitle = self.title
        paths: list[Path] = []
        for key in metrics:
            spec = get_spec(key)
            paths.append(
                box_plot(
                    self.values(key),
                    spec,
                    directory / f"{stem}box_{key}.png",
                    baseline=self.baseline,
                    subtitle=subtitle,
                )
            )
        if cdf:
            waits = {
                p: np.concatenate([np.asarray(w.job_waits_s, dtype=np.float64) for w in wins])
                for p, wins in self.windows.items()
            }
            if any(len(v) for v in waits.values()):
                paths.append(wait_cdf_plot(waits, directory / f"{stem}cdf_wait.png", subtitle=subtitle))
        return paths
