"""Hylo's EASY backfilling against the textbook reference, on whole traces (issue 18, part 2).

    .venv/bin/python bench/easy_reference.py               # whole HPC2N and Lublin-256
    .venv/bin/python bench/easy_reference.py --jobs 5000   # the first 5,000 jobs of each
    .venv/bin/python bench/easy_reference.py --core python # Hylo's Python loop (slow)

Each trace runs on a flat cluster of single-slot nodes (one GPU each: a job's processors are its
GPUs): HPC2N on 240 x 1 with estimate = max(requested time, runtime), Lublin-256 (no requested
times) on 256 x 1 with estimate = runtime, exactly as ``tests/sim/test_textbook_easy.py`` builds
them. The reference (``tests/sim/textbook_easy.py``: Mu'alem and Feitelson's EASY, one
reservation, extra processors counted) gives every job's start time under FCFS and SJF; Hylo runs
the same bound workload with EASY backfill under its default config (no ``reservation``
argument: what the code does today) and under ``reservation="nodes"`` and ``"count"``. A row
reports the share of jobs whose start time equals the reference's, how many differ, the first
differing job (in submit order) and when the two schedules first diverge. A setting the config
or the event loop refuses is reported as an error row. Writes docs/results/easy_reference.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.policies import make_policy  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402
from tests.sim.test_textbook_easy import HPC2N, LUBLIN, TRACES, Case, reference_starts, trace_case  # noqa: E402

# (label, trace file under the traces folder, processors)
TRACES_RUN: list[tuple[str, str, int]] = [("HPC2N", HPC2N, 240), ("Lublin-256", LUBLIN, 256)]
ORDERS = ("fcfs", "sjf")
# (label, SimConfig keyword arguments): "default" passes no ``reservation`` at all
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("nodes", {"reservation": "nodes"}),
    ("count", {"reservation": "count"}),
]
ESTIMATES = {
    "HPC2N": "max(requested time, runtime); the runtime where no time was requested",
    "Lublin-256": "runtime (the trace has no requested times)",
}


def mean_wait(case: Case, start: np.ndarray) -> float:
    return float(np.mean(start - case.bound.jobs.submit))


def compare(case: Case, order: str, kwargs: dict[str, Any], core: str) -> dict[str, Any]:
    """One Hylo run against the reference: the row of the table (an ``error`` on refusal)."""
    ref = reference_starts(case, order)
    row: dict[str, Any] = {"jobs": len(ref), "reference_mean_wait_s": mean_wait(case, ref)}
    t0 = time.perf_counter()
    try:
        cfg = SimConfig(backfill="easy", **kwargs)
        sim = Simulator(case.bound, make_policy(order), cfg)
        sim.core = core
        got = sim.run().start
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        text = " ".join(line.strip() for line in str(exc).splitlines()[:3]).split(" [type=")[0]
        return row | {"error": f"{type(exc).__name__}: {text[:120]}"}
    diff = np.flatnonzero(~(got == ref))
    ids = case.bound.jobs.ids
    row |= {
        "core": sim.last_core,
        "core_reason": sim.core_reason,
        "seconds": time.perf_counter() - t0,
        "matched_share": 1.0 - len(diff) / len(ref),
        "differ": len(diff),
        "first_differing_job": str(ids[diff[0]]) if len(diff) else None,
        "first_differing_index": int(diff[0]) if len(diff) else None,
        "first_divergence_t": float(np.minimum(got[diff], ref[diff]).min()) if len(diff) else None,
        "hylo_mean_wait_s": mean_wait(case, got),
    }
    return row


def _commit() -> str:
    """``git describe --always --dirty`` of the code measured (empty outside a git checkout)."""
    try:
        cmd = ["git", "describe", "--always", "--dirty"]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def _write(out: Path, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "commit": _commit(),
        "label": args.label,
        "jobs_limit": args.jobs,
        "core": args.core,
        "estimates": ESTIMATES,
        "reference": "tests/sim/textbook_easy.py",
    }
    out.write_text(json.dumps({**meta, "rows": rows}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=None, help="the first N jobs of each trace (default: all)")
    ap.add_argument(
        "--core", default="auto", choices=["auto", "python", "compiled"], help="Hylo's event loop"
    )
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "easy_reference.json"))
    ap.add_argument("--label", default="", help="what code was measured (kept in the JSON)")
    args = ap.parse_args()
    console = Console(width=200)
    missing = [rel for _, rel, _ in TRACES_RUN if not (TRACES / rel).is_file()]
    if missing:
        console.print(f"[red]missing under {TRACES}: {', '.join(missing)}[/red]")
        sys.exit(2)
    with console.status("warm-up (compiling the simulator's core) on the first 200 jobs, not timed"):
        for _, rel, total in TRACES_RUN:
            for order in ORDERS:
                for _, kwargs in SETTINGS:
                    compare(trace_case(rel, total, 200), order, kwargs, args.core)
    rows: list[dict[str, Any]] = []
    for label, rel, total in TRACES_RUN:
        with console.status(f"loading {label}"):
            case = trace_case(rel, total, args.jobs)
        for order in ORDERS:
            with console.status(f"{label}: reference, {order}"):
                t0 = time.perf_counter()
                reference_starts(case, order)
                console.print(f"{label} {order}: reference in {time.perf_counter() - t0:.1f} s")
            for setting, kwargs in SETTINGS:
                with console.status(f"{label}: Hylo {setting}, {order}"):
                    row = compare(case, order, kwargs, args.core)
                rows.append({"trace": label, "processors": total, "order": order, "setting": setting, **row})
        _write(Path(args.out), args, rows)  # after each trace: a long run keeps what it did

    table = Table(title="Hylo's EASY vs the textbook reference: jobs that start at the reference's time")
    for col in (
        "trace",
        "order",
        "setting",
        "core",
        "jobs",
        "matched",
        "differ",
        "first differing job",
        "diverge at t",
        "mean wait ref / Hylo s",
        "s",
    ):
        table.add_column(col, justify="left" if col in ("trace", "order", "setting", "core") else "right")
    for r in rows:
        if "error" in r:
            table.add_row(
                r["trace"], r["order"], r["setting"], "", f"{r['jobs']:,}", f"[red]{r['error']}[/red]"
            )
            continue
        first = (
            ""
            if r["first_differing_job"] is None
            else f"{r['first_differing_job']} (#{r['first_differing_index']})"
        )
        table.add_row(
            r["trace"],
            r["order"],
            r["setting"],
            r["core"],
            f"{r['jobs']:,}",
            f"{100 * r['matched_share']:.2f}%",
            f"{r['differ']:,}",
            first,
            "" if r["first_divergence_t"] is None else f"{r['first_divergence_t']:,.0f}",
            f"{r['reference_mean_wait_s']:,.0f} / {r['hylo_mean_wait_s']:,.0f}",
            f"{r['seconds']:.1f}",
        )
    console.print(table)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
