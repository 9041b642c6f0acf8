"""CP-SAT placer latency (issue 4): p50/p99 of one batch placement call, K = 8 and 16.

    .venv/bin/python bench/placer_latency.py                  # openb and Philly, 20 states x 10 queues
    .venv/bin/python bench/placer_latency.py --states 5 --queues 4

States are realistic and busy: jobs drawn from the real trace (a random window of it, in trace
order, cycling) are placed with best-fit until the cluster's GPUs are 80-90% busy (a random target
per state; the fill stops earlier if 500 jobs in a row do not fit). The queue of each call is the
next K + lookahead jobs of the trace after the fill. Every call is timed end to end (warm start,
aggregation, model build, solve, decode, check) with the default settings (10 ms limit,
deterministic limit, K as given), in wall-clock time (what the target is about) and in the
process's CPU time (which excludes waiting for a core on a shared machine). Calls where nothing
fits return before any model is built; they are counted but reported apart, so that they do not
flatter the percentiles.

Also reported, against best-fit on the same inputs: jobs started, priority-weighted work started
(tier b coefficients) and fragmented nodes. Prints a table and writes
bench/results/placer_latency.json. Target (issue 4): p99 <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.domain.jobs import WHOLE_GPU_MILLI  # noqa: E402
from shared.placement import CpSatPlacer, JobRequest, PlacerSettings, SolveStatus  # noqa: E402
from shared.placement.tiers import work_coefficients  # noqa: E402
from shared.placement.warmstart import best_fit_batch, partial_copy  # noqa: E402
from shared.policies import make_policy  # noqa: E402
from shared.scheduling.binding import BoundWorkload  # noqa: E402
from shared.scheduling.placement import BestFit  # noqa: E402
from shared.scheduling.state import Alloc, ClusterState  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.evaluate import prepare_workload  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402

TRACES = {"openb-gpuspec33": "alibaba-openb", "philly": "philly"}
TARGET_P99_MS = 10.0


def _requests(w: BoundWorkload, rows: np.ndarray) -> list[JobRequest]:
    j = w.jobs
    out = []
    for r in rows.tolist():
        est = float(j.estimate[r])
        out.append(
            JobRequest(
                *w.request(r),
                1.0,
                est if np.isfinite(est) else float(j.runtime[r]),
            )
        )
    return out


def busy_state(w: BoundWorkload, rng: np.random.Generator) -> tuple[ClusterState, int, float]:
    """Fill the cluster with trace jobs by best-fit to a random 80-90% GPU load.

    Returns the state, the trace row after the last job tried, and the load reached.
    """
    jobs = w.jobs
    frac = {
        g for c in np.unique(w.job_class[jobs.gpu_milli < WHOLE_GPU_MILLI]) for g in w.class_groups[int(c)]
    }
    st = ClusterState(w.spec, frac)
    target = float(rng.uniform(0.80, 0.90)) * WHOLE_GPU_MILLI * w.spec.total_gpus
    n = len(jobs)
    row = int(rng.integers(n))
    bf = BestFit()
    misses = 0
    while st.busy_milli < target and misses < 500:
        r = row % n
        row += 1
        a = bf.place(st, *w.request(r))
        if a is None:
            misses += 1
            continue
        misses = 0
        st.take(a)
    return st, row, st.busy_milli / (WHOLE_GPU_MILLI * w.spec.total_gpus)


def fragmented(st: ClusterState, allocs: list[Alloc | None]) -> int:
    """Nodes of the whole cluster with 0 < free whole GPUs < GPUs per node after the allocations."""
    copy = partial_copy(st, {a.group for a in allocs if a is not None})
    for a in allocs:
        if a is not None:
            copy.take(a)
    return sum(int(((gs.whole > 0) & (gs.whole < gs.G)).sum()) for gs in copy.groups if gs.G >= 2)


def run(trace: str, ks: list[int], states: int, queues: int, seed: int) -> list[dict[str, Any]]:
    work = prepare_workload(trace, None, seed=seed)
    w = work.bound
    rng = np.random.default_rng(seed)
    n = len(w.jobs)
    calls: dict[int, list[dict[str, Any]]] = {k: [] for k in ks}
    loads = []
    placers = {k: CpSatPlacer(PlacerSettings(k=k)) for k in ks}
    lookahead = PlacerSettings().lookahead
    for _ in range(states):
        st, row, load = busy_state(w, rng)
        loads.append(load)
        for q in range(queues):
            for k in ks:
                rows = (row + q * (k + lookahead) + np.arange(k + lookahead)) % n
                queue = _requests(w, rows)
                placers[k].place_batch(st, queue)  # warm caches of this shape once, untimed
                c0 = time.process_time()
                res = placers[k].place_batch(st, queue)
                cpu_ms = (time.process_time() - c0) * 1e3
                batch = queue[:k]
                t0 = time.perf_counter()
                greedy = best_fit_batch(st, batch, 0)
                bf_s = time.perf_counter() - t0
                coefs = work_coefficients(batch, placers[k].settings)
                calls[k].append(
                    {
                        "wall_ms": res.wall_s * 1e3,
                        "cpu_ms": cpu_ms,
                        "solve_ms": res.solve_s * 1e3,
                        "best_fit_ms": bf_s * 1e3,
                        "status": res.status.value,
                        "deterministic": res.deterministic,
                        "vars": res.model_vars,
                        "constraints": res.model_constraints,
                        "started": res.terms.started,
                        "started_bf": sum(a is not None for a in greedy),
                        "work": sum(c for c, a in zip(coefs, res.allocs, strict=True) if a),
                        "work_bf": sum(c for c, a in zip(coefs, greedy, strict=True) if a),
                        "frag": fragmented(st, res.allocs),
                        "frag_bf": fragmented(st, greedy),
                    }
                )
    rows_out = []
    for k in ks:
        cs = calls[k]
        solved = [c for c in cs if c["status"] != SolveStatus.NOTHING_FITS.value]
        wall = np.array([c["wall_ms"] for c in solved]) if solved else np.zeros(1)
        statuses = Counter(c["status"] for c in cs)
        fallback = statuses[SolveStatus.TIMEOUT_FALLBACK.value] + statuses[SolveStatus.ERROR_FALLBACK.value]
        rows_out.append(
            {
                "trace": trace,
                "cluster": TRACES[trace],
                "k": k,
                "calls": len(cs),
                "solved_calls": len(solved),
                "mean_load": float(np.mean(loads)),
                "p50_ms": float(np.percentile(wall, 50)),
                "p90_ms": float(np.percentile(wall, 90)),
                "p99_ms": float(np.percentile(wall, 99)),
                "max_ms": float(wall.max()),
                "p50_all_calls_ms": float(np.percentile([c["wall_ms"] for c in cs], 50)),
                "cpu_p50_ms": float(np.percentile([c["cpu_ms"] for c in solved] or [0], 50)),
                "cpu_p99_ms": float(np.percentile([c["cpu_ms"] for c in solved] or [0], 99)),
                "solve_p50_ms": float(np.percentile([c["solve_ms"] for c in solved] or [0], 50)),
                "solve_p99_ms": float(np.percentile([c["solve_ms"] for c in solved] or [0], 99)),
                "best_fit_p50_ms": float(np.percentile([c["best_fit_ms"] for c in cs], 50)),
                "statuses": dict(statuses),
                "fallback_rate": fallback / max(1, len(solved)),
                "nondeterministic_rate": sum(not c["deterministic"] for c in cs) / len(cs),
                "vars_p50": float(np.percentile([c["vars"] for c in solved] or [0], 50)),
                "vars_max": int(max([c["vars"] for c in solved] or [0])),
                "started": sum(c["started"] for c in cs),
                "started_bf": sum(c["started_bf"] for c in cs),
                "work": sum(c["work"] for c in cs),
                "work_bf": sum(c["work_bf"] for c in cs),
                "frag": sum(c["frag"] for c in cs),
                "frag_bf": sum(c["frag_bf"] for c in cs),
            }
        )
    return rows_out


#: the in-simulation measure: trace -> offered load of the replay (openb's own pace never queues),
#: in the capped definition these numbers were measured with (in-span reaches at most 0.09 on openb)
SIM_LOADS = {"openb-gpuspec33": 0.5, "philly": None}


def in_simulation(trace: str, ks: list[int], jobs: int, seed: int) -> list[dict[str, Any]]:
    """Latency of the calls the simulator makes, as deployed: FCFS, EASY, reservation caps and
    type-reserve prices inside the model (the synthetic states above call without them)."""
    work = prepare_workload(
        trace, None, seed=seed, target_load=SIM_LOADS.get(trace), load_definition="capped"
    )
    out = []
    for k in ks:
        config = SimConfig(placement="cp-sat", cpsat_k=k)
        n = min(jobs, len(work.bound.jobs))
        result = Simulator(work.bound, make_policy("fcfs"), config).run(job_range=(0, n))
        st = result.placer_stats
        out.append(
            {
                "trace": trace,
                "cluster": TRACES[trace],
                "k": k,
                "jobs": n,
                "model_calls": int(st.get("model_calls", 0)),
                "p50_ms": st.get("call_ms_p50", 0.0),
                "p99_ms": st.get("call_ms_p99", 0.0),
                "max_ms": st.get("call_ms_max", 0.0),
                "timeouts": int(st.get(f"status_{SolveStatus.TIMEOUT_FALLBACK.value}", 0)),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--k", default="8,16")
    ap.add_argument("--states", type=int, default=20)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sim-jobs", type=int, default=3000, help="jobs simulated for the in-simulation measure")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "placer_latency.json"))
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]
    console = Console(width=200)
    rows: list[dict[str, Any]] = []
    load0 = os.getloadavg()[0]
    with console.status("") as status:
        for trace in args.traces.split(","):
            status.update(f"{trace}: filling clusters and placing batches")
            rows.extend(run(trace, ks, args.states, args.queues, args.seed))
        sim_rows: list[dict[str, Any]] = []
        for trace in args.traces.split(","):
            status.update(f"{trace}: simulating {args.sim_jobs} jobs with CP-SAT placement")
            sim_rows.extend(in_simulation(trace, ks, args.sim_jobs, args.seed))
    load1 = os.getloadavg()[0]
    table = Table(title="CP-SAT placer latency per call (wall, ms; calls where nothing fits excluded)")
    cols = [
        "cluster",
        "K",
        "calls",
        "load",
        "p50",
        "p90",
        "p99",
        "max",
        "target",
        "CPU p50/p99",
        "solve p50/p99",
    ]
    cols += ["fallback", "vars p50/max", "started (bf)", "work vs bf", "frag (bf)"]
    for col in cols:
        table.add_column(col, justify="left" if col == "cluster" else "right")
    for r in rows:
        ok = r["p99_ms"] <= TARGET_P99_MS
        table.add_row(
            r["cluster"],
            str(r["k"]),
            f"{r['solved_calls']}/{r['calls']}",
            f"{r['mean_load']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p90_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['max_ms']:.2f}",
            "[green]met[/]" if ok else "[red]missed[/]",
            f"{r['cpu_p50_ms']:.2f}/{r['cpu_p99_ms']:.2f}",
            f"{r['solve_p50_ms']:.2f}/{r['solve_p99_ms']:.2f}",
            f"{100 * r['fallback_rate']:.1f}%",
            f"{r['vars_p50']:.0f}/{r['vars_max']}",
            f"{r['started']} ({r['started_bf']})",
            f"{100 * (r['work'] / max(1, r['work_bf']) - 1):+.2f}%",
            f"{r['frag']} ({r['frag_bf']})",
        )
    console.print(table)
    for r in rows:
        console.print(f"{r['cluster']} K={r['k']}: statuses {r['statuses']}")
    sim_table = Table(
        title="the same, for the calls a simulation makes (caps and type-reserve prices in the model)"
    )
    for col in ("cluster", "K", "jobs", "model calls", "p50", "p99", "max", "target", "timeouts"):
        sim_table.add_column(col, justify="left" if col == "cluster" else "right")
    for r in sim_rows:
        sim_table.add_row(
            r["cluster"],
            str(r["k"]),
            f"{r['jobs']:,}",
            f"{r['model_calls']:,}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['max_ms']:.2f}",
            "[green]met[/]" if r["p99_ms"] <= TARGET_P99_MS else "[red]missed[/]",
            str(r["timeouts"]),
        )
    console.print(sim_table)
    console.print(f"load average (1 min) before/after: {load0:.2f}/{load1:.2f}, {os.cpu_count()} CPUs")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_average_1min": [load0, load1],
                "settings": PlacerSettings().model_dump(),
                "states": args.states,
                "queues": args.queues,
                "target_p99_ms": TARGET_P99_MS,
                "rows": rows,
                "in_simulation": sim_rows,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
