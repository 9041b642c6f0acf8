"""Does an offered load's queue match its name? Load against utilization and queues, old definition
against new (issue 18, item 3).

    .venv/bin/python bench/offered_load.py            # every workload below, about 2 minutes on 2 cores
    .venv/bin/python bench/offered_load.py --quick    # the embedded slices and RLTune's trace only
    .venv/bin/python bench/offered_load.py --markdown # also print the table as Markdown

For each workload, its arrival gaps are rescaled (``prepare_workload(target_load=L,
load_definition=D)``) to each load L under each definition D (``shared.domain.load``: ``in-span``,
the default, and ``capped``, the definition before it), and FCFS and SJF are simulated with EASY
backfill (best-fit, noisy estimates, seed 0) over every job, from an empty cluster. Each run is
scored over the workload's whole arrival span (first to last arrival, as ``summarize_window`` and
``hylo run`` do): GPU utilization, mean queue length (jobs waiting) and the share of the span with
a non-empty queue, beside the offered load measured under both definitions. A load out of reach
is recorded with the error that says which loads are. Writes docs/results/offered-load.json.

What to look for: below saturation the utilization should equal the load (it cannot exceed the
in-span load on a cold start: that is the utilization with unlimited room), and queues should
grow as the load passes what the cluster can pack.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.domain.load import LOAD_DEFINITIONS, LoadDefinition, LoadOutOfReach, offered_load  # noqa: E402
from shared.metrics import Window, summarize_window  # noqa: E402
from shared.policies import make_policy  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.evaluate import prepare_workload  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402

LUBLIN = "/work/shared/traces/swf/lublin_256.swf.gz"
LUBLIN_CLUSTER = str(ROOT / "docs/results/clusters/lublin-256.toml")

LOADS = (0.5, 0.7, 0.9, 1.1)
# (label, trace (None: embedded), cluster (None: the trace's), embedded jobs, loads, quick);
# openb reaches 0.094 at most in-span (its pods arrive late in its span): two reachable loads too
WORKLOADS: list[tuple[str, str | None, str | None, int, tuple[float, ...], bool]] = [
    ("embedded, 600 jobs (hylo run before)", None, None, 600, LOADS, True),
    ("embedded, 800 jobs (hylo run now)", None, None, 800, LOADS, True),
    ("embedded, 20,000 jobs (hylo simulate)", None, None, 20_000, LOADS, False),
    ("rltune-synthetic (960 jobs)", "rltune-synthetic", None, 0, LOADS, True),
    ("philly (82,247 jobs)", "philly", None, 0, LOADS, False),
    ("lublin-256 SWF (10,000 jobs)", LUBLIN, LUBLIN_CLUSTER, 0, LOADS, False),
    ("hpc2n SWF (202,871 jobs)", "hpc2n", None, 0, LOADS, False),
    ("openb (7,254 pods)", "openb", None, 0, (0.05, 0.09, *LOADS), False),
]
POLICIES = ("fcfs", "sjf")


def _simulate(work: Any, policy: str) -> dict[str, float]:
    """One policy over every job of ``work``, scored over the whole arrival span."""
    n = len(work.bound.jobs)
    t0 = time.perf_counter()
    result = Simulator(work.bound, make_policy(policy), SimConfig()).run(job_range=(0, n))
    m = summarize_window(result, Window(0, n), respect_metric_mask=False)
    return {
        "utilization": m.utilization,
        "queue_mean": m.queue_mean,
        "queued_frac": m.queued_frac,
        "wait_mean_s": m.wait_s.mean,
        "sim_s": time.perf_counter() - t0,
    }


def _case(
    trace: str | None, cluster: str | None, jobs: int, load: float | None, definition: LoadDefinition
) -> dict[str, Any]:
    """One workload at one load under one definition: the measured loads and both policies' runs."""
    row: dict[str, Any] = {"target_load": load, "definition": definition if load is not None else None}
    try:
        work = prepare_workload(
            trace, cluster, n_jobs=jobs or 20_000, seed=0, target_load=load, load_definition=definition
        )
    except LoadOutOfReach as err:
        row.update(out_of_reach=str(err), highest=err.highest)
        return row
    table, capacity = work.bound.jobs, work.spec.total_gpus
    span = float(table.submit.max() - table.submit.min())
    row.update(
        jobs=len(table),
        span_h=span / 3600,
        load={d: offered_load(table, capacity, d) for d in LOAD_DEFINITIONS},
        policies={p: _simulate(work, p) for p in POLICIES},
    )
    return row


def _workload(
    label: str, trace: str | None, cluster: str | None, jobs: int, loads: tuple[float, ...]
) -> dict[str, Any]:
    cases = [_case(trace, cluster, jobs, None, "in-span")]
    for definition in LOAD_DEFINITIONS:
        cases += [_case(trace, cluster, jobs, load, definition) for load in loads]
    return {
        "label": label,
        "trace": trace or "embedded",
        "cluster": cluster,
        "jobs_arg": jobs,
        "cases": cases,
    }


def _cells(case: dict[str, Any]) -> list[str]:
    """The table cells of one case (after the workload's label)."""
    target = "own times" if case["target_load"] is None else f"{case['definition']} {case['target_load']:g}"
    if "out_of_reach" in case:
        return [target, f"out of reach (at most {case['highest']:.4g})", "", *[""] * (3 * len(POLICIES))]
    cells = [target, f"{case['load']['in-span']:.3f}", f"{case['load']['capped']:.3f}"]
    for p in POLICIES:
        r = case["policies"][p]
        cells += [f"{r['utilization']:.3f}", f"{r['queue_mean']:.1f}", f"{r['queued_frac']:.0%}"]
    return cells


HEADERS = ["workload", "--load", "in-span load", "capped load"] + [
    f"{p} {m}" for p in POLICIES for m in ("util", "queue", "queued")
]


def _print(rows: list[dict[str, Any]], console: Console, markdown: bool) -> None:
    table = Table(title="offered load vs utilization and queues over the arrival span (EASY, best-fit)")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("workload", "--load") else "right")
    for row in rows:
        for k, case in enumerate(row["cases"]):
            table.add_row(row["label"] if k == 0 else "", *_cells(case))
        table.add_section()
    console.print(table)
    if markdown:
        print("| " + " | ".join(HEADERS) + " |")
        print("|" + "---|" * len(HEADERS))
        for row in rows:
            for k, case in enumerate(row["cases"]):
                print("| " + " | ".join([row["label"] if k == 0 else "", *_cells(case)]) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the embedded slices and RLTune's trace only")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "offered-load.json"))
    args = ap.parse_args()
    console = Console(width=200)
    rows = []
    t0 = time.perf_counter()
    for label, trace, cluster, jobs, loads, quick in WORKLOADS:
        if args.quick and not quick:
            continue
        with console.status(f"simulating {label}"):
            rows.append(_workload(label, trace, cluster, jobs, loads))
        console.print(f"{label}: done ({time.perf_counter() - t0:.0f}s)")
    _print(rows, console, args.markdown)
    report = {
        "command": "python bench/offered_load.py" + (" --quick" if args.quick else ""),
        "setting": "EASY backfill, best-fit, noisy estimates, seed 0, every job from an empty cluster, "
        "scored over the whole arrival span",
        "loads": list(LOADS),  # and openb's two reachable ones
        "policies": list(POLICIES),
        "machine": platform.platform(),
        "wall_s": time.perf_counter() - t0,
        "workloads": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
