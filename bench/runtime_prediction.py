"""How well is a job's runtime known at submission? User estimates, the ``history`` estimate and
Hylo's online predictor (``shared.prediction``) on every public trace (issue 19, item 1).

    .venv/bin/python bench/runtime_prediction.py              # every trace, about 7 minutes on 2 cores
    .venv/bin/python bench/runtime_prediction.py --quick      # RLTune, Lublin-256 and openb only
    .venv/bin/python bench/runtime_prediction.py --markdown   # also print the table as Markdown

Per trace, every job gets a runtime from each method, all known at its submission:

- ``user estimate``: the trace's requested time (HPC2N only: no other trace has one);
- ``history``: what ``--estimates history`` gives (``shared.traces.estimates``): the mean of the
  user's (else the VC's) last two finished jobs times 1.5, the ``noisy`` estimate before any;
- ``history x1``: the same mean without the 1.5 safety factor (Tsafrir et al.'s raw predictor);
- ``predicted``: ``predict_runtimes`` with its default settings (its point prediction);
- ``predicted q90``: the upper edge of its band, a cautious estimate.

Scores, over the jobs after the first ``--warmup`` share of each trace (every method on the same
jobs, so a cold start costs every method alike): the median absolute log error
``|log(pred / actual)|`` (0.69 = off by a factor of 2), the share of under-predictions
(``pred < actual``: what hurts a backfilling scheduler), and for the predictor the share of jobs
whose runtime falls inside its [q10, q90] band, its fits, the seconds they took, and the mean
weight its fits gave the model's correction to the reference (``choose_shrink``: 0 = the
reference alone, 1 = the model's full correction).
The predictor always fits here (``use_cache=False``: no prediction cache), so its cost is measured.
``--max-jobs`` caps each trace to its first jobs. Writes docs/results/runtime-prediction.json.
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

from shared.config import get_settings  # noqa: E402
from shared.domain.jobs import JobTable  # noqa: E402
from shared.prediction import SOURCES, PredictorSettings, predict_runtimes  # noqa: E402
from shared.prediction.predictor import SHRINK_GRID  # noqa: E402
from shared.traces import apply_estimates, load_trace  # noqa: E402
from shared.traces.estimates import history_predictions, noisy_estimates  # noqa: E402

# (label, trace name or path under the traces folder, in --quick)
TRACES: list[tuple[str, str, bool]] = [
    ("HPC2N", "hpc2n", False),
    ("Lublin-256", "swf/lublin_256.swf.gz", True),
    ("Philly", "philly", False),
    ("RLTune synthetic", "rltune-synthetic", True),
    ("openb", "openb", True),
]


def _load(spec: str, max_jobs: int | None) -> JobTable:
    """The trace's table (a name, or a path under the traces folder), cut to its first jobs."""
    target = spec if "/" not in spec else str(get_settings().traces_dir / spec)
    table = load_trace(target).table
    return table.take(np.arange(min(len(table), max_jobs))) if max_jobs else table


