"""Trainer numbers (issue 7): imitation warm start vs scratch, adaptation to a shifted workload,
rollout throughput with 1 and 2 workers. Small scale, on a synthetic 16-GPU cluster.

    nice -n 10 .venv/bin/python bench/trainer_warmstart.py warmstart --seeds 0 --epochs 20   # one seed a run
    nice -n 10 .venv/bin/python bench/trainer_warmstart.py adapt --source-epochs 20
    nice -n 10 .venv/bin/python bench/trainer_warmstart.py throughput --epochs 3

Each part updates its own entry of ``bench/results/trainer_warmstart.json`` (with the command, the
machine and its load average) and prints a table.

**Workloads.** ``A``: 16 GPUs (4 nodes x 4), Poisson arrivals at offered load 1.1, jobs of 1-8 GPUs
(1, 1, 2, 4, 8 equally likely), log-normal runtimes (log-mean 6, sd 1.2, about 400 s median),
estimates 1-3x the runtime. ``B`` (the shift): jobs of 1-8 GPUs weighted to larger ones (1, 2, 4,
4, 8), runtimes e times longer (log-mean 7), offered load 1.3. Base policy SJF (FCFS is beaten by
an untrained model on these workloads, which would make "time to beat the base" meaningless),
metric mean wait, windows of 128 jobs after 64 warm-up jobs, 90/10 chronological split.

1. **warmstart**: per seed, PPO from random weights and PPO after ``--imitation-epochs`` of
   imitation, same seed, same epochs. "Beats the base" = the greedy model's mean wait on the
   trainer's validation windows (end of the training part, never trained on) is below SJF's; the
   first epoch (and wall time, imitation included) where that happens, and the held-out test
   result of the best-validation model.
2. **adapt**: a model trained on ``A`` (imitation + ``--source-epochs`` PPO epochs, seed 0) is
   fine-tuned on ``B`` for N = 1, 5, 20 epochs (a fresh run per N, from the same weights); each
   best-validation model is scored on ``B``'s held-out windows against SJF, beside N = 0 (the
   ``A`` model as is) and a model trained on ``B`` from scratch for 20 epochs.
3. **throughput**: rollout decisions per second of ``train`` (``decisions / rollout seconds`` of each
   epoch, mean over epochs) with 1 and 2 worker processes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared.domain.cluster import parse_cluster_spec  # noqa: E402
from shared.domain.jobs import build_table  # noqa: E402
from shared.imitation import ImitationConfig, imitate  # noqa: E402
from shared.metrics import chronological_split, make_windows  # noqa: E402
from shared.model import ActorCritic, ModelConfig  # noqa: E402
from shared.rl.episodes import EpisodeRunner  # noqa: E402
from shared.rl.evaluation import GREEDY, evaluate_learned, mean_metric  # noqa: E402
from shared.rl.setup import RunSetup  # noqa: E402
from shared.rl.trainer import TrainConfig, split_windows, train  # noqa: E402
from shared.sim.binding import BoundWorkload, bind_jobs  # noqa: E402

OUT = ROOT / "bench" / "results" / "trainer_warmstart.json"
BASE, METRIC = "sjf", "wait"
console = Console()


def workload(shifted: bool, n_jobs: int, seed: int) -> BoundWorkload:
    groups = [{"name": "g0", "gpu_type": "V100", "count": 4, "gpus": 4, "cpus": 64, "mem_gib": 512}]
    spec = parse_cluster_spec({"name": "small-16", "node_groups": groups}, "bench")
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 4, 8] if shifted else [1, 1, 2, 4, 8], size=n_jobs)
    runtime = np.round(np.exp(rng.normal(7.0 if shifted else 6.0, 1.2, size=n_jobs)) + 10)
    rate = (1.3 if shifted else 1.1) * 16 / float(np.mean(gpus * runtime))
    submit = np.cumsum(rng.exponential(1 / rate, size=n_jobs))
    estimate = np.round(runtime * rng.uniform(1.0, 3.0, size=n_jobs))
    table = build_table(
        ids=[f"j{k}" for k in range(n_jobs)],
        submit=submit.tolist(),
        runtime=runtime.tolist(),
        estimate=estimate.tolist(),
        gpus=gpus.tolist(),
    )
    return bind_jobs(table, spec)


def runner_for(bound: BoundWorkload) -> EpisodeRunner:
    return EpisodeRunner(bound, RunSetup(base_policy=BASE, metric=METRIC, warmup=64).episode_settings())


def config(args: argparse.Namespace, seed: int, epochs: int, workers: int = 1) -> TrainConfig:
    return TrainConfig(
        epochs=epochs,
        windows_per_epoch=args.windows_per_epoch,
        window_size=128,
        seed=seed,
        workers=workers,
        validation_windows=args.validation_windows,
        model=ModelConfig(),
    )


def warm_state(
    runner: EpisodeRunner, cfg: TrainConfig, epochs: int, n_windows: int
) -> tuple[dict[str, torch.Tensor], float]:
    fit, _ = split_windows(len(runner.workload.jobs), cfg)
    windows = make_windows(fit, cfg.window_size, n_windows, seed=cfg.seed, overlap=True)
    res = imitate(runner, windows, cfg.model, ImitationConfig(epochs=epochs, seed=cfg.seed))
    return res.state, res.wall_seconds


def held_out(runner: EpisodeRunner, model: ActorCritic, windows: int) -> dict[str, float]:
    _, test = chronological_split(len(runner.workload.jobs), 0.9)
    ws = make_windows(test, 128, windows, seed=0, overlap=True)
    per = evaluate_learned(runner, model, ws, [BASE], sampled=False)
    learned, base = mean_metric(per[GREEDY], METRIC), mean_metric(per[BASE], METRIC)
    return {"learned": learned, "base": base, "improvement": (base - learned) / base if base else 0.0}


def part_warmstart(args: argparse.Namespace) -> dict[str, Any]:
    runner = runner_for(workload(False, args.jobs, 0))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for mode in ("scratch", "imitation"):
            cfg = config(args, seed, args.epochs)
            state, imitation_s = (None, 0.0)
            if mode == "imitation":
                state, imitation_s = warm_state(runner, cfg, args.imitation_epochs, args.imitation_windows)
            result = train(runner, cfg, initial_state=state)
            beat = next(
                (r for r in result.history if "val_agent" in r and r["val_agent"] < r["val_base"]), None
            )
            test = held_out(runner, result.best_model, args.test_windows)
            rows.append(
                {
                    "seed": seed,
                    "start": mode,
                    "imitation_s": imitation_s,
                    "first_epoch_beating_base": None if beat is None else int(beat["epoch"]),
                    "seconds_to_beat_base": None if beat is None else imitation_s + beat["wall_s"],
                    "val_wait_epoch0": result.history[0].get("val_agent"),
                    "val_wait_base": result.history[0].get("val_base"),
                    "best_epoch": result.best_epoch,
                    "train_seconds": imitation_s + result.wall_seconds,
                    "held_out_wait": test["learned"],
                    "held_out_base_wait": test["base"],
                    "held_out_improvement": test["improvement"],
                }
            )
            console.print(rows[-1], highlight=False)
    table = Table(title=f"warm start vs scratch (base {BASE}, mean wait, {args.epochs} epochs)")
    for col in (
        "seed",
        "start",
        "epoch beating base",
        "s to beat base",
        "val wait ep.0 / base",
        "held-out vs base",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["seed"]),
            r["start"],
            str(r["first_epoch_beating_base"]),
            "-" if r["seconds_to_beat_base"] is None else f"{r['seconds_to_beat_base']:.1f}",
            f"{r['val_wait_epoch0']:.0f} / {r['val_wait_base']:.0f}",
            f"{r['held_out_wait']:.0f} vs {r['held_out_base_wait']:.0f} ({r['held_out_improvement']:+.1%})",
        )
    console.print(table)
    return {"rows": rows}


def part_adapt(args: argparse.Namespace) -> dict[str, Any]:
    source = runner_for(workload(False, args.jobs, 0))
    target = runner_for(workload(True, args.jobs, 1))
    cfg = config(args, 0, args.source_epochs)
    state, _ = warm_state(source, cfg, args.imitation_epochs, args.imitation_windows)
    trained = train(source, cfg, initial_state=state).best_model
    source_state = {k: v.detach().clone() for k, v in trained.state_dict().items()}
    rows = [
        {
            "fine_tune_epochs": 0,
            "from": "A model",
            **held_out(target, trained, args.test_windows),
            "seconds": 0.0,
        }
    ]

    def row(n: int, start: str, res: Any) -> dict[str, Any]:
        best = held_out(target, res.best_model, args.test_windows)
        last = held_out(target, res.model, args.test_windows)
        out = {"fine_tune_epochs": n, "from": start, **best, "best_epoch": res.best_epoch}
        return {**out, "last_epoch_improvement": last["improvement"], "seconds": res.wall_seconds}

    for n in (1, 5, 20):
        rows.append(row(n, "A model", train(target, config(args, 0, n), initial_state=source_state)))
        console.print(rows[-1], highlight=False)
    rows.append(row(20, "scratch", train(target, config(args, 0, 20))))
    table = Table(title=f"adaptation to workload B (held-out mean wait vs {BASE})")
    columns = ("epochs on B", "start", "best epoch", "learned wait", f"{BASE} wait", "improvement")
    for col in (*columns, "last epoch's", "train s"):
        table.add_column(col)
    for r in rows:
        last_imp = r.get("last_epoch_improvement")
        table.add_row(
            str(r["fine_tune_epochs"]),
            r["from"],
            str(r.get("best_epoch", "-")),
            f"{r['learned']:.0f}",
            f"{r['base']:.0f}",
            f"{r['improvement']:+.1%}",
            "-" if last_imp is None else f"{last_imp:+.1%}",
            f"{r['seconds']:.1f}",
        )
    console.print(table)
    return {"rows": rows, "source_epochs": args.source_epochs}


def part_throughput(args: argparse.Namespace) -> dict[str, Any]:
    runner = runner_for(workload(False, args.jobs, 0))
    rows = []
    for workers in (1, 2):
        cfg = config(args, 0, args.epochs, workers)
        cfg.validation_windows = 0
        res = train(runner, cfg)
        epochs = [r for r in res.history if r["epoch"] >= 1]
        decisions = sum(r["decisions"] for r in epochs)
        rollout = sum(r["rollout_s"] for r in epochs)
        rows.append(
            {
                "workers": workers,
                "decisions": decisions,
                "rollout_s": rollout,
                "decisions_per_s": decisions / rollout,
            }
        )
    table = Table(title="trainer rollout throughput")
    for col in ("workers", "decisions", "rollout s", "decisions/s"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["workers"]), f"{r['decisions']:.0f}", f"{r['rollout_s']:.1f}", f"{r['decisions_per_s']:.0f}"
        )
    console.print(table)
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=("warmstart", "adapt", "throughput"))
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--source-epochs", type=int, default=20)
    parser.add_argument("--windows-per-epoch", type=int, default=8)
    parser.add_argument("--validation-windows", type=int, default=8)
    parser.add_argument("--test-windows", type=int, default=10)
    parser.add_argument("--imitation-epochs", type=int, default=20)
    parser.add_argument("--imitation-windows", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    result = {"warmstart": part_warmstart, "adapt": part_adapt, "throughput": part_throughput}[args.part](
        args
    )
    result.update(
        {
            "command": " ".join(["bench/trainer_warmstart.py", *sys.argv[1:]]),
            "args": vars(args),
            "wall_seconds": time.perf_counter() - t0,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "scale": "small (synthetic 16-GPU cluster, 128-job windows)",
        }
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.part == "warmstart" and "warmstart" in previous:  # runs of other seeds are kept
        seeds = {r["seed"] for r in result["rows"]}
        kept = [r for r in previous["warmstart"].get("rows", []) if r["seed"] not in seeds]
        runs = [c for c in previous["warmstart"].get("runs", []) if c.get("seeds") != args.seeds]
        result["rows"] = sorted(kept + result["rows"], key=lambda r: (r["seed"], r["start"]))
        result["runs"] = [*runs, {"seeds": args.seeds, "command": result["command"], "load": load_before}]
    previous[args.part] = result
    OUT.write_text(json.dumps(previous, indent=2))
    console.print(
        f"wrote {OUT} ({args.part}), {result['wall_seconds']:.0f} s, load {load_before} -> {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
