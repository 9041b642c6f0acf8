"""Simulator throughput and peak memory: jobs simulated per second of wall time, single core.

    .venv/bin/python bench/simulator_throughput.py            # all workloads x all policies
    .venv/bin/python bench/simulator_throughput.py --quick    # embedded workload only
    .venv/bin/python bench/simulator_throughput.py --baseline OLD.json   # adds a "before" column
    .venv/bin/python bench/simulator_throughput.py --cores compiled     # one event loop only

Each (workload, policy) runs in a fresh process pinned to one core (wall and CPU time are both
reported: when something else shares the core, jobs per CPU-second is the steadier figure), so the
peak RSS it reports is that run's own (trace load + bind + simulation), and no run warms another's
caches. Whole traces are simulated with the default configuration (EASY backfill, best-fit, noisy
estimates), on the Python event loop and on the compiled core side by side (``--cores``; the
"core" column says which loop ran: where the compiled core does not support a run, the Python
loop runs and the row says so). The compiled core's one-off cost of loading its machine code in a
fresh process is measured apart ("load s"). Targets (issue "Core"): >= 20,000 jobs/s with EASY
backfill; peak memory for the whole Philly subset < 1 GiB.
Prints a table and writes bench/results/simulator_throughput.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.policies import POLICY_NAMES, make_policy  # noqa: E402

WORKLOADS = ["philly", "openb-gpuspec33", "rltune-synthetic", "embedded"]
#: every registered policy but the clairvoyant ones (``sjf-oracle``)
POLICIES = [name for name in POLICY_NAMES if not make_policy(name).clairvoyant]
TARGET_JOBS_PER_S = 20_000
TARGET_PEAK_MIB = 1024


def _run_one(workload: str, policy: str, backfill: str, core: str, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from shared.policies import make_policy
    from shared.sim.config import SimConfig
    from shared.sim.evaluate import prepare_workload
    from shared.sim.simulator import Simulator

    work = prepare_workload(None if workload == "embedded" else workload, None, n_jobs=20_000, seed=0)
    load_s = 0.0
    if core == "compiled":
        # the compiled core's machine code is loaded from numba's cache (or compiled) on first
        # use in a process: paid here, on the first 50 jobs, and reported apart
        t0 = time.perf_counter()
        warm = Simulator(work.bound, make_policy(policy), SimConfig(backfill=backfill))
        warm.run((0, min(50, len(work.bound.jobs))))
        load_s = time.perf_counter() - t0
    sim = Simulator(work.bound, make_policy(policy), SimConfig(backfill=backfill))
    sim.core = core
    t0, c0 = time.perf_counter(), time.process_time()
    result = sim.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ran = sim.last_core
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put(
        {
            "workload": workload,
            "policy": policy,
            "core": core,
            "ran": ran,
            "load_s": load_s,
            "backfill": backfill,
            "jobs": len(work.bound.jobs),
            "wall_s": wall,
            "jobs_per_s": len(work.bound.jobs) / wall,
            "cpu_s": cpu,
            "jobs_per_cpu_s": len(work.bound.jobs) / cpu,
            "cycles": result.cycles,
            "max_queue": int(result.timeline_queued.max()) if len(result.timeline_queued) else 0,
            "peak_rss_mib": peak_kib / 1024,
        }
    )


def _before(before: dict[tuple[str, str, str], float], row: dict[str, object]) -> str:
    value = before.get((str(row["workload"]), str(row["policy"]), str(row["core"])))
    return "-" if value is None else f"{value:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="embedded workload only")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--backfill", default="easy")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "simulator_throughput.json"))
    ap.add_argument("--baseline", help="an earlier JSON of this benchmark: its jobs/s shown beside")
    ap.add_argument(
        "--cores",
        default="python,compiled",
        help="event loops to measure, each (workload, policy) on each in turn (Simulator.core)",
    )
    args = ap.parse_args()
    before: dict[tuple[str, str, str], float] = {}
    if args.baseline:
        old = json.loads(Path(args.baseline).read_text())
        before = {(r["workload"], r["policy"], r.get("core", "python")): r["jobs_per_s"] for r in old["rows"]}
    workloads = ["embedded"] if args.quick else args.workloads.split(",")
    policies = args.policies.split(",")
    console = Console(width=150)
    ctx = mp.get_context("spawn")
    rows = []
    load_before = os.getloadavg()
    with console.status("") as status:
        for wl in workloads:
            for pol in policies:
                for core in args.cores.split(","):
                    status.update(f"simulating {wl} with {pol} ({core})")
                    q = ctx.Queue()
                    p = ctx.Process(target=_run_one, args=(wl, pol, args.backfill, core, q))
                    p.start()
                    row = q.get()
                    p.join()
                    rows.append(row)
                    console.print(
                        f"{wl:18s} {pol:12s} {row['ran']:8s} {row['jobs_per_s']:>10,.0f} jobs/s "
                        f"{row['jobs_per_cpu_s']:>10,.0f} jobs/CPU-s"
                    )
    load_after = os.getloadavg()
    table = Table(
        title=f"Simulator throughput, single core, backfill={args.backfill}, best-fit "
        f"(load average {load_before[0]:.2f} before, {load_after[0]:.2f} after)"
    )
    for col in (
        "workload",
        "policy",
        "core",
        "load s",
        "jobs",
        "wall s",
        "jobs/s",
        "jobs/CPU-s",
        *(["before jobs/s"] if before else []),
        "target",
        "max queue",
        "peak RSS MiB",
    ):
        table.add_column(col, justify="right" if col not in ("workload", "policy", "core") else "left")
    for r in rows:
        ok = r["jobs_per_s"] >= TARGET_JOBS_PER_S
        table.add_row(
            r["workload"],
            r["policy"],
            str(r["ran"]),
            f"{r['load_s']:.2f}" if r["load_s"] else "-",
            f"{r['jobs']:,}",
            f"{r['wall_s']:.2f}",
            f"{r['jobs_per_s']:,.0f}",
            f"{r['jobs_per_cpu_s']:,.0f}",
            *([_before(before, r)] if before else []),
            "[green]met[/]" if ok else "[red]missed[/]",
            f"{r['max_queue']:,}",
            f"{r['peak_rss_mib']:.0f}",
        )
    console.print(table)
    philly = [r for r in rows if r["workload"] == "philly"]
    summary = {
        "target_jobs_per_s": TARGET_JOBS_PER_S,
        "target_peak_mib_philly": TARGET_PEAK_MIB,
        "philly_peak_rss_mib": max((r["peak_rss_mib"] for r in philly), default=None),
        "min_jobs_per_s": min(r["jobs_per_s"] for r in rows),
        "min_jobs_per_s_by_core": {
            c: min(r["jobs_per_s"] for r in rows if r["ran"] == c) for c in {str(r["ran"]) for r in rows}
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "python": platform.python_version(),
                "load_average_before": list(load_before),
                "load_average_after": list(load_after),
                "rows": rows,
                "summary": summary,
            },
            indent=2,
        )
    )
    console.print(summary)
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
