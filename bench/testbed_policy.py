"""Train and measure a learned prioritizer for the live Slurm testbed (issue 23, item 1), without
the 100 jobs the live experiment replays (docs/results/slurm-policy.md).

    .venv/bin/python bench/testbed_policy.py train --out OUT --base-policy multifactor
        --metric wait:0.6,makespan:0.4 --base-prior 0.02 --learning-rate 3e-3   (one line)
    .venv/bin/python bench/testbed_policy.py evaluate --checkpoint OUT/checkpoint --seeds 100-119
    .venv/bin/python bench/testbed_policy.py probe --seeds 3000-3007

Why a script of its own and not ``hylo train --trace slurm-256``: the live experiment is a burst
(100 jobs within 23 s on an empty cluster, drained to the end), so an episode must be one whole
burst, scored on its wait and its makespan. ``hylo train`` cuts windows at any offset of one
arrival draw of the 256 rows (a window then starts mid-burst on a warm cluster, and its makespan
means little), and its held-out part is the experiment's own rows. Here every episode is one
arrival draw of the training rows (0-155, the rows the multifactor tuning also used), laid end to
end in one workload with the cluster idle between draws (``GAP_S``), simulated with no warm-up;
the trainer draws whole bursts (``TrainConfig.train_windows``) and keeps the best model on other
draws of the same rows (``validation_list``). Nothing here sees rows 156-255 but ``evaluate``,
which refuses the live experiment's seeds (7, 8, 9).

Why the Slurm-cadence loop (``shared/sim/slurm_cadence.py``, the default ``--loop``): Hylo's
simulator ranks this testbed's makespans the other way round from the live runs (UNICEP shortest
there, longest live), so a makespan reward there teaches nothing; the Slurm-cadence loop has
slurmctld's main scheduler (stopping at the first job that cannot start) and its backfill every
5 s, and reproduces the live paired changes. ``--loop hylo`` keeps Hylo's simulator.

The job model is the experiment's and the multifactor tuning's (``sample_workloads`` in
``bench/support/multifactor_tuning.py``): runtime epochs x 4 s, the time limit (epochs minutes)
as the estimate, 4 CPUs per GPU, uniform arrivals at the loader's rate compressed 15 x; placement
best-fit; the comparison multifactor is ``SlurmLikeMultifactor`` (slurmctld's job-size factor, age
every calc period), equal weights and the tuned arm's (``TUNED``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.multifactor_tuning import SlurmLikeMultifactor, SlurmWeights  # noqa: E402
from shared.domain.cluster import load_cluster_spec  # noqa: E402
from shared.features import SamplingConfig  # noqa: E402
from shared.metrics import Window  # noqa: E402
from shared.model import ModelConfig  # noqa: E402
from shared.policies import Policy, make_policy  # noqa: E402
from shared.rl.episodes import EpisodeRunner, EpisodeSettings  # noqa: E402
from shared.rl.ppo import PPOConfig  # noqa: E402
from shared.rl.reward import RewardSpec  # noqa: E402
from shared.rl.setup import load_trained, make_card  # noqa: E402
from shared.rl.train_state import write_checkpoint_dir  # noqa: E402
from shared.rl.trainer import TrainConfig, train  # noqa: E402
from shared.scheduling.binding import BoundWorkload, bind_jobs  # noqa: E402
from shared.sim.config import SimConfig  # noqa: E402
from shared.sim.simulator import Simulator  # noqa: E402
from shared.sim.slurm_cadence import SlurmCadence  # noqa: E402
from shared.traces.slurm_workload import parse_slurm_workload  # noqa: E402

#: the workload, under the traces folder (``HYLO_TRACES_DIR``, docs/traces.md)
TRACE_FILE = "rltune/slurm_workloads_256.csv"
SECONDS_PER_EPOCH = 4.0
#: the loader's arrival rate (256 jobs in 900 s) at 60 s per epoch, compressed like the runtimes
LOADER_SPAN_S, LOADER_JOBS, LOADER_SECONDS_PER_EPOCH = 900.0, 256, 60.0
#: idle time between two bursts laid end to end: far beyond a burst's drain (about 500 s), and a
#: whole number of minutes, so that multifactor's age recalculation (every 60 s) meets each burst
#: at the same phase as a burst starting at 0
GAP_S = 12_000.0
#: the live experiment's arrival seeds: never trained, validated or evaluated on here
EXPERIMENT_SEEDS = frozenset({7, 8, 9})
TRAIN_ROWS, TEST_ROWS = range(0, 156), range(156, 256)
CONFIG = SimConfig(placement="best-fit")
#: the tuned arm of the live experiment (docs/results/slurm-experiment.md, chosen on rows 0-155)
TUNED = SlurmWeights(age=20_000, job_size=1000, max_age_s=300, calc_period_s=60)


def parse_seeds(text: str) -> list[int]:
    """``'100-119'`` or ``'3000,3001'`` -> seeds."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, sep, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return out


