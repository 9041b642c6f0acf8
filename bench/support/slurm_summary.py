"""The repeated Slurm experiment's figures: the makespan lower bound, mean and spread per arm over
repetitions, paired changes against the multifactor arms, the table and the figure.

Spread: the minimum and maximum over repetitions, and a 95% confidence interval of the mean from
Student's t with n - 1 degrees of freedom (with 3 repetitions it is wide: t = 4.30). Paired changes
compare two arms on the same repetition (the same arrival draw), then summarize those changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: the arms, in the order they run within a repetition and appear in tables
ARMS: dict[str, str] = {
    "slurm": "Slurm multifactor (equal weights)",
    "slurm-tuned": "Slurm multifactor (tuned)",
    "hylo": "Hylo",
}
#: metric key -> (label, format)
METRICS: dict[str, tuple[str, str]] = {
    "mean_wait_s": ("mean wait (s)", "{:.1f}"),
    "makespan_s": ("makespan (s)", "{:.0f}"),
    "gpu_utilization": ("GPU utilization", "{:.3f}"),
    "makespan_gap_to_bound_pct": ("gap to makespan lower bound (%)", "{:.1f}"),
    "makespan_lower_bound_s": ("makespan lower bound (s)", "{:.0f}"),
    "median_wait_s": ("median wait (s)", "{:.1f}"),
    "p95_wait_s": ("p95 wait (s)", "{:.1f}"),
    "mean_jct_s": ("mean JCT (s)", "{:.1f}"),
    "idle_gpu_s_while_fitting_job_waits": ("idle GPU-s while a fitting job waits", "{:.0f}"),
    "time_to_priority_p50_s": ("sbatch -> Hylo priority p50 (s)", "{:.2f}"),
    "time_to_priority_p99_s": ("sbatch -> Hylo priority p99 (s)", "{:.2f}"),
}
#: the metrics compared arm against arm, repetition by repetition (relative change, %)
PAIRED = ("mean_wait_s", "makespan_s", "gpu_utilization", "mean_jct_s")


def makespan_lower_bound(jobs: Sequence[Mapping[str, Any]], gpus_of_type: Mapping[str, int]) -> float:
    """A lower bound on the makespan (from the first submission) no schedule can beat.

    The largest of: each job's submission plus its runtime; and, per GPU type, for every job of
    that type, its submission plus the GPU-seconds of the jobs of that type submitted no earlier,
    spread over all GPUs of that type (those jobs cannot start before it arrives). Runtimes are the
    jobs' sleeps; gangs (a 4-GPU job needs a whole P100 node) and Slurm's whole seconds are ignored,
    so the bound is optimistic.
    """
    t0 = min(float(j["submit"]) for j in jobs)
    bound = max(float(j["submit"]) + float(j["runtime_s"]) for j in jobs) - t0
    for gpu_type, capacity in gpus_of_type.items():
        mine = sorted((j for j in jobs if j["gpu_type"] == gpu_type), key=lambda j: float(j["submit"]))
        after = 0.0
        for j in reversed(mine):
            after += float(j["gpus"]) * float(j["runtime_s"])
            bound = max(bound, float(j["submit"]) - t0 + after / capacity)
    return bound


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Mean, min, max, standard deviation and the 95% CI of the mean (t, n - 1 d.o.f.)."""
    arr = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(arr) == 0:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": len(arr),
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "values": [float(v) for v in arr],
    }
    if len(arr) >= 2:
        from scipy import stats  # type: ignore[import-untyped]

        sd = float(arr.std(ddof=1))
        half = float(stats.t.ppf(0.975, len(arr) - 1)) * sd / math.sqrt(len(arr))
        out.update(sd=sd, ci95=[out["mean"] - half, out["mean"] + half])
    return out


