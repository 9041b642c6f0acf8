"""Trainer numbers (issue 7): imitation warm start vs scratch, adaptation to a shifted workload,
rollout throughput with 1 and 2 workers. Two modes: a small synthetic one (below) and a real-trace
one (``--trace``: e.g. Philly on a 192-GPU cluster, held-out windows scored with paired bootstrap
CIs during training; "Real-trace mode" below).

    nice -n 10 .venv/bin/python bench/trainer_warmstart.py warmstart --seeds 0 --epochs 20   # one seed a run
    nice -n 10 .venv/bin/python bench/trainer_warmstart.py adapt --source-epochs 20
    nice -n 10 .venv/bin/python bench/trainer_warmstart.py throughput --epochs 3
    nice -n 10 .venv/bin/python bench/trainer_warmstart.py warmstart --trace philly \
        --cluster docs/results/clusters/philly-rltune.toml --seeds 0

Each part updates its own entry of ``bench/results/trainer_warmstart.json`` (``<part>`` for the
synthetic mode, ``<part>:<trace>`` for a trace; with the command, the machine and its load
average) and prints a table.

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

**Real-trace mode** (``--trace NAME --cluster SPEC``; ``docs/results/trainer.md`` has the commands
and results for Philly). ``hylo train``'s honest setting (EASY backfill, noisy estimates, 256
warm-up jobs), base FCFS, metric wait, 256-job windows, 16 per epoch, PPO learning rate 1e-3, 8
update epochs, minibatch 128, the KL early stop checked from the second update epoch on
(``--kl-min-epochs 1``, ``PPOConfig.kl_min_epochs``); imitation on 64 windows (the input-sparse
fit of ``shared/imitation/fit.py`` needs that many decisions to drop every feature but ``wait`` on
Philly). The trainer's validation is off: the current model is scored after
every ``--score-every`` epochs, greedy, on ``--test-windows`` fixed non-overlapping windows of the
newest 10% of the trace, paired against the base with ``paired_difference``'s 95% bootstrap
interval (what ``hylo evaluate`` reports). "Beats the base" = mean improvement > 0 and the
interval's lower end > 0. Training times leave the scoring out and include the imitation.

1. **warmstart**: per seed and start (scratch, imitation), train until ``--budget-minutes`` of
   training or ``--after-beat`` scored epochs after the first beat; the first beat's epoch and
   time, and whether later epochs still beat.
2. **adapt**: the trace cut at ``--shift-at`` (share of jobs): a model trained on the early period
   (``--source-epochs``, best by 16 validation windows) fine-tuned on the later one, whose held-out
   part is the trace's last 10%, scored at ``--adapt-epochs`` beside PPO from scratch on the later
   period; the two periods' statistics are measured first.
3. **throughput**: as above, on the trace.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import shared.rl.trainer as trainer_module  # noqa: E402
from shared.domain.cluster import parse_cluster_spec  # noqa: E402
from shared.domain.jobs import build_table  # noqa: E402
from shared.imitation import ImitationConfig, agreement, collect_base, imitate  # noqa: E402
from shared.metrics import (  # noqa: E402
    Window,
    WindowMetrics,
    chronological_split,
    get_spec,
    make_windows,
    paired_difference,
)
from shared.model import ActorCritic, ModelConfig  # noqa: E402
from shared.rl.episodes import EpisodeRunner  # noqa: E402
from shared.rl.evaluation import GREEDY, evaluate_learned, mean_metric  # noqa: E402
from shared.rl.ppo import PPOConfig  # noqa: E402
from shared.rl.setup import RunSetup  # noqa: E402
from shared.rl.trainer import TrainConfig, split_windows, train  # noqa: E402
from shared.scheduling.binding import BoundWorkload, bind_jobs  # noqa: E402
from shared.sim.evaluate import PreparedWorkload, prepare_workload  # noqa: E402

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
            str(r["start"]),
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
            str(r["from"]),
            str(r.get("best_epoch", "-")),
            f"{r['learned']:.0f}",
            f"{r['base']:.0f}",
            f"{r['improvement']:+.1%}",
            "-" if last_imp is None else f"{last_imp:+.1%}",
            f"{r['seconds']:.1f}",
        )
    console.print(table)
    return {"rows": rows, "source_epochs": args.source_epochs}


# -- real-trace mode (--trace) ------------------------------------------------------------------
#
# The trainer's own validation windows (end of the training part) are turned off here: every
# model is instead scored on a fixed set of HELD-OUT windows (non-overlapping, from the newest
# part of the trace, never trained on), greedy, against the base policy on the same windows, with
# the paired 95% bootstrap interval ``hylo evaluate`` reports (``PolicyComparison.vs_baseline``).
# "Beats the base" = mean improvement > 0 AND the interval's lower end > 0.


class _StopRun(Exception):
    """Raised from the progress hook to end a run early: its budget is spent or the base is beaten."""


@contextmanager
def captured_model() -> Iterator[list[ActorCritic]]:
    """The model ``train`` is updating, for scoring it between epochs.

    ``train``'s progress hook receives only the epoch's row, not the model, so the model is taken
    from the first ``ppo_update`` call (the trainer updates one model in place all run long).
    """
    seen: list[ActorCritic] = []
    original = getattr(trainer_module, "ppo_update")  # noqa: B009 (not re-exported: mypy)

    def update(model: ActorCritic, *args: Any, **kwargs: Any) -> Any:
        if not seen:
            seen.append(model)
        return original(model, *args, **kwargs)

    setattr(trainer_module, "ppo_update", update)  # noqa: B010
    try:
        yield seen
    finally:
        setattr(trainer_module, "ppo_update", original)  # noqa: B010


class HeldOut:
    """Fixed held-out windows with the base policy's values, and the paired comparison on them.

    The comparison is ``paired_difference`` with its defaults, what ``hylo evaluate``'s
    ``PolicyComparison.vs_baseline`` computes: relative improvement of the mean over the windows
    (positive = better), 95% percentile bootstrap over windows, seed 0.
    """

    def __init__(self, runner: EpisodeRunner, test: range, count: int, size: int, metric: str) -> None:
        self.runner = runner
        self.windows: list[Window] = make_windows(test, size, count, seed=0)
        self.spec = get_spec(f"{metric}_mean")
        self.base = self.values([runner.simulate(runner.settings.base_policy, w) for w in self.windows])

    def values(self, per: list[WindowMetrics]) -> list[float]:
        return [float(self.spec.extract(w)) for w in per]

    def score(self, model: ActorCritic) -> list[float]:
        return self.values(evaluate_learned(self.runner, model, self.windows, [], sampled=False)[GREEDY])

    def compare(self, cand: list[float], ref: list[float] | None = None) -> dict[str, Any]:
        """``cand`` vs ``ref`` (default: the base policy), paired over the windows, 95% CI."""
        ref = self.base if ref is None else ref
        d = paired_difference(cand, ref, lower_is_better=self.spec.lower_is_better)
        return {
            "value": float(np.mean(cand)),
            "ref_value": float(np.mean(ref)),
            "improvement": d.rel_improvement,
            "ci_low": d.rel_low,
            "ci_high": d.rel_high,
            "beats": bool(d.rel_improvement > 0 and d.rel_low > 0),
            "per_window": cand,
        }


def real_setup(args: argparse.Namespace) -> RunSetup:
    """``hylo train``'s honest defaults: EASY backfill, noisy estimates, 256 warm-up jobs."""
    return RunSetup(base_policy=args.base, metric=args.metric)