def trace_path() -> Path:
    from shared.config import get_settings

    return get_settings().traces_dir / TRACE_FILE


def bursts(rows: range, seeds: list[int], trace: Path | None = None) -> tuple[BoundWorkload, list[Window]]:
    """One workload holding one arrival draw of ``rows`` per seed, each a window, ``GAP_S`` apart.

    Each draw is ``sample_workloads``' (the multifactor tuning's): arrivals uniform over the
    loader's span for that many jobs, compressed, sorted and given to the rows in file order."""
    spec = load_cluster_spec("slurm-testbed")
    base = parse_slurm_workload(
        trace or trace_path(), seconds_per_epoch=SECONDS_PER_EPOCH, inference_s=SECONDS_PER_EPOCH
    )
    table = base.table.take(np.asarray(list(rows)))
    n = len(table)
    span = LOADER_SPAN_S * n / LOADER_JOBS * SECONDS_PER_EPOCH / LOADER_SECONDS_PER_EPOCH
    epochs = np.maximum(np.round(table.runtime / SECONDS_PER_EPOCH), 1.0)
    whole = table.take(np.tile(np.arange(n), len(seeds)))
    submit = np.concatenate(
        [
            k * GAP_S + np.sort(np.random.default_rng(s).uniform(0.0, span, size=n))
            for k, s in enumerate(seeds)
        ]
    )
    jobs = whole.with_fields(
        submit=submit,
        runtime=np.maximum(1.0, np.round(whole.runtime)),
        estimate=np.tile(epochs * 60.0, len(seeds)),
    )
    jobs = replace(jobs, ids=np.asarray([f"s{s}-{i}" for s in seeds for i in rows], dtype=np.str_))
    return bind_jobs(jobs, spec), [Window(k * n, n) for k in range(len(seeds))]


def settings(
    metric: str, base_policy: str = "unicep", loop: str = "slurm-cadence", lag: float = 0.0
) -> EpisodeSettings:
    return EpisodeSettings(
        base_policy=base_policy,
        reward=RewardSpec.parse(metric),
        config=CONFIG,
        warmup=0,
        loop=loop,
        decision_lag_s=lag,
    )


# -- evaluation -----------------------------------------------------------------------------------


def lower_bound(w: BoundWorkload, window: Window) -> float:
    """The experiment's makespan lower bound: the largest of each job's submit + runtime and, per
    GPU type, from each arrival, that arrival plus the GPU-seconds of that type's jobs submitted
    from then on over the type's GPUs (gangs ignored), minus the first submit."""
    sl = window.slice
    jobs = w.jobs
    submit, runtime, gpus, types = jobs.submit[sl], jobs.runtime[sl], jobs.gpus[sl], jobs.type_set[sl]
    t0 = float(submit.min())
    bound = float(np.max(submit + runtime))
    for t in np.unique(types):
        names = set(jobs.type_sets[int(t)])
        cap = sum(g.count * g.gpus for g in w.spec.node_groups if g.gpu_type in names)
        mine = types == t
        s, work = submit[mine], gpus[mine] * runtime[mine]
        order = np.argsort(s)
        tail = np.cumsum(work[order][::-1])[::-1]
        bound = max(bound, float(np.max(s[order] + tail / cap)))
    return bound - t0


def burst_figures(w: BoundWorkload, start: np.ndarray, end: np.ndarray, window: Window) -> dict[str, float]:
    """The live experiment's figures for one burst: makespan (first submit to last end), mean
    wait, GPU utilization (busy GPU-s / (GPUs x makespan)), the makespan's lower bound."""
    sl = window.slice
    submit = w.jobs.submit[sl]
    makespan = float(np.max(end[sl]) - submit.min())
    busy = float(np.sum(w.jobs.gpus[sl] * (end[sl] - start[sl])))
    return {
        "makespan_s": makespan,
        "mean_wait_s": float(np.mean(start[sl] - submit)),
        "utilization": busy / (w.spec.total_gpus * makespan),
        "bound_s": lower_bound(w, window),
    }