def _change(new: float, old: float) -> float:
    return (new - old) / old * 100.0 if old else math.nan


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per arm and metric, mean and spread over repetitions; paired changes against each
    multifactor arm present (``vs_slurm``, ``vs_slurm-tuned``)."""
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    per_arm: dict[str, dict[str, Any]] = {}
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        per_arm[arm] = {
            key: spread([r["metrics"].get(key, math.nan) for r in mine])
            for key in METRICS
            if any(key in r["metrics"] for r in mine)
        }
    paired: dict[str, dict[str, Any]] = {}
    for base in ("slurm", "slurm-tuned"):
        if base not in arms:
            continue
        by_repeat = {r["repeat"]: r for r in runs if r["arm"] == base}
        for arm in arms:
            if arm == base or (base == "slurm-tuned" and arm == "slurm"):
                continue
            changes: dict[str, Any] = {}
            for key in PAIRED:
                values = [
                    _change(r["metrics"][key], by_repeat[r["repeat"]]["metrics"][key])
                    for r in runs
                    if r["arm"] == arm and r["repeat"] in by_repeat
                ]
                changes[key] = spread(values)
            paired[f"{arm} vs {base}"] = changes
    return {"arms": per_arm, "paired_change_pct": paired}


def _cell(s: Mapping[str, Any], fmt: str) -> str:
    if not s.get("n"):
        return "-"
    text = f"{fmt.format(s['mean'])} [{fmt.format(s['min'])}, {fmt.format(s['max'])}]"
    return text


def summary_table(summary: Mapping[str, Any]) -> str:
    """Markdown: per arm, mean [min, max] over repetitions; then the paired changes, mean [95% CI]."""
    arms = list(summary["arms"])
    lines = ["| metric | " + " | ".join(ARMS[a] for a in arms) + " |", "|---" * (len(arms) + 1) + "|"]
    for key, (label, fmt) in METRICS.items():
        cells = [summary["arms"][a].get(key, {}) for a in arms]
        if not any(c.get("n") for c in cells):
            continue
        lines.append(f"| {label} | " + " | ".join(_cell(c, fmt) for c in cells) + " |")
    if summary["paired_change_pct"]:
        lines += [
            "",
            "| paired change, % (mean [95% CI]; min..max) | "
            + " | ".join(METRICS[k][0] for k in PAIRED)
            + " |",
            "|---" * (len(PAIRED) + 1) + "|",
        ]
        for name, changes in summary["paired_change_pct"].items():
            cells = []
            for key in PAIRED:
                c = changes[key]
                if not c.get("n"):
                    cells.append("-")
                    continue
                ci = c.get("ci95")
                ci_text = f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""
                cells.append(f"{c['mean']:+.1f}{ci_text}; {c['min']:+.1f}..{c['max']:+.1f}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_repeated(
    runs: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], path: Path, title: str
) -> None:
    """Four metrics per arm (mean bar, min-max whisker, one dot per repetition), the queue length of
    the first repetition and the wait CDF over all repetitions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(summary["arms"])
    colors = {"slurm": "tab:gray", "slurm-tuned": "tab:blue", "hylo": "tab:orange"}
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.2))
    panels = ("mean_wait_s", "makespan_s", "gpu_utilization", "makespan_gap_to_bound_pct")
    for ax, key in zip([axes[0, 0], axes[0, 1], axes[0, 2], axes[1, 0]], panels, strict=True):
        for x, arm in enumerate(arms):
            s = summary["arms"][arm].get(key, {})
            if not s.get("n"):
                continue
            ax.bar(x, s["mean"], color=colors.get(arm, "tab:green"), alpha=0.6)
            ax.errorbar(
                x, s["mean"], yerr=[[s["mean"] - s["min"]], [s["max"] - s["mean"]]], color="k", capsize=6
            )
            ax.scatter([x] * len(s["values"]), s["values"], color="k", s=14, zorder=3)
        ax.set_xticks(range(len(arms)), [ARMS[a].replace(" (", "\n(") for a in arms], fontsize=8)
        ax.set_title(METRICS[key][0])
        if key == "gpu_utilization":  # the differences sit near the top: zoom to them
            mins = [summary["arms"][a][key]["min"] for a in arms if key in summary["arms"][a]]
            low = min(mins, default=0.0)
            ax.set_ylim(max(0.0, low - 0.1), 1.0)
    first = min(r["repeat"] for r in runs)
    for r in runs:
        if r["repeat"] != first:
            continue
        tl = np.array(r["timeline"], dtype=float)
        if len(tl):
            axes[1, 1].step(
                tl[:, 0], tl[:, 1], where="post", label=ARMS[r["arm"]], color=colors.get(r["arm"])
            )
    axes[1, 1].set_xlabel("seconds since the first arrival")
    axes[1, 1].set_ylabel("pending jobs (squeue)")
    axes[1, 1].set_title(f"queue length, repetition {first}")
    axes[1, 1].legend(fontsize=8)
    for arm in arms:
        waits = np.sort([j["wait_s"] for r in runs if r["arm"] == arm for j in r["jobs"]])
        if len(waits):
            axes[1, 2].step(
                waits,
                np.arange(1, len(waits) + 1) / len(waits),
                where="post",
                label=ARMS[arm],
                color=colors.get(arm),
            )
    axes[1, 2].set_xlabel("wait (s)")
    axes[1, 2].set_ylabel("fraction of jobs")
    axes[1, 2].set_title("per-job wait, CDF (all repetitions)")
    axes[1, 2].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