def real_workload(args: argparse.Namespace) -> PreparedWorkload:
    setup = real_setup(args)
    return prepare_workload(args.trace, args.cluster, seed=setup.seed, estimates=setup.estimates)


def period(work: PreparedWorkload, start: int, stop: int) -> BoundWorkload:
    """Jobs ``start..stop-1`` of the bound trace as a workload of their own (rebound, same cluster)."""
    return bind_jobs(work.bound.jobs.take(np.arange(start, stop)), work.spec)


def fresh_runner(bound: BoundWorkload, args: argparse.Namespace) -> EpisodeRunner:
    """A runner with an empty base-policy cache, so no run profits from an earlier run's base episodes."""
    return EpisodeRunner(bound, real_setup(args).episode_settings())


def real_config(
    args: argparse.Namespace, seed: int, epochs: int, workers: int = 1, train_fraction: float = 0.9
) -> TrainConfig:
    """``hylo train`` defaults with the PPO settings of the Philly runs in learned-prioritizer.md s.3."""
    return TrainConfig(
        epochs=epochs,
        windows_per_epoch=args.windows_per_epoch,
        window_size=args.window_size,
        seed=seed,
        workers=workers,
        train_fraction=train_fraction,
        validation_windows=0,
        model=ModelConfig(),
        ppo=PPOConfig(
            learning_rate=args.learning_rate,
            update_epochs=args.update_epochs,
            minibatch_size=args.minibatch_size,
            kl_min_epochs=args.kl_min_epochs,
        ),
    )


