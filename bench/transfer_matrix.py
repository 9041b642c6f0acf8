"""Transfer matrix: each checkpoint evaluated on every trace, against that trace's best baseline
(issue 19, item 5).

    R=docs/results/runs
    .venv/bin/python bench/transfer_matrix.py \
        --checkpoints $R/philly-imit-sjf-bsld/checkpoint,$R/rltune-imit-sjf-bsld/checkpoint
    .venv/bin/python bench/transfer_matrix.py --checkpoints ... --traces philly,lublin256 --windows 20

Why: a model that wins only on the trace it was trained on is tuned to it; Hylo is judged on
workloads it has not seen. Each cell is ``hylo evaluate --checkpoint C --trace T`` (the model's
own features, no retraining; the run a user bringing trace T would make), with the information
trace T really has (``TRACES``: Philly's history estimates, HPC2N's user estimates, ...) and every
baseline the registry has, the predictor-based ones included. The cell shows the learned policy's
paired gain over the best non-clairvoyant baseline of that trace, for mean wait and mean BSLD,
with its 95% CI. Small traces (openb, RLTune, Lublin-256) hold few non-overlapping held-out
windows: they are evaluated on overlapping ones too, labelled "overlapping" in the JSON.

Writes ``<out>/transfer_matrix.json``, ``<out>/transfer_matrix.png`` (BSLD gains as a heat map)
and prints the matrix; each run's console output is in ``<out>/<checkpoint>/<trace>/console.txt``.
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
LUBLIN = "/work/shared/traces/swf/lublin_256.swf.gz"

#: trace key -> (trace, cluster or None for the trace's own, estimates it really has, extra options,
#: overlapping windows)
TRACES: dict[str, tuple[str, str | None, str, tuple[str, ...], bool]] = {
    "philly": ("philly", "docs/results/clusters/philly-rltune.toml", "history", (), False),
    "hpc2n": ("hpc2n", None, "trace", ("--window-size", "128"), False),
    "openb": ("openb-gpuspec33", "docs/results/clusters/openb-slice15.toml", "history", (), True),
    "rltune": ("rltune-synthetic", None, "history", ("--window-size", "96", "--train-fraction", "0.5"), True),
    "lublin256": (LUBLIN, "docs/results/clusters/lublin-256.toml", "history", (), True),
}


def cell(args: argparse.Namespace, checkpoint: Path, key: str, out: Path) -> dict[str, Any]:
    trace, cluster, estimates, extra, overlap = TRACES[key]
    options = ["--trace", trace, "--estimates", estimates, "--windows", str(args.windows)]
    options += [] if cluster is None else ["--cluster", str(ROOT / cluster)]
    options += [*extra, *(["--overlap"] if overlap else []), "--seed", str(args.seed)]
    record = run_evaluate(checkpoint, out, options)
    return {"checkpoint": str(checkpoint), "trace": key, "overlapping": overlap, **record}


def print_matrix(cells: list[dict[str, Any]], checkpoints: list[Path], traces: list[str]) -> None:
    table = Table(title="Learned (greedy) vs each trace's best baseline: wait / BSLD gain [95% CI]")
    table.add_column("checkpoint")
    for key in traces:
        table.add_column(key + (" (overlapping)" if TRACES[key][4] else ""), justify="right")
    for ckpt in checkpoints:
        row = [ckpt.parent.name]
        for key in traces:
            found = next(c for c in cells if c["checkpoint"] == str(ckpt) and c["trace"] == key)
            if "error" in found:
                row.append(f"[red]{found['error'][:60]}[/]")
                continue
            lines = [f"{SHORT[m]} {gain_cell(found['metrics'][m])}" for m in METRICS]
            row.append("\n".join(lines) + f"\n({found['n_windows']} windows)")
        table.add_row(*row)
    console.print(table)


def plot(cells: list[dict[str, Any]], checkpoints: list[Path], traces: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.full((len(checkpoints), len(traces)), np.nan)
    for i, ckpt in enumerate(checkpoints):
        for j, key in enumerate(traces):
            found = next(c for c in cells if c["checkpoint"] == str(ckpt) and c["trace"] == key)
            gain = found.get("metrics", {}).get("bsld_mean", {}).get("gain")
            if gain is not None:
                grid[i, j] = 100 * gain
    fig, ax = plt.subplots(figsize=(1.6 * len(traces) + 2, 0.8 * len(checkpoints) + 1.5))
    # colours saturate at +-50%: a -1,000% cell would otherwise wash out the differences that matter
    image = ax.imshow(np.clip(grid, -50.0, 50.0), cmap="RdYlGn", vmin=-50.0, vmax=50.0)
    ax.set_xticks(range(len(traces)), traces)
    ax.set_yticks(range(len(checkpoints)), [c.parent.name for c in checkpoints])
    for i in range(len(checkpoints)):
        for j in range(len(traces)):
            text = "n/a" if np.isnan(grid[i, j]) else f"{grid[i, j]:+.0f}%"
            ax.text(j, i, text, ha="center", va="center")
    fig.colorbar(image, label="BSLD gain (%; colour clipped at ±50)")
    ax.set_title("transfer: learned vs best baseline (BSLD)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoints", required=True, help="comma-separated checkpoint folders")
    parser.add_argument("--traces", default=",".join(TRACES), help=f"from {', '.join(TRACES)}")
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/transfer_matrix")
    args = parser.parse_args()
    checkpoints = [Path(c.strip()) for c in args.checkpoints.split(",") if c.strip()]
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        parser.error(f"--traces: unknown {', '.join(unknown)}; known: {', '.join(TRACES)}")
    missing = [str(c) for c in checkpoints if not (c / "card.json").is_file()]
    if missing or not checkpoints:
        parser.error(f"--checkpoints: no card.json in {', '.join(missing) or '(none given)'}")
    cells = []
    with Progress(console=console) as progress:
        task = progress.add_task("runs", total=len(checkpoints) * len(traces))
        for ckpt in checkpoints:
            for key in traces:
                progress.update(task, description=f"{ckpt.parent.name} on {key}")
                cells.append(cell(args, ckpt, key, args.out / ckpt.parent.name / key))
                progress.advance(task)
    print_matrix(cells, checkpoints, traces)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "windows": args.windows,
        "seed": args.seed,
        "traces": {k: [*TRACES[k][:3], list(TRACES[k][3]), TRACES[k][4]] for k in traces},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "cells": cells,
    }
    (args.out / "transfer_matrix.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(cells, checkpoints, traces, args.out / "transfer_matrix.png")
    console.print(f"wrote {args.out / 'transfer_matrix.json'} and transfer_matrix.png")
    if any("error" in c for c in cells):
        sys.exit(1)


if __name__ == "__main__":
    main()