def _score(pred: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    err = np.log(np.maximum(pred, 1.0) / np.maximum(actual, 1.0))
    return {
        "jobs": len(err),
        "male": float(np.median(np.abs(err))),
        "median_log_error": float(np.median(err)),
        "under": float(np.mean(pred < actual)),
    }


def _methods(table: JobTable, seed: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every method's runtime for every job, and the predictor's own record."""
    out: dict[str, np.ndarray] = {}
    if np.isfinite(table.estimate).any():
        out["user estimate"] = table.estimate
    blank = table.with_fields(estimate=np.full(len(table), np.nan))
    out["history"] = apply_estimates(blank, "history", seed).estimate
    raw = history_predictions(table, safety=1.0)
    out["history x1"] = np.where(np.isnan(raw), noisy_estimates(table.runtime, seed), raw)
    started = time.perf_counter()
    # never from the prediction cache: the bench measures the fitting cost
    pred = predict_runtimes(table, PredictorSettings(seed=seed), use_cache=False)
    wall = time.perf_counter() - started
    out["predicted"] = pred.runtime
    out["predicted q90"] = np.where(np.isnan(pred.high), pred.runtime, pred.high)
    record = {
        "fits": pred.fits,
        "fit_seconds": pred.fit_seconds,
        "shrink_mean": float(pred.shrink.mean()) if pred.fits else None,
        "shrink_counts": {str(w): int(np.sum(pred.shrink == w)) for w in SHRINK_GRID},
        "wall_seconds": wall,
        "sources": {
            SOURCES[i]: int(c) for i, c in enumerate(np.bincount(pred.source, minlength=len(SOURCES)))
        },
        "low": pred.low,
        "high": pred.high,
        "source": pred.source,
    }
    return out, record


def run_trace(label: str, spec: str, warmup: float, max_jobs: int | None, seed: int) -> dict[str, Any]:
    table = _load(spec, max_jobs)
    methods, record = _methods(table, seed)
    scored = np.arange(len(table)) >= int(warmup * len(table))
    actual = table.runtime[scored]
    rows = {name: _score(values[scored], actual) for name, values in methods.items()}
    low, high = record.pop("low")[scored], record.pop("high")[scored]
    banded = np.isfinite(low) & np.isfinite(high)
    inside = (actual >= low) & (actual <= high)
    record["band_coverage"] = float(inside[banded].mean()) if banded.any() else None
    record["band_jobs"] = int(banded.sum())
    record["model_share"] = float(np.mean(record.pop("source")[scored] == 0))
    return {
        "label": label,
        "trace": spec,
        "jobs": len(table),
        "scored": int(scored.sum()),
        "methods": rows,
        **record,
    }


def _cells(r: dict[str, Any]) -> list[list[str]]:
    """One trace's rows, a row per method: the cells both the console table and Markdown print
    (the trace and its scored jobs on its first row; the predictor's own columns on its row)."""
    out = []
    for i, (name, m) in enumerate(r["methods"].items()):
        own = name == "predicted"
        cover = r["band_coverage"]
        out.append(
            [
                r["label"] if i == 0 else "",
                f"{r['scored']:,}" if i == 0 else "",
                name,
                f"{m['male']:.2f}",
                f"{m['under']:.0%}",
                f"{cover:.0%}" if own and cover is not None else "",
                str(r["fits"]) if own else "",
                f"{r['fit_seconds']:.1f}" if own else "",
                f"{r['shrink_mean']:.2f}" if own and r["shrink_mean"] is not None else "",
            ]
        )
    return out


def _table(results: list[dict[str, Any]]) -> Table:
    t = Table(title="Runtime prediction: median |log(pred/actual)| and share under-predicted")
    for col in ("trace", "jobs scored", "method", "MALE", "under", "band cover", "fits", "fit s", "mean w"):
        t.add_column(col, justify="left" if col in ("trace", "method") else "right")
    for r in results:
        for cells in _cells(r):
            t.add_row(*cells)
        t.add_section()
    return t


def _markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | jobs scored | method | MALE | under | q10-q90 cover | fits | fit s | mean w |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.extend("| " + " | ".join(cells) + " |" for cells in _cells(r))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="RLTune, Lublin-256 and openb only")
    ap.add_argument("--warmup", type=float, default=0.1, help="share of each trace's first jobs not scored")
    ap.add_argument("--max-jobs", type=int, default=None, help="cap each trace to its first jobs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "runtime-prediction.json"))
    args = ap.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 120)  # a log file gets whole rows
    if not get_settings().traces_dir.is_dir():
        console.print(f"traces folder {get_settings().traces_dir} does not exist: set HYLO_TRACES_DIR")
        raise SystemExit(2)
    started = time.perf_counter()
    results = []
    for label, spec, quick in TRACES:
        if args.quick and not quick:
            continue
        console.print(f"{label} ...")
        results.append(run_trace(label, spec, args.warmup, args.max_jobs, args.seed))
    console.print(_table(results))
    if args.markdown:
        console.print(_markdown(results), markup=False, highlight=False, soft_wrap=True)
    report = {
        "bench": "runtime_prediction",
        "settings": PredictorSettings(seed=args.seed).model_dump(),
        "warmup": args.warmup,
        "max_jobs": args.max_jobs,
        "seconds": time.perf_counter() - started,
        "machine": platform.platform(),
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    console.print(f"wrote {out} ({report['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