def timed_imitation(
    runner: EpisodeRunner, cfg: TrainConfig, args: argparse.Namespace, check: list[Window] | None = None
) -> tuple[dict[str, torch.Tensor], float, dict[str, float]]:
    """The warm start, its wall time (demonstration collection included) and its fit.

    With ``check`` (held-out windows), also how closely the imitation's greedy order agrees with
    the base policy's on those windows' decisions (Kendall tau, top-1; not timed).
    """
    t0 = time.perf_counter()
    fit, _ = split_windows(len(runner.workload.jobs), cfg)
    windows = make_windows(fit, cfg.window_size, args.imitation_windows, seed=cfg.seed, overlap=True)
    res = imitate(runner, windows, cfg.model, ImitationConfig(epochs=args.imitation_epochs, seed=cfg.seed))
    info = {
        "demonstrations": float(res.demonstrations),
        "nll_per_pick_first": res.history[0]["nll_per_pick"],
        "nll_per_pick_last": res.history[-1]["nll_per_pick"],
        "inputs_used": res.history[-1]["inputs_used"],
    }
    seconds = time.perf_counter() - t0
    if check:
        agreed = agreement(model_of(cfg, res.state), collect_base(runner, check))
        info.update({"held_out_kendall_tau": agreed.kendall_tau, "held_out_top1": agreed.top1})
        info["held_out_queues"] = float(agreed.queues)
    console.print(f"imitation: {info}", highlight=False)
    return res.state, seconds, info


def scored_run(
    runner: EpisodeRunner,
    held: HeldOut,
    cfg: TrainConfig,
    start: dict[str, torch.Tensor] | None,
    offset_s: float,
    due: Callable[[int], bool],
    budget_s: float | None,
    after_beat: int | None,
) -> dict[str, Any]:
    """Train, scoring the current model on ``held`` at the epochs ``due`` picks.

    ``train_s`` of a point is training wall time (``offset_s``, the imitation, included) with the
    scoring itself left out. The run ends after ``cfg.epochs``, when ``train_s`` passes
    ``budget_s``, or (``after_beat`` not None) that many scored points after the first point that
    beats the base: they show whether the first beat holds or was a lucky epoch.
    """
    torch.manual_seed(cfg.seed)  # the model train() starts from, scored as epoch 0
    first = ActorCritic(cfg.model).eval()
    if start is not None:
        first.load_state_dict(start)
    curve: list[dict[str, Any]] = []
    epochs: list[dict[str, float]] = []
    scoring = 0.0
    load = os.getloadavg()
    with captured_model() as seen:

        def hook(row: dict[str, float]) -> None:
            nonlocal scoring
            epoch, train_s = int(row["epoch"]), offset_s + row["wall_s"] - scoring
            epochs.append(row)
            if due(epoch):
                t0 = time.perf_counter()
                rng = torch.get_rng_state()
                point = {
                    "epoch": epoch,
                    "train_s": train_s,
                    **held.compare(held.score(seen[0] if seen else first)),
                }
                torch.set_rng_state(rng)
                scoring += time.perf_counter() - t0
                curve.append(point)
                console.print(
                    f"  epoch {epoch:3d} {train_s:6.0f}s  {held.spec.key} {point['value']:8.0f} vs "
                    f"{point['ref_value']:8.0f}  {point['improvement']:+.1%} "
                    f"[{point['ci_low']:+.1%}, {point['ci_high']:+.1%}]{'  BEATS' if point['beats'] else ''}",
                    highlight=False,
                )
                beaten = [k for k, p in enumerate(curve) if p["beats"]]
                if after_beat is not None and beaten and len(curve) - 1 - beaten[0] >= after_beat:
                    raise _StopRun
            if budget_s is not None and train_s >= budget_s:
                raise _StopRun

        result = None
        with suppress(_StopRun):
            result = train(runner, cfg, progress=hook, initial_state=start)
    model = seen[0] if seen else first
    best = (
        None if result is None else {k: v.detach().clone() for k, v in result.best_model.state_dict().items()}
    )
    return {
        "curve": curve,
        "epochs": epochs,
        "scoring_s": scoring,
        "load_average": [load, os.getloadavg()],
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "best_state": best,  # train()'s best-validation model (the last one without validation)
        "best_epoch": None if result is None else result.best_epoch,
    }


