"""A compact summary of a ``hylo simulate``/``hylo evaluate`` report, as JSON and a Markdown table.

    .venv/bin/python bench/summarize_report.py hylo-out/evaluate/evaluate.json \
        --out docs/results/predictor-baselines/philly-history.json

Why: a full report keeps every window's metrics (2 MB for 100 windows x 14 policies), too big to
keep beside a results page; what a reader needs is per policy the means with their 95% CIs, the
tails (p99 wait, mean over windows, and the largest p99 of any window: starvation shows there),
the share of windows in which no job waited, and the paired gain over the best non-clairvoyant
baseline (``PolicyComparison.best_baseline``). The summary names its source report, so the numbers
can be traced back.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

METRICS = ("wait_mean", "bsld_mean")


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def summarize(report: dict[str, Any], source: str) -> dict[str, Any]:
    """Per policy: means [CI], tails, no-wait share and gain over the best baseline."""
    rows: dict[str, Any] = {}
    for name, policy in report["policies"].items():
        waits_p99 = [w["wait_s"]["p99"] for w in policy["windows"]]
        row: dict[str, Any] = {
            "no_wait_share": policy.get("no_wait_share"),
            "wait_p99_mean_s": sum(waits_p99) / len(waits_p99),
            "wait_p99_max_s": max(waits_p99),
        }
        for m in METRICS:
            metric = policy["metrics"][m]
            best = metric.get("vs_best_baseline") or {}
            row[m] = {
                "mean": metric["mean"],
                "low": metric["low"],
                "high": metric["high"],
                "vs_best": best.get("rel_improvement"),
                "vs_best_low": best.get("rel_low"),
                "vs_best_high": best.get("rel_high"),
            }
        rows[name] = row
    return {
        "source": source,
        "title": report.get("title", ""),
        "n_windows": report["n_windows"],
        "baselines": report.get("baselines", []),
        "best_baseline": {m: report.get("best_baseline", {}).get(m) for m in METRICS},
        "policies": rows,
    }


def _gain(row: dict[str, Any]) -> str:
    if row["vs_best"] is None:
        return "best" if row.get("is_best") else "-"
    return f"{row['vs_best']:+.1%} [{_num(row['vs_best_low']):+.1%}, {_num(row['vs_best_high']):+.1%}]"


def markdown(summary: dict[str, Any]) -> str:
    """One row per policy; gains are over the best baseline of each metric (named in the header)."""
    best = summary["best_baseline"]
    lines = [
        f"| policy | wait (s) [95% CI] | vs {best['wait_mean']} | BSLD [95% CI] | vs {best['bsld_mean']} "
        "| p99 wait, mean / max over windows (s) | no-wait windows |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in summary["policies"].items():
        w, b = row["wait_mean"], row["bsld_mean"]
        w["is_best"], b["is_best"] = name == best["wait_mean"], name == best["bsld_mean"]
        share = row["no_wait_share"]
        lines.append(
            f"| {name} | {w['mean']:,.0f} [{w['low']:,.0f}, {w['high']:,.0f}] | {_gain(w)} "
            f"| {b['mean']:.2f} [{b['low']:.2f}, {b['high']:.2f}] | {_gain(b)} "
            f"| {row['wait_p99_mean_s']:,.0f} / {row['wait_p99_max_s']:,.0f} "
            f"| {'-' if share is None or math.isnan(share) else f'{share:.0%}'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path, help="evaluate.json or simulate.json")
    parser.add_argument("--out", type=Path, default=None, help="write the summary JSON here")
    args = parser.parse_args()
    try:
        report = json.loads(args.report.read_text())
    except (OSError, json.JSONDecodeError) as err:
        parser.exit(2, f"{args.report}: cannot read a report: {err}\n")
    policies = report.get("policies") if isinstance(report, dict) else None
    if (
        not isinstance(policies, dict)
        or "n_windows" not in report
        or not all(isinstance(p, dict) and "windows" in p and "metrics" in p for p in policies.values())
    ):
        parser.exit(
            2,
            f"{args.report}: not a hylo simulate/evaluate report (expected 'n_windows' and, per policy, "
            "'metrics' and 'windows')\n",
        )
    summary = summarize(report, str(args.report))
    print(markdown(summary))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
