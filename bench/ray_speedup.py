"""Evaluation and training on 1 and 2 local worker processes against 1 and 2 Ray workers, side by side.

    .venv/bin/python bench/ray_speedup.py          # writes bench/results/ray_speedup.json
    .venv/bin/python bench/ray_speedup.py --windows 16 --epochs 2   # a quicker look

What runs: the shipped model (``shared/presets/models/embedded``) evaluated as ``hylo evaluate``
does (``evaluate_learned``: every baseline, the learned policy greedy and sampled, on 60
held-out windows of 800 jobs of the embedded workload compressed to ``--load``, overlapping: the
held-out part holds 10,000 jobs), and a short PPO training from scratch
as ``hylo train`` does (``train``, with validation windows), each under four placements of the
work (``shared.rl.parallel``): this process ("local, 1": what ``--workers 1`` does), 2 spawned
processes (``--workers 2``), and 1 and 2 Ray actors on a local Ray of 2 CPUs (``--ray --workers
1|2``).

Before the timed runs, a small evaluation and a one-episode training run here, untimed, so that
"local, 1" does not pay this process' first calls (numba's kernels loaded, torch's first
backward pass), which the workers pay in their start-up round. What is timed, per run:
"start-up", from opening the pool to the end of a first round of one short task per worker
(processes or actors started, Hylo imported, the workload received, numba's cached kernels
loaded); "work", the evaluation or the training itself on the started workers; "total", from
opening the pool to its close. The speed-ups divide local 1's time by each run's. Ray's own start
and stop (once for both Ray runs; ``hylo --ray`` pays it once per command) are timed apart.
"same" says whether the run's results equal local 1's: every window's metrics (evaluation), every
epoch's row less its timing columns and the final weights (training).

The machine's load average is printed and saved before and after: on 2 cores shared with other
work, the second worker competes with everything else for the second core.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.features import SamplingConfig  # noqa: E402
from shared.metrics import Window, chronological_split, make_windows  # noqa: E402
from shared.model import ActorCritic, ModelConfig  # noqa: E402
from shared.presets.shipped import MODELS_DIR  # noqa: E402
from shared.rl.episodes import EpisodeRunner  # noqa: E402
from shared.rl.evaluation import WindowTask, evaluate_learned  # noqa: E402
from shared.rl.parallel import LOCAL_RAY, Parallelism, RunnerPool, runner_pool  # noqa: E402
from shared.rl.setup import RunSetup, load_runner, load_trained  # noqa: E402
from shared.rl.trainer import TrainConfig, train  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 120)
#: the four placements, in the table's order: (name, workers, on Ray)
BACKENDS = (("local", 1, False), ("local", 2, False), ("ray", 1, True), ("ray", 2, True))


@dataclass
class Timed:
    startup_s: float
    work_s: float
    total_s: float
    result: Any


@contextmanager
def local_ray(cpus: int, timings: dict[str, float]) -> Iterator[None]:
    """One local Ray for every Ray run (no dashboard, quiet), its start and stop timed."""
    import ray

    t0 = time.perf_counter()
    ray.init(
        address=LOCAL_RAY,
        num_cpus=cpus,
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
        object_store_memory=256 * 1024 * 1024,
    )
    timings["ray_start_s"] = time.perf_counter() - t0
    try:
        yield
    finally:
        t1 = time.perf_counter()
        ray.shutdown()
        timings["ray_stop_s"] = time.perf_counter() - t1


def timed(runner: EpisodeRunner, model: ActorCritic, parallel: Parallelism, warm: Window, work: Any) -> Timed:
    """``work(pool)`` on a pool opened for ``parallel``, after a first round of one short task per
    worker (a base policy's run of ``warm``), which is what "start-up" times."""
    t0 = time.perf_counter()
    with runner_pool(runner, parallel) as pool:
        pool.map(model, [WindowTask("fcfs", k, warm, policy="fcfs") for k in range(parallel.workers)])
        t1 = time.perf_counter()
        result = work(pool)
        t2 = time.perf_counter()
    return Timed(t1 - t0, t2 - t1, time.perf_counter() - t0, result)


def same_evaluation(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every row's windows equal, field for field (NaN equal to NaN)."""
    try:
        np.testing.assert_equal(
            {p: [w.model_dump() for w in ws] for p, ws in a.items()},
            {p: [w.model_dump() for w in ws] for p, ws in b.items()},
        )
    except AssertionError:
        return False
    return True


def same_training(a: Any, b: Any) -> bool:
    """Every epoch's row less its timing columns, and the final weights, equal."""
    rows = [[{k: v for k, v in r.items() if not k.endswith("_s")} for r in x.history] for x in (a, b)]
    try:
        np.testing.assert_equal(rows[0], rows[1])
    except AssertionError:
        return False
    wa, wb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(wa[k], wb[k]) for k in wa)


def evaluation_part(args: argparse.Namespace, runner: EpisodeRunner) -> tuple[list[Any], list[Any]]:
    """The shipped model against ``--policies`` on held-out windows, under each backend."""
    model, _, _ = load_trained(MODELS_DIR / "embedded")
    _, test = chronological_split(len(runner.workload.jobs), args.train_fraction)
    windows = make_windows(test, args.window_size, args.windows, seed=0, overlap=True)
    policies = [p for p in args.policies.split(",") if p]

    def work(pool: RunnerPool) -> Any:
        return evaluate_learned(runner, model, windows, policies, sampled=True, seed=0, parallel=pool)

    evaluate_learned(runner, model, windows[:1], policies, sampled=True)  # this process warmed up, untimed
    tasks = len(windows) * (len(policies) + 2)
    label = f"evaluate: {len(windows)} windows of {args.window_size} jobs x {len(policies) + 2} rows"
    return run_backends(
        label, "evaluate", tasks, runner, model, windows[0], work, same_evaluation, args.repeats
    )


def training_part(args: argparse.Namespace, runner: EpisodeRunner) -> tuple[list[Any], list[Any]]:
    """A short PPO run from scratch (the same seed) under each backend."""
    shape = SamplingConfig(feature_set="classic")
    cfg = TrainConfig(
        epochs=args.epochs,
        windows_per_epoch=args.train_windows,
        window_size=args.train_window_size,
        seed=0,
        train_fraction=args.train_fraction,
        validation_windows=args.validation_windows,
        model=ModelConfig(obs_features=shape.n_observation, critic_features=shape.n_critic),
    )
    torch.manual_seed(0)
    model = ActorCritic(cfg.model).eval()  # only the warm-up round's (baseline) tasks use it
    warm = Window(0, args.train_window_size)

    def work(pool: RunnerPool) -> Any:
        return train(runner, cfg, pool=pool)

    warm_up = dataclasses.replace(cfg, epochs=1, windows_per_epoch=1, validation_windows=1)
    train(runner, warm_up)  # this process warmed up (the simulator, the policy, the PPO update), untimed
    tasks = args.epochs * args.train_windows + (args.epochs + 1) * args.validation_windows
    label = f"train: {args.epochs} epochs x {args.train_windows} episodes of {args.train_window_size} jobs"
    return run_backends(label, "train", tasks, runner, model, warm, work, same_training, args.repeats)


def run_backends(
    label: str,
    part: str,
    tasks: int,
    runner: EpisodeRunner,
    model: ActorCritic,
    warm: Window,
    work: Any,
    same: Any,
    repeats: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``work`` under each backend, ``repeats`` rounds of the four interleaved (the load of a
    shared machine moves: each backend gets its share of quiet and busy minutes), the Ray ones on
    a local Ray started and stopped once a round. Returns a row per backend (medians) and every
    run."""
    runs: list[dict[str, Any]] = []
    reference: Timed | None = None
    console.print(f"[bold]{label}[/] ({tasks} tasks, {repeats} rounds)")

    def one(backend: str, workers: int, on_ray: bool, round_: int) -> None:
        nonlocal reference
        parallel = Parallelism(workers, LOCAL_RAY if on_ray else None)
        load = os.getloadavg()[0]
        with console.status(f"round {round_ + 1}: {part} on {parallel.describe()}"):
            t = timed(runner, model, parallel, warm, work)
        reference = reference or t
        run = {
            "part": part,
            "backend": backend,
            "workers": workers,
            "round": round_,
            "load_1min_before": load,
            "startup_s": t.startup_s,
            "work_s": t.work_s,
            "total_s": t.total_s,
            "same_as_local_1": bool(same(reference.result, t.result)),
        }
        history = getattr(t.result, "history", None)
        if history:  # training: the rollouts (on the workers) and the PPO updates (here), summed
            run["rollout_s"] = sum(r.get("rollout_s", 0.0) for r in history)
            run["update_s"] = sum(r.get("update_s", 0.0) for r in history)
        runs.append(run)
        console.print(
            f"  round {round_ + 1}, {backend} {workers}: start-up {t.startup_s:.1f} s, "
            f"work {t.work_s:.1f} s, total {t.total_s:.1f} s, same {run['same_as_local_1']} "
            f"(load before {load:.1f})",
            highlight=False,
        )

    for round_ in range(repeats):
        for backend, workers, on_ray in BACKENDS:
            if not on_ray:
                one(backend, workers, on_ray, round_)
        timings: dict[str, float] = {}
        with local_ray(2, timings):
            for backend, workers, on_ray in BACKENDS:
                if on_ray:
                    one(backend, workers, on_ray, round_)
        runs.append({"part": part, "backend": "ray-itself", "round": round_, **timings})
    return summarize(part, tasks, runs), runs


def summarize(part: str, tasks: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per backend: the medians of its rounds, the speed-ups against local 1's medians."""
    rows: list[dict[str, Any]] = []
    for backend, workers, _ in BACKENDS:
        mine = [r for r in runs if r["backend"] == backend and r.get("workers") == workers]
        row: dict[str, Any] = {"part": part, "backend": backend, "workers": workers, "tasks": tasks}
        for key in ("startup_s", "work_s", "total_s", "load_1min_before"):
            row[key] = float(np.median([r[key] for r in mine]))
        row["work_s_min"] = min(r["work_s"] for r in mine)
        row["same_as_local_1"] = all(r["same_as_local_1"] for r in mine)
        rows.append(row)
    for row in rows:
        row["work_speedup"] = rows[0]["work_s"] / row["work_s"]
        row["total_speedup"] = rows[0]["total_s"] / row["total_s"]
    ray_runs = [r for r in runs if r["backend"] == "ray-itself"]
    for row in rows:
        if row["backend"] == "ray":
            row["ray_start_s"] = float(np.median([r["ray_start_s"] for r in ray_runs]))
            row["ray_stop_s"] = float(np.median([r["ray_stop_s"] for r in ray_runs]))
    return rows


def table(rows: list[dict[str, Any]], repeats: int) -> Table:
    t = Table(
        title=f"local worker processes vs Ray workers, medians of {repeats} rounds (x: local 1's time / this)"
    )
    names = (
        "part",
        "backend",
        "workers",
        "start-up s",
        "work s",
        "work min s",
        "total s",
        "work x",
        "total x",
    )
    for name in (*names, "load", "same"):
        t.add_column(name, justify="left" if name in ("part", "backend") else "right")
    for r in rows:
        t.add_row(
            r["part"],
            r["backend"],
            str(r["workers"]),
            f"{r['startup_s']:.1f}",
            f"{r['work_s']:.1f}",
            f"{r['work_s_min']:.1f}",
            f"{r['total_s']:.1f}",
            f"{r['work_speedup']:.2f}",
            f"{r['total_speedup']:.2f}",
            f"{r['load_1min_before']:.1f}",
            "yes" if r["same_as_local_1"] else "NO",
        )
    ray = {r["part"]: r for r in rows if "ray_start_s" in r}
    starts = ", ".join(
        f"{p}: start {r['ray_start_s']:.1f} s, stop {r['ray_stop_s']:.1f} s" for p, r in ray.items()
    )
    t.caption = f"load: the 1-minute load average before the run; a local Ray of 2 CPUs, apart ({starts})"
    return t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000, help="embedded workload size")
    p.add_argument("--load", type=float, default=12.0, help="offered load the arrivals are compressed to")
    p.add_argument("--window-size", type=int, default=800, help="jobs per evaluation window")
    p.add_argument("--windows", type=int, default=60, help="held-out windows evaluated (they may overlap)")
    p.add_argument("--policies", default="fcfs,sjf,wfp3,unicep,f1,multifactor", help="baselines evaluated")
    p.add_argument("--epochs", type=int, default=4, help="PPO epochs of the training part")
    p.add_argument("--train-windows", type=int, default=16, help="episodes per epoch")
    p.add_argument("--train-window-size", type=int, default=800, help="jobs per training episode")
    p.add_argument("--validation-windows", type=int, default=4)
    p.add_argument("--train-fraction", type=float, default=0.5, help="evaluation windows come from after it")
    p.add_argument("--part", choices=("evaluate", "train", "both"), default="both")
    p.add_argument("--repeats", type=int, default=2, help="rounds of the four runs, interleaved")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "ray_speedup.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    console.print(
        f"{os.cpu_count()} CPUs; load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}"
    )
    t0 = time.perf_counter()
    setup = RunSetup(
        base_policy="fcfs",
        metric="wait:0.5,bsld:0.5",
        warmup=0,
        seed=1,
        n_jobs=args.jobs,
        target_load=args.load,
    )
    work, runner = load_runner(None, None, setup)
    console.print(f"{work.name} on {work.spec.name}, loaded in {time.perf_counter() - t0:.1f} s")
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    parts = {"evaluate": [evaluation_part], "train": [training_part]}.get(
        args.part, [evaluation_part, training_part]
    )
    for part in parts:
        part_rows, part_runs = part(args, runner)
        rows += part_rows
        runs += part_runs
    load_after = os.getloadavg()
    console.print(table(rows, args.repeats))
    console.print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": "python bench/ray_speedup.py " + " ".join(sys.argv[1:]),
        "args": vars(args),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "load_average": {"before": load_before, "after": load_after},
        "rows": rows,
        "runs": runs,
        "wall_s": time.perf_counter() - t0,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