def simulate(
    w: BoundWorkload, policy: Policy, window: Window, loop: str, lag: float = 0.0
) -> dict[str, float]:
    """``policy`` on one burst, in the Slurm-cadence loop (``lag``: Hylo's decision lag) or
    Hylo's simulator (EASY, best-fit)."""
    span = (window.start, window.stop)
    if loop == "slurm-cadence":
        result = SlurmCadence(w, policy, config=CONFIG, decision_lag_s=lag).run(span, span)
    else:
        sim = Simulator(w, policy, CONFIG)
        if isinstance(policy, SlurmLikeMultifactor):
            sim.core = "python"  # the subclass's order, not the compiled multifactor's
        result = sim.run(span, span)
    return burst_figures(w, result.start, result.end, window)


def summarize(per: dict[str, list[dict[str, float]]], ref: str) -> dict[str, Any]:
    """Mean, standard deviation, min, max per arm and metric, and paired changes against ``ref``
    and the other arms (the same draws)."""
    out: dict[str, Any] = {}
    for arm, rows in per.items():
        entry: dict[str, Any] = {}
        for r in rows:
            r["gap_pct"] = 100.0 * (r["makespan_s"] / r["bound_s"] - 1.0)
        for key in ("mean_wait_s", "makespan_s", "utilization", "gap_pct"):
            vals = np.array([r[key] for r in rows])
            entry[key] = {
                "mean": float(vals.mean()),
                "std": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0,
                "min": float(vals.min()),
                "max": float(vals.max()),
            }
        out[arm] = entry
    paired: dict[str, Any] = {}
    for arm in per:
        for other in per:
            if arm == other or other not in (ref, "multifactor-equal", "multifactor-tuned", "unicep"):
                continue
            d: dict[str, Any] = {}
            for key in ("mean_wait_s", "makespan_s", "utilization"):
                rel = np.array([a[key] / b[key] - 1.0 for a, b in zip(per[arm], per[other], strict=True)])
                d[key] = {
                    "mean_pct": float(100 * rel.mean()),
                    "std_pct": float(100 * rel.std(ddof=1)) if len(rel) > 1 else 0.0,
                    "min_pct": float(100 * rel.min()),
                    "max_pct": float(100 * rel.max()),
                    "wins": int(np.sum(rel < 0) if key != "utilization" else np.sum(rel > 0)),
                }
            paired[f"{arm} vs {other}"] = d
    return {"arms": out, "paired": paired, "draws": len(next(iter(per.values())))}


def evaluate(
    checkpoints: dict[str, Path],
    rows: range,
    seeds: list[int],
    base_policies: list[str],
    loop: str,
    lag: float = 0.0,
) -> dict[str, Any]:
    """Every arm on the same draws; the arms Hylo would decide (base policies, checkpoints) with
    ``lag``, multifactor (inside slurmctld) without."""
    w, windows = bursts(rows, seeds)
    per: dict[str, list[dict[str, float]]] = {}
    t0 = time.monotonic()
    for name in base_policies:
        per[name] = [simulate(w, make_policy(name), win, loop, lag) for win in windows]
    per["multifactor-equal"] = [
        simulate(w, SlurmLikeMultifactor(SlurmWeights()), win, loop) for win in windows
    ]
    per["multifactor-tuned"] = [simulate(w, SlurmLikeMultifactor(TUNED), win, loop) for win in windows]
    for label, path in checkpoints.items():
        model, card, _ = load_trained(path)
        runner = EpisodeRunner(w, settings(card.training.metric, card.training.base_policy, loop))
        per[label] = [
            simulate(w, runner.learned_policy(model, win, "greedy"), win, loop, lag) for win in windows
        ]
    return {
        "loop": loop,
        "decision_lag_s": lag,
        "rows": f"{rows.start}:{rows.stop}",
        "seeds": seeds,
        "seconds": round(time.monotonic() - t0, 1),
        "per_draw": per,
        "summary": summarize(per, "multifactor-equal"),
    }


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| arm | mean wait (s) | makespan (s) | GPU utilization | gap to the makespan bound |",
        "|---|---|---|---|---|",
    ]
    for arm, e in summary["arms"].items():
        cells = [
            f"{e[k]['mean']:.{p}f} ± {e[k]['std']:.{p}f} [{e[k]['min']:.{p}f}, {e[k]['max']:.{p}f}]"
            for k, p in (("mean_wait_s", 1), ("makespan_s", 1), ("utilization", 3))
        ]
        cells.append(f"{e['gap_pct']['mean']:+.1f}%")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "| paired change (same draws) | mean wait | makespan | utilization |", "|---|---|---|---|"]
    for pair, d in summary["paired"].items():
        cells = [
            f"{d[k]['mean_pct']:+.1f}% ± {d[k]['std_pct']:.1f} "
            f"[{d[k]['min_pct']:+.1f}, {d[k]['max_pct']:+.1f}] "
            f"({d[k]['wins']}/{summary['draws']} better)"
            for k in ("mean_wait_s", "makespan_s", "utilization")
        ]
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- probes: what a priority order can do in the Slurm-cadence loop -------------------------------