def model_of(cfg: TrainConfig, state: dict[str, torch.Tensor]) -> ActorCritic:
    model = ActorCritic(cfg.model).eval()
    model.load_state_dict(state)
    return model


def every(n: int) -> Callable[[int], bool]:
    return lambda epoch: epoch % n == 0


def fmt_ci(p: dict[str, Any]) -> str:
    return f"{p['improvement']:+.1%} [{p['ci_low']:+.1%}, {p['ci_high']:+.1%}]"


def real_warmstart(args: argparse.Namespace) -> dict[str, Any]:
    """Part 1 on a trace: time to beat the base on held-out windows, imitation vs scratch."""
    work = real_workload(args)
    n = len(work.bound.jobs)
    _, test = chronological_split(n, 0.9)
    held = HeldOut(fresh_runner(work.bound, args), test, args.test_windows, args.window_size, args.metric)
    console.print(
        f"{work.name} on {work.spec.name} ({work.spec.total_gpus} GPUs): {len(held.windows)} held-out "
        f"windows of {args.window_size} jobs in jobs {test.start:,}..{test.stop - 1:,}; "
        f"{args.base} mean {held.spec.key} {np.mean(held.base):.0f}"
    )
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for mode in args.starts.split(","):
            runner = fresh_runner(work.bound, args)
            cfg = real_config(args, seed, args.epochs)
            state, imitation_s, imitation = None, 0.0, dict[str, float]()
            if mode == "imitation":
                state, imitation_s, imitation = timed_imitation(runner, cfg, args, held.windows[:4])
            console.print(f"seed {seed}, {mode} (imitation {imitation_s:.0f} s)")
            run = scored_run(
                runner,
                held,
                cfg,
                state,
                imitation_s,
                every(args.score_every),
                60 * args.budget_minutes,
                args.after_beat,
            )
            beat = next((p for p in run["curve"] if p["beats"]), None)
            positive = next((p for p in run["curve"] if p["improvement"] > 0), None)
            after = [] if beat is None else [p for p in run["curve"] if p["epoch"] > beat["epoch"]]
            rows.append(
                {
                    "seed": seed,
                    "start": mode,
                    "imitation_s": imitation_s,
                    "imitation": imitation,
                    "first_beat_epoch": None if beat is None else beat["epoch"],
                    "first_beat_train_s": None if beat is None else beat["train_s"],
                    "first_positive_epoch": None if positive is None else positive["epoch"],
                    "later_points": len(after),
                    "later_points_beating": sum(p["beats"] for p in after),
                    "epochs_run": int(run["epochs"][-1]["epoch"]),
                    "train_s": run["curve"][-1]["train_s"],
                    "scoring_s": run["scoring_s"],
                    "load_average": run["load_average"],
                    "curve": run["curve"],
                    "epochs": run["epochs"],
                }
            )
    table = Table(title=f"time to beat {args.base} on {len(held.windows)} held-out windows ({args.trace})")
    columns = ("seed", "start", "epoch 0 vs base", "first beat: epoch", "train s", "at beat", "later beats")
    for col in (*columns, "load"):
        table.add_column(col)
    for r in rows:
        at = next((p for p in r["curve"] if p["beats"]), r["curve"][-1])
        table.add_row(
            str(r["seed"]),
            r["start"],
            fmt_ci(r["curve"][0]),
            "-" if r["first_beat_epoch"] is None else str(r["first_beat_epoch"]),
            f"{r['first_beat_train_s']:.0f}"
            if r["first_beat_train_s"] is not None
            else f">{r['train_s']:.0f}",
            f"ep. {at['epoch']}: {fmt_ci(at)}",
            f"{r['later_points_beating']}/{r['later_points']}",
            f"{r['load_average'][0][0]:.1f}",
        )
    console.print(table)
    return {"rows": rows, "held_out_windows": [w.label for w in held.windows], "base_per_window": held.base}


