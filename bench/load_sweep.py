"""The learned prioritizer's gain over the best baseline as the offered load changes (issue 19,
item 4).

    .venv/bin/python bench/load_sweep.py --checkpoint docs/results/runs/philly-imit-sjf-bsld/checkpoint \
        --estimates history                       # loads 0.7, 0.9, 1.1; 100 held-out windows each
    .venv/bin/python bench/load_sweep.py --checkpoint ... --loads 0.7,1.1 --windows 20   # quicker

Why a sweep: at a light load most windows never queue (no order can do better there: the
"no-wait" share of windows), at a heavy one every order is tested; a policy that only wins at
one load is tuned to it. For each load L the checkpoint is evaluated exactly as a user would,
``hylo evaluate --checkpoint C --load L`` (arrivals rescaled to offered load L under the in-span
definition, ``shared.domain.load``; the same held-out windows and settings as the card otherwise,
with every baseline the registry has, the predictor-based ones included), one process per load so
that each is the command a user can rerun. The sweep reads each run's ``evaluate.json``: per
metric the best non-clairvoyant baseline and the learned policy's paired gain over it [95% CI],
the gap to ``sjf-oracle``, and the share of windows in which no job waited under the best
baseline.

Writes ``<out>/load_sweep.json`` (with every run's folder), ``<out>/load_sweep.png`` (the gain
curves with their intervals) and prints one table. Each run's console output is kept in
``<out>/load-<L>/console.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from evaluate_runs import METRICS, SHORT, gain_cell, run_evaluate  # noqa: E402

console = Console()


def run_load(args: argparse.Namespace, load: float, out: Path) -> dict[str, Any]:
    """``hylo evaluate`` at offered load ``load`` into ``out``: its record (``run_evaluate``)."""
    options = ["--load", f"{load:g}", "--windows", str(args.windows), "--estimates", args.estimates]
    options += ["--seed", str(args.seed)]
    options += [] if args.trace is None else ["--trace", args.trace]
    options += [] if args.cluster is None else ["--cluster", args.cluster]
    return {"load": load, **run_evaluate(args.checkpoint, out, options)}


def print_table(records: list[dict[str, Any]]) -> None:
    table = Table(title="Learned (greedy) against the best non-clairvoyant baseline, per offered load")
    table.add_column("load", justify="right")
    table.add_column("windows", justify="right")
    table.add_column("no-wait\nwindows", justify="right")
    for m in METRICS:
        table.add_column(f"{SHORT[m]}\nbest baseline", justify="left")
        table.add_column(f"{SHORT[m]}\nlearned vs best\n[95% CI]", justify="right")
        table.add_column(f"{SHORT[m]}\nsjf-oracle", justify="right")
    for r in records:
        if "error" in r:
            table.add_row(f"{r['load']:g}", "-", "-", f"[red]{r['error']}[/]")
            continue
        cells = [f"{r['load']:g}", str(r["n_windows"]), f"{r['metrics'][METRICS[0]]['no_wait_share']:.0%}"]
        for m in METRICS:
            row = r["metrics"][m]
            oracle = "-" if row["oracle_mean"] is None else f"{row['oracle_mean']:.4g}"
            cells += [
                f"{row['best_baseline']} {row['best_mean']:.4g}",
                gain_cell(row),
                oracle,
            ]
        table.add_row(*cells)
    console.print(table)


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [
        r for r in records if "error" not in r and all(r["metrics"][m]["gain"] is not None for m in METRICS)
    ]
    if not ok:
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k, m in enumerate(METRICS):
        loads = [r["load"] + (k - 0.5) * 0.01 for r in ok]
        gains = [100 * r["metrics"][m]["gain"] for r in ok]
        low = [100 * (r["metrics"][m]["gain"] - r["metrics"][m]["gain_low"]) for r in ok]
        high = [100 * (r["metrics"][m]["gain_high"] - r["metrics"][m]["gain"]) for r in ok]
        ax.errorbar(loads, gains, yerr=[low, high], marker="o", capsize=4, label=m)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("offered load (in-span)")
    ax.set_ylabel("gain over the best baseline (%)")
    ax.set_title("learned vs best baseline, 95% paired CI")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--loads", default="0.7,0.9,1.1", help="comma-separated offered loads")
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--estimates", default="noisy", help="noisy | history | predicted | oracle | trace")
    parser.add_argument("--trace", default=None, help="default: the checkpoint's")
    parser.add_argument("--cluster", default=None, help="default: the checkpoint's")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/load_sweep")
    args = parser.parse_args()
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--loads: expected comma-separated numbers, got {args.loads!r}")
    if not loads or min(loads) <= 0:
        parser.error(f"--loads: expected positive loads, got {args.loads!r}")
    records = []
    with Progress(console=console) as progress:
        task = progress.add_task("loads", total=len(loads))
        for load in loads:
            progress.update(task, description=f"load {load:g}")
            records.append(run_load(args, load, args.out / f"load-{load:g}"))
            progress.advance(task)
    print_table(records)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "checkpoint": str(args.checkpoint),
        "estimates": args.estimates,
        "windows": args.windows,
        "seed": args.seed,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "runs": records,
    }
    (args.out / "load_sweep.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(records, args.out / "load_sweep.png")
    console.print(f"wrote {args.out / 'load_sweep.json'} and load_sweep.png")
    if any("error" in r for r in records):
        sys.exit(1)


if __name__ == "__main__":
    main()
