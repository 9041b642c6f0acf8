"""Run ``hylo evaluate`` as a user would and read what its report says about the best baseline.

Shared by the benches that repeat one evaluation over a grid (``load_sweep.py``: offered loads;
``transfer_matrix.py``: checkpoints x traces). Why a subprocess per run: each run is then exactly a
command a user can rerun from the JSON, with its console output kept beside its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LEARNED = "learned-greedy"
ORACLE = "sjf-oracle"
METRICS = ("wait_mean", "bsld_mean")
SHORT = {"wait_mean": "wait (s)", "bsld_mean": "BSLD"}


def run_evaluate(checkpoint: Path, out: Path, options: Sequence[str]) -> dict[str, Any]:
    """``hylo evaluate --checkpoint C <options> --out OUT`` (greedy only, no plots); the record
    of the run: its command and wall time, and either its error line or, per metric, ``metric_row``."""
    out.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "shared.cli.app",
        "evaluate",
        "--checkpoint",
        str(checkpoint),
        *options,
        "--no-sampled",
        "--no-plots",
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, check=False
    )
    (out / "console.txt").write_text(done.stdout + done.stderr)
    record: dict[str, Any] = {"command": ["hylo", *command[4:]], "seconds": time.perf_counter() - t0}
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        record["error"] = last[-1] if last else f"exit status {done.returncode}"
        return record
    report = json.loads((out / "evaluate.json").read_text())
    record["folder"] = str(out)
    record["n_windows"] = report["n_windows"]
    record["metrics"] = {m: metric_row(report, m) for m in METRICS}
    return record


def metric_row(report: dict[str, Any], metric: str) -> dict[str, Any]:
    """Per metric: the best baseline, its mean, the learned mean and gain [CI] over it, the gap
    to the oracle and the no-wait share of windows under the best baseline."""
    policies = report["policies"]
    best = report["best_baseline"][metric]
    learned = policies[LEARNED]["metrics"][metric]
    gain = learned.get("vs_best_baseline") or {}
    oracle = policies.get(ORACLE, {}).get("metrics", {}).get(metric)
    return {
        "best_baseline": best,
        "best_mean": policies[best]["metrics"][metric]["mean"],
        "learned_mean": learned["mean"],
        # None where no window has a difference (e.g. nothing waited): no relative gain exists
        "gain": gain.get("rel_improvement"),
        "gain_low": gain.get("rel_low"),
        "gain_high": gain.get("rel_high"),
        "oracle_mean": None if oracle is None else oracle["mean"],
        "no_wait_share": policies[best]["no_wait_share"],
    }


def pct(value: float | None) -> str:
    """A relative gain as ``+1.2%``; ``n/a`` where none exists."""
    return "n/a" if value is None else f"{value:+.1%}"


def gain_cell(row: dict[str, Any]) -> str:
    """``gain [low, high]`` of one ``metric_row``."""
    return f"{pct(row['gain'])} [{pct(row['gain_low'])}, {pct(row['gain_high'])}]"