def period_stats(bound: BoundWorkload, runner: EpisodeRunner, n_windows: int, size: int) -> dict[str, float]:
    """Workload statistics of one period, measured before any training (the shift, in numbers)."""
    t = bound.jobs
    span_h = float(t.submit[-1] - t.submit[0]) / 3600
    windows = make_windows(range(runner.settings.warmup, len(t)), size, n_windows, seed=0)
    base = [runner.simulate(runner.settings.base_policy, w).wait_s.mean for w in windows]
    return {
        "jobs": len(t),
        "days": span_h / 24,
        "arrivals_per_hour": len(t) / span_h,
        "mean_gpus": float(np.mean(t.gpu_demand)),
        "share_8_gpus_or_more": float(np.mean(t.gpu_demand >= 8)),
        "median_runtime_min": float(np.median(t.runtime)) / 60,
        "mean_runtime_h": float(np.mean(t.runtime)) / 3600,
        "base_mean_wait_s": float(np.mean(base)),
        "base_windows": len(windows),
    }


def real_adapt(args: argparse.Namespace) -> dict[str, Any]:
    """Part 2 on a trace: a model of an early period fine-tuned on a later one, N = 1, 5, 20 epochs."""
    work = real_workload(args)
    n = len(work.bound.jobs)
    cut, test_start = int(n * args.shift_at), math.floor(n * 0.9 + 1e-9)
    source, target = period(work, 0, cut), period(work, cut, n)
    frac = (test_start - cut) / (n - cut)  # the target's held-out part = the trace's last 10%
    _, test = chronological_split(len(target.jobs), frac)
    assert test.start + cut == test_start, (test.start + cut, test_start)
    held = HeldOut(fresh_runner(target, args), test, args.test_windows, args.window_size, args.metric)
    stats = {
        "source": period_stats(source, fresh_runner(source, args), 16, args.window_size),
        "target": period_stats(target, fresh_runner(target, args), 16, args.window_size),
    }
    console.print(f"periods: jobs 0..{cut - 1} -> {cut}..{n - 1} (held out: {test_start}..{n - 1})", stats)
    marks = {int(k) for k in args.adapt_epochs.split(",")}
    runner = fresh_runner(source, args)
    cfg = real_config(args, args.adapt_seed, args.source_epochs)
    cfg.validation_windows = args.source_validation_windows  # the source model = hylo train's pick
    state, imitation_s, imitation = None, 0.0, dict[str, float]()
    if args.source_start == "imitation":
        state, imitation_s, imitation = timed_imitation(runner, cfg, args)
    console.print(
        f"source model: {args.source_start} + {args.source_epochs} PPO epochs on the source period, "
        f"best of {cfg.validation_windows} validation windows"
    )
    src = scored_run(runner, held, cfg, state, imitation_s, lambda e: e == args.source_epochs, None, None)
    assert src["best_state"] is not None
    source_held = held.compare(held.score(model_of(cfg, src["best_state"])))
    console.print(
        f"source model (best epoch {src['best_epoch']}) on the target's held-out: {fmt_ci(source_held)}"
    )
    runs: dict[str, dict[str, Any]] = {}
    for start in ("source model", "scratch"):
        console.print(f"on the target period from {start}")
        init = src["best_state"] if start == "source model" else None
        cfg = real_config(args, args.adapt_seed, max(marks), train_fraction=frac)
        due = lambda e: e == 0 or e in marks  # noqa: E731
        runs[start] = scored_run(fresh_runner(target, args), held, cfg, init, 0.0, due, None, None)
    rows = []
    for start, run in runs.items():
        for p in run["curve"]:
            scratch = next(q for q in runs["scratch"]["curve"] if q["epoch"] == p["epoch"])
            vs = held.compare(p["per_window"], scratch["per_window"])
            rows.append(
                {"start": start, **p, "vs_scratch": {k: v for k, v in vs.items() if k != "per_window"}}
            )
    table = Table(
        title=f"adaptation to jobs {cut:,}.. of {args.trace}: held-out {held.spec.key} vs {args.base}"
    )
    for col in (
        "start",
        "epochs on target",
        f"mean {held.spec.key}",
        f"vs {args.base} [95% CI]",
        "vs scratch",
        "train s",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["start"],
            str(r["epoch"]),
            f"{r['value']:.0f} ({args.base} {r['ref_value']:.0f})",
            fmt_ci(r),
            "-" if r["start"] == "scratch" else fmt_ci(r["vs_scratch"]),
            f"{r['train_s']:.0f}",
        )
    console.print(table)
    return {
        "shift": {"cut": cut, "test_start": test_start, "target_train_fraction": frac, **stats},
        "source_run": {k: v for k, v in src.items() if not k.endswith("state")},
        "source_start": args.source_start,
        "seed": args.adapt_seed,
        "source_imitation": imitation,
        "source_model_on_target": source_held,
        "rows": rows,
        "runs": {k: {kk: vv for kk, vv in v.items() if not kk.endswith("state")} for k, v in runs.items()},
        "base_per_window": held.base,
    }


