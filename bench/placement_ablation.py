"""CP-SAT versus best-fit placement in full simulations: idle GPU-hours while jobs wait, mean wait,
and simulator throughput, measured side by side in one run.

    .venv/bin/python bench/placement_ablation.py             # openb (gpuspec33), Philly, synthetic
    .venv/bin/python bench/placement_ablation.py --quick     # synthetic trace only

For each workload the same policy is simulated once per placement over the same jobs (EASY
backfill, noisy estimates); the jobs are cut into consecutive windows and every window is scored
on both runs, so the comparison is paired: the table gives the mean per-window difference with a
95% bootstrap CI and the relative change (positive = CP-SAT better). Issue "Placer" target: on
openb with GPU type constraints, >= 10% fewer idle GPU-hours while jobs wait, and a lower mean
wait, than best-fit. The openb pods are replayed with arrivals rescaled to an offered load (see
docs/simulator.md: at its own timestamps the trace keeps 0.2% of the cluster busy and nothing
queues). Writes bench/results/placement_ablation.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.metrics import Window, summarize_window  # noqa: E402
from shared.metrics.bootstrap import paired_difference  # noqa: E402
from shared.policies import make_policy  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.evaluate import prepare_workload  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402

# (label, trace, jobs simulated (None = all), target offered load, window size)
WORKLOADS: list[tuple[str, str, int | None, float | None, int]] = [
    ("openb-gpuspec33 @ load 0.5", "openb-gpuspec33", None, 0.5, 256),
    ("philly (first 12,000 jobs)", "philly", 12_000, None, 256),
    ("rltune-synthetic", "rltune-synthetic", None, None, 96),
]
PLACEMENTS = ("best-fit", "cp-sat")


def _run(trace: str, n: int | None, load: float | None, window: int, policy: str) -> dict[str, Any]:
    work = prepare_workload(trace, None, target_load=load)
    total = len(work.bound.jobs)
    hi = total if n is None else min(n, total)
    windows = [Window(s, window) for s in range(0, hi - window + 1, window)]
    per: dict[str, dict[str, Any]] = {}
    for pl in PLACEMENTS:
        sim = Simulator(work.bound, make_policy(policy), SimConfig(placement=pl))
        t0 = time.perf_counter()
        res = sim.run(job_range=(0, hi))
        wall = time.perf_counter() - t0
        ms = [summarize_window(res, w, respect_metric_mask=False) for w in windows]
        per[pl] = {
            "wall_s": wall,
            "jobs_per_s": hi / wall,
            "idle_gpu_h": np.array([m.idle_gpu_hours_while_waiting for m in ms]),
            "wait_s": np.array([m.wait_s.mean for m in ms]),
            "placer_stats": res.placer_stats,
        }
    a, b = per["cp-sat"], per["best-fit"]
    idle = paired_difference(a["idle_gpu_h"], b["idle_gpu_h"], lower_is_better=True, seed=0)
    wait = paired_difference(a["wait_s"], b["wait_s"], lower_is_better=True, seed=0)
    return {
        "trace": trace,
        "jobs": hi,
        "windows": len(windows),
        "window_size": window,
        "target_load": load,
        "policy": policy,
        "idle_gpu_h": {pl: float(np.mean(per[pl]["idle_gpu_h"])) for pl in PLACEMENTS},
        "mean_wait_s": {pl: float(np.mean(per[pl]["wait_s"])) for pl in PLACEMENTS},
        "jobs_per_s": {pl: per[pl]["jobs_per_s"] for pl in PLACEMENTS},
        "idle_diff": idle.to_dict(),
        "wait_diff": wait.to_dict(),
        "cpsat_stats": a["placer_stats"],
    }


def _pct(d: dict[str, Any]) -> str:
    return f"{100 * d['rel_improvement']:+.1f}% [{100 * d['rel_low']:+.1f}, {100 * d['rel_high']:+.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="synthetic trace only")
    ap.add_argument("--policy", default="fcfs")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "placement_ablation.json"))
    args = ap.parse_args()
    console = Console(width=170)
    todo = WORKLOADS[-1:] if args.quick else WORKLOADS
    rows = []
    for label, trace, n, load, window in todo:
        with console.status(f"simulating {label} with best-fit and cp-sat"):
            row = _run(trace, n, load, window, args.policy)
        row["label"] = label
        rows.append(row)
        console.print(f"{label}: done")
    table = Table(title=f"CP-SAT vs best-fit, policy {args.policy}, EASY backfill (paired windows, 95% CI)")
    for col in (
        "workload",
        "windows",
        "idle GPU-h waiting BF",
        "CP-SAT",
        "change",
        "mean wait s BF",
        "CP-SAT",
        "change",
        "jobs/s BF",
        "jobs/s CP-SAT",
    ):
        table.add_column(col, justify="left" if col == "workload" else "right")
    for r in rows:
        table.add_row(
            r["label"],
            str(r["windows"]),
            f"{r['idle_gpu_h']['best-fit']:.2f}",
            f"{r['idle_gpu_h']['cp-sat']:.2f}",
            _pct(r["idle_diff"]),
            f"{r['mean_wait_s']['best-fit']:.0f}",
            f"{r['mean_wait_s']['cp-sat']:.0f}",
            _pct(r["wait_diff"]),
            f"{r['jobs_per_s']['best-fit']:,.0f}",
            f"{r['jobs_per_s']['cp-sat']:,.0f}",
        )
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"machine": platform.platform(), "python": platform.python_version(), "rows": rows},
            indent=2,
            default=float,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