class Probe(Policy):
    """A base policy's order with one rule laid over it, to see what an order can reach (never
    shipped; measured on validation draws only): ``big4`` puts the 4-GPU P100 jobs first (what
    multifactor's job size does), ``fit`` puts the jobs that fit a node now before those that do
    not (what ``can_schedule_now`` tells the model; slurmctld's main scheduler stops at the first
    job that cannot start, so a blocked job at the top holds back every type)."""

    dynamic = True

    def __init__(self, base: str, rule: str) -> None:
        self.base = make_policy(base)
        self.rule = rule
        self.name = f"{base}+{rule}"
        self.state: Any = None

    def bind(self, ctx: Any) -> None:
        super().bind(ctx)
        self.base.bind(ctx)
        jobs = ctx.workload.jobs
        self.p100 = np.array(["P100" in jobs.type_sets[int(t)] for t in jobs.type_set])

    def attach(self, state: Any, allocs: Any) -> None:
        self.state = state

    def _fits(self, idx: np.ndarray) -> np.ndarray:
        w = self.ctx.workload
        out = np.zeros(len(idx))
        for k, j in enumerate(idx):
            groups = w.class_groups[int(w.job_class[j])]
            out[k] = any(self.state.groups[g].max_whole() >= w.jobs.gpus[j] for g in groups)
        return out

    def keys(self, idx: np.ndarray, now: float) -> np.ndarray:
        base = np.asarray(self.base.keys(idx, now), dtype=np.float64)
        rank = np.argsort(np.argsort(base, kind="stable"), kind="stable").astype(np.float64)
        if "fit" in self.rule:
            rank -= 1e6 * self._fits(idx)
        if "big4" in self.rule:
            rank -= 1e7 * ((self.ctx.workload.jobs.gpus[idx] == 4) & self.p100[idx])
        return rank