def real_throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Part 3 on a trace: ``train``'s rollout decisions per second with 1 and 2 workers."""
    work = real_workload(args)
    rows = []
    for workers in (1, 2):
        load = os.getloadavg()
        res = train(fresh_runner(work.bound, args), real_config(args, 0, args.epochs, workers))
        rows.append({**throughput_row(res.history, workers), "load_average": [load, os.getloadavg()]})
    return {"rows": rows}


def throughput_row(history: list[dict[str, float]], workers: int) -> dict[str, Any]:
    """Decisions over rollout seconds, summed over the PPO epochs (the update excluded)."""
    epochs = [r for r in history if r["epoch"] >= 1]
    decisions = sum(r["decisions"] for r in epochs)
    rollout = sum(r["rollout_s"] for r in epochs)
    return {
        "workers": workers,
        "decisions": decisions,
        "rollout_s": rollout,
        "decisions_per_s": decisions / rollout,
    }


def part_throughput(args: argparse.Namespace) -> dict[str, Any]:
    if args.trace:
        rows = real_throughput(args)["rows"]
    else:
        runner = runner_for(workload(False, args.jobs, 0))
        rows = []
        for workers in (1, 2):
            cfg = config(args, 0, args.epochs, workers)
            cfg.validation_windows = 0
            rows.append(throughput_row(train(runner, cfg).history, workers))
    table = Table(title="trainer rollout throughput")
    for col in ("workers", "decisions", "rollout s", "decisions/s"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["workers"]), f"{r['decisions']:.0f}", f"{r['rollout_s']:.1f}", f"{r['decisions_per_s']:.0f}"
        )
    console.print(table)
    return {"rows": rows}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("part", choices=("warmstart", "adapt", "throughput"))
    parser.add_argument("--trace", help="real-trace mode: a trace name (default: the synthetic workloads)")
    parser.add_argument("--cluster", help="cluster preset or spec file for --trace")
    parser.add_argument("--base", help="base policy (default: sjf synthetic, fcfs with --trace)")
    parser.add_argument("--metric", default="wait", help="with --trace: trained and scored metric")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--tag", help="suffix of the results entry's key (keeps a side run apart)")
    parser.add_argument("--starts", default="scratch,imitation", help="with --trace: which starts to run")
    parser.add_argument("--epochs", type=int, help="PPO epochs (default: 20 synthetic, 200 with --trace)")
    parser.add_argument("--source-epochs", type=int, default=20)
    parser.add_argument("--windows-per-epoch", type=int, help="default: 8 synthetic, 16 with --trace")
    parser.add_argument("--window-size", type=int, default=256, help="with --trace")
    parser.add_argument("--validation-windows", type=int, default=8, help="synthetic mode only")
    parser.add_argument("--test-windows", type=int, help="held-out windows (default: 10 synthetic, 32 trace)")
    parser.add_argument("--imitation-epochs", type=int, default=20)
    parser.add_argument("--imitation-windows", type=int, help="default: 8 synthetic, 64 with --trace")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="with --trace")
    parser.add_argument("--update-epochs", type=int, default=8, help="with --trace")
    parser.add_argument("--minibatch-size", type=int, default=128, help="with --trace")
    parser.add_argument(
        "--kl-min-epochs",
        type=int,
        default=1,
        help="with --trace: PPO update epochs run in full before the KL early stop is checked",
    )
    parser.add_argument(
        "--score-every", type=int, default=1, help="with --trace: score held-out every N epochs"
    )
    parser.add_argument(
        "--after-beat",
        type=int,
        default=4,
        help="warmstart with --trace: scored points kept after the first beat",
    )
    parser.add_argument(
        "--budget-minutes", type=float, default=6.0, help="warmstart with --trace: training time per run"
    )
    parser.add_argument(
        "--shift-at", type=float, default=0.6, help="adapt with --trace: first job of the target"
    )
    parser.add_argument("--adapt-epochs", default="1,5,20", help="adapt with --trace: epochs scored")
    parser.add_argument("--adapt-seed", type=int, default=0, help="adapt with --trace: seed of both runs")
    parser.add_argument("--source-start", default="scratch", choices=("imitation", "scratch"))
    parser.add_argument(
        "--source-validation-windows", type=int, default=16, help="adapt with --trace: picks the source model"
    )
    args = parser.parse_args()
    real = args.trace is not None
    for name, synthetic, trace in (
        ("base", BASE, "fcfs"),
        ("epochs", 20, 200),
        ("windows_per_epoch", 8, 16),
        ("test_windows", 10, 32),
        ("imitation_windows", 8, 64),
    ):
        if getattr(args, name) is None:
            setattr(args, name, trace if real else synthetic)
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    parts: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "warmstart": real_warmstart if args.trace else part_warmstart,
        "adapt": real_adapt if args.trace else part_adapt,
        "throughput": part_throughput,
    }
    result = parts[args.part](args)
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
            "scale": f"trace {args.trace} on {args.cluster}"
            if args.trace
            else "small (synthetic 16-GPU cluster, 128-job windows)",
        }
    )
    key = ":".join([args.part, *([args.trace] if args.trace else []), *([args.tag] if args.tag else [])])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.part == "warmstart" and key in previous:  # runs of other seeds (or starts) are kept
        done = {(r["seed"], r["start"]) for r in result["rows"]}
        kept = [r for r in previous[key].get("rows", []) if (r["seed"], r["start"]) not in done]
        runs = [c for c in previous[key].get("runs", []) if c.get("command") != result["command"]]
        result["rows"] = sorted(kept + result["rows"], key=lambda r: (r["seed"], r["start"]))
        result["runs"] = [*runs, {"seeds": args.seeds, "command": result["command"], "load": load_before}]
    previous[key] = result
    OUT.write_text(json.dumps(previous, indent=2))
    console.print(
        f"wrote {OUT} ({key}), {result['wall_seconds']:.0f} s, load {load_before} -> {os.getloadavg()}"
    )


if __name__ == "__main__":
    main()