def probe_command(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    if EXPERIMENT_SEEDS & set(seeds):
        raise SystemExit("probes run on validation draws, not the experiment's seeds")
    w, windows = bursts(TRAIN_ROWS, seeds)
    per: dict[str, list[dict[str, float]]] = {
        "multifactor-equal": [
            simulate(w, SlurmLikeMultifactor(SlurmWeights()), win, args.loop) for win in windows
        ]
    }
    for item in args.probes.split(","):
        base, _, rule = item.partition("+")
        per[item] = [
            simulate(w, Probe(base, rule) if rule else make_policy(base), win, args.loop, args.lag)
            for win in windows
        ]
    report = {
        "loop": args.loop,
        "rows": "0:156",
        "seeds": seeds,
        "per_draw": per,
        "summary": summarize(per, "x"),
    }
    print(table(report["summary"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


# -- training -------------------------------------------------------------------------------------


def train_command(args: argparse.Namespace) -> int:
    train_seeds, val_seeds = parse_seeds(args.train_seeds), parse_seeds(args.val_seeds)
    if EXPERIMENT_SEEDS & (set(train_seeds) | set(val_seeds)) or set(train_seeds) & set(val_seeds):
        raise SystemExit("train and validation seeds must differ, and avoid the experiment's 7, 8, 9")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    seeds = train_seeds + val_seeds
    w, windows = bursts(TRAIN_ROWS, seeds)
    runner = EpisodeRunner(w, settings(args.metric, args.base_policy, args.loop, args.lag))
    shape = SamplingConfig()
    cfg = TrainConfig(
        epochs=args.epochs,
        windows_per_epoch=args.windows_per_epoch,
        window_size=len(TRAIN_ROWS),
        seed=args.seed,
        workers=args.workers,
        max_minutes=args.max_minutes,
        model=ModelConfig(
            obs_features=shape.n_observation,
            critic_features=shape.n_critic,
            max_queue=256,
            top_k=32,
            base_prior=args.base_prior,
        ),
        ppo=PPOConfig(learning_rate=args.learning_rate, ent_coef=args.ent_coef),
        train_windows=tuple(windows[: len(train_seeds)]),
        validation_list=tuple(windows[len(train_seeds) :]),
    )
    log = (out / "train_log.jsonl").open("w", encoding="utf-8")

    def progress(row: dict[str, float]) -> None:
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(
            f"epoch {int(row['epoch'])}: reward {row.get('reward', float('nan')):+.4f} "
            f"val {row.get('val_reward', float('nan')):+.4f} kl {row.get('approx_kl', float('nan')):.2e} "
            f"wall {row['wall_s']:.0f} s",
            flush=True,
        )

    initial = None
    if args.init is not None:  # continue from a checkpoint of the same shape (a run stopped by time)
        initial = load_trained(args.init)[0].state_dict()
    result = train(runner, cfg, progress, initial_state=initial)
    log.close()
    extra: dict[str, Any] = {
        "bench": "bench/testbed_policy.py",
        "argv": sys.argv[1:],
        "train_rows": f"{TRAIN_ROWS.start}:{TRAIN_ROWS.stop}",
        "train_seeds": train_seeds,
        "validation_seeds": val_seeds,
        "best_epoch": result.best_epoch,
        "placement": CONFIG.placement,
        "loop": args.loop,
        "decision_lag_s": args.lag,
        "estimates": "time limits (epochs minutes)",
        "seconds_per_epoch": SECONDS_PER_EPOCH,
        "ppo": cfg.ppo.model_dump(mode="json"),
        "wall_seconds": result.wall_seconds,
        "initial_state": None if args.init is None else str(args.init),
    }
    card = make_card(
        result.best_model,
        runner,
        trace="slurm-256 rows 0:156 (bench/testbed_policy.py bursts)",
        cluster="slurm-testbed",
        seed=args.seed,
        epochs=int(result.history[-1]["epoch"]),
        extra=extra,
    )
    write_checkpoint_dir(out / "checkpoint", result.best_model, card)
    print(f"best epoch {result.best_epoch}; checkpoint in {out / 'checkpoint'}")
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    seeds = parse_seeds(args.seeds)
    rows = range(*[int(x) for x in args.rows.split(":")])
    if set(rows) & set(TEST_ROWS) and EXPERIMENT_SEEDS & set(seeds):
        raise SystemExit("the experiment's draws (seeds 7, 8, 9 of rows 156-255) are the live judge's")
    checkpoints: dict[str, Path] = {}
    for item in args.checkpoint:
        label, sep, path = item.partition("=")
        checkpoints[label if sep else Path(item).parent.name] = Path(path if sep else item)
    report = evaluate(checkpoints, rows, seeds, args.base_policies.split(","), args.loop, args.lag)
    print(table(report["summary"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)  # as hylo train: small layers, and threads spin on a shared machine
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="PPO on bursts of rows 0-155")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--metric", default="wait:0.5,makespan:0.5")
    t.add_argument("--base-policy", default="unicep")
    t.add_argument("--base-prior", type=float, default=0.05)
    t.add_argument("--loop", choices=("slurm-cadence", "hylo"), default="slurm-cadence")
    t.add_argument("--lag", type=float, default=0.0, help="train with Hylo's decision lag in the loop (s)")
    t.add_argument("--epochs", type=int, default=60)
    t.add_argument("--max-minutes", type=float, default=None)
    t.add_argument("--windows-per-epoch", type=int, default=8)
    t.add_argument("--workers", type=int, default=1)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--learning-rate", type=float, default=3e-4)
    t.add_argument("--init", type=Path, default=None, help="start from this checkpoint's weights")
    t.add_argument("--ent-coef", type=float, default=0.0)
    t.add_argument("--train-seeds", default="2000-2063", help="arrival draws of rows 0-155 trained on")
    t.add_argument("--val-seeds", default="3000-3007", help="arrival draws of rows 0-155 for the best model")
    e = sub.add_parser("evaluate", help="base policies, multifactor (equal, tuned) and checkpoints on bursts")
    e.add_argument("--checkpoint", action="append", default=[], help="[LABEL=]DIR (repeatable)")
    e.add_argument("--rows", default="156:256")
    e.add_argument("--seeds", default="100-119")
    e.add_argument("--base-policies", default="unicep,sjf,fcfs,wfp3,f1")
    e.add_argument("--loop", choices=("slurm-cadence", "hylo"), default="slurm-cadence")
    e.add_argument("--lag", type=float, default=0.0, help="Hylo's decision lag in the Slurm-cadence loop (s)")
    e.add_argument("--json", type=Path, default=None)
    q = sub.add_parser("probe", help="hand-written orders on validation draws (what an order can reach)")
    q.add_argument("--probes", default="unicep,wfp3,unicep+big4,unicep+fit,multifactor+fit,unicep+fit+big4")
    q.add_argument("--seeds", default="3000-3003")
    q.add_argument("--loop", choices=("slurm-cadence", "hylo"), default="slurm-cadence")
    q.add_argument("--lag", type=float, default=0.0)
    q.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    commands = {"train": train_command, "evaluate": evaluate_command, "probe": probe_command}
    return commands[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
