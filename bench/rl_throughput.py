"""Learned prioritizer speed: training decisions per second per worker, and inference latency.

    .venv/bin/python bench/rl_throughput.py       # both parts; writes bench/results/rl_throughput.json
    .venv/bin/python bench/rl_throughput.py --windows 4 --calls 200

1. **Decisions per second per worker** (issue 3 target: >= 5,000): training episodes exactly as
   ``hylo train`` runs them (simulator + views + features + sampling + a Plackett-Luce sample per
   decision with at least two queued jobs), one process, one torch thread; decisions counted are
   the recorded ones (blocked cycles, which no order can change, are skipped and counted apart),
   wall time is the whole episode (simulation included). The log-probabilities and values,
   computed batched after the rollout, are timed separately ("batch scoring"). The policy's own
   time is measured inside ``LearnedPolicy.keys``; the rest of the episode's wall time is the
   simulator's, and decisions / that time is the rate a free policy would reach ("simulator-only
   ceiling"). The same windows under the base policy alone are timed too (JSON only).
2. **Inference latency** (target: p99 <= 1 ms for 256 queued jobs, <= 4 ms for 1,024): one greedy
   decision as production makes it (``LearnedPolicy.prioritize``: cluster view, features,
   selection, forward, integer priorities) on a cluster filled to 85% of its GPUs by the
   simulator's placer (``bench/features_cost.py``), single thread, p50/p99 over ``--calls`` calls.
   Every call starts from a new state version, so nothing is reused from the previous call; the
   same decision computing all 24 features is timed too.

``--part training|latency`` runs one part. The load average before and after is printed and saved:
on a shared machine a p99 of a millisecond-long call mostly measures preemption.
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, str(ROOT / "bench"))

from features_cost import busy_cluster  # noqa: E402

from shared.features import FeatureSampler  # noqa: E402
from shared.metrics import chronological_split, make_windows  # noqa: E402
from shared.model import ActorCritic, ModelConfig  # noqa: E402
from shared.model.fast import FastActor, greedy_priorities  # noqa: E402
from shared.policies import PolicyContext, make_policy  # noqa: E402
from shared.rl.policy import LearnedPolicy  # noqa: E402
from shared.rl.ppo import RolloutBatch  # noqa: E402
from shared.rl.setup import RunSetup, load_runner  # noqa: E402
from shared.sim.evaluate import prepare_workload  # noqa: E402

PHILLY_RLTUNE = str(ROOT / "docs" / "results" / "clusters" / "philly-rltune.toml")
TRAIN_CASES = (
    ("rltune-synthetic", None, True, "rltune-synthetic"),
    ("rltune-synthetic", None, False, "rltune-synthetic"),
    ("philly", PHILLY_RLTUNE, True, "philly-rltune"),
    ("philly", PHILLY_RLTUNE, False, "philly-rltune"),
)
LATENCY_CASES = {"philly": "philly", "alibaba-openb": "openb-gpuspec33"}
QUEUES = (256, 1024)


def bench_training(trace: str, cluster: str | None, paper: bool, windows: int, seed: int) -> dict[str, Any]:
    work, runner = load_runner(trace, cluster, RunSetup(paper=paper, seed=seed))
    train, _ = chronological_split(len(work.bound.jobs), 0.9 if len(work.bound.jobs) > 5000 else 0.7)
    chosen = make_windows(train, 256, windows, seed=seed)
    torch.manual_seed(seed)
    model = ActorCritic(ModelConfig()).eval()
    for w in chosen:  # base runs are cached by the trainer too: not part of the rollout cost
        runner.base_metrics(w)
    # one untimed episode: builds the workload's featurizer, which a training process builds once
    # (31 ms for Philly's 82,247 jobs, 1 ms for the RLTune trace), and warms torch
    runner.run(model, chosen[0], "sample", seed + 10_000)
    t0 = time.perf_counter()
    for w in chosen:  # the simulator alone on the same jobs (base policy): the ceiling of the rate
        runner.simulate(runner.settings.base_policy, w)
    base_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    results = [runner.run(model, w, "sample", seed + k) for k, w in enumerate(chosen)]
    wall = time.perf_counter() - t0
    decisions = sum(len(r.decisions) for r in results)
    policy_s = sum(r.policy_seconds for r in results)
    skipped = sum(r.skipped for r in results)
    t1 = time.perf_counter()
    RolloutBatch.build(model, [(r.decisions, r.reward) for r in results], 1.0, 0.97)
    scoring = time.perf_counter() - t1
    return {
        "trace": trace,
        "cluster": work.spec.name,
        "setting": "paper" if paper else "easy+estimates",
        "windows": len(chosen),
        "decisions": decisions,
        "skipped_blocked": skipped,
        "rollout_s": wall,
        "policy_s": policy_s,
        "simulator_s": wall - policy_s,
        "base_policy_simulation_s": base_wall,
        # the policy's time per cycle it was asked to order (>= 2 jobs, after the warm-up): the
        # recorded decisions plus the blocked cycles it skipped (warm-up cycles cost it ~nothing)
        "us_per_cycle_policy": policy_s / (decisions + skipped) * 1e6 if decisions + skipped else 0.0,
        "decisions_per_s_simulator_only": decisions / (wall - policy_s) if wall > policy_s else 0.0,
        "decisions_per_s": decisions / wall if wall > 0 else 0.0,
        "batch_scoring_s": scoring,
        "decisions_per_s_with_scoring": decisions / (wall + scoring) if wall > 0 else 0.0,
        "mean_queue": float(np.mean([len(d.obs) for r in results for d in r.decisions]))
        if decisions
        else 0.0,
    }


def bench_latency(preset: str, trace: str, calls: int, seed: int) -> list[dict[str, Any]]:
    work = prepare_workload(trace, preset, seed=seed)
    jobs = work.bound.jobs
    state, run, run_group, remaining = busy_cluster(work, 0.85, seed)
    estimate = np.nan_to_num(jobs.estimate, nan=3600.0)
    torch.manual_seed(seed)
    model = ActorCritic(ModelConfig()).eval()
    rows = []
    rng = np.random.default_rng(seed + 1)
    for q in QUEUES:
        policy = LearnedPolicy(model, make_policy("fcfs"), mode="greedy", max_queue=q)
        policy.bind(PolicyContext(workload=work.bound, estimate=estimate, capacity_gpus=work.spec.total_gpus))
        policy.attach(state, {})
        start = int(rng.integers(0, len(jobs) - q))
        queued = np.arange(start, start + q)
        now = float(jobs.submit[queued[-1]])
        for j, g, r in zip(run.tolist(), run_group.tolist(), remaining.tolist(), strict=True):
            if j not in policy.running:
                policy.running.add(j, g, now + r)
        for _ in range(20):
            policy.touch()
            policy.prioritize(queued, now)
        times = []
        for _ in range(calls):
            # a new state version per call: the cluster view, node states and placement counts are
            # rebuilt as after a job started or ended, so nothing is reused from the previous call
            policy.touch()
            t0 = time.perf_counter()
            policy.prioritize(queued, now)
            times.append(time.perf_counter() - t0)
        ms = np.asarray(times) * 1e3
        # the same decision computing all 24 features (the featurizer service's pool), then the
        # selection, the forward pass and the priorities
        sampler, actor = policy.sampler, policy.actor
        assert actor is not None

        def full(
            policy: LearnedPolicy = policy,
            queued: np.ndarray = queued,
            now: float = now,
            sampler: FeatureSampler = sampler,
            actor: FastActor = actor,
        ) -> np.ndarray:
            policy.touch()
            values = policy.featurizer.values(queued, now, policy.cluster_view(), policy.version)
            obs, _ = sampler.select(values).apply(values)
            return greedy_priorities(actor.scores(obs), model.config.top_k)

        assert np.array_equal(full(), policy.prioritize(queued, now))
        full_times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            full()
            full_times.append(time.perf_counter() - t0)
        full_ms = np.asarray(full_times) * 1e3
        rows.append(
            {
                "cluster": preset,
                "running": len(policy.running),
                "queue": q,
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "min_ms": float(ms.min()),
                "all_features_p50_ms": float(np.percentile(full_ms, 50)),
                "all_features_p99_ms": float(np.percentile(full_ms, 99)),
                "calls": calls,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=6, help="training windows per case")
    ap.add_argument("--calls", type=int, default=500, help="timed inference calls per queue length")
    ap.add_argument("--part", choices=("all", "training", "latency"), default="all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rl_throughput.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    console = Console(width=170)
    load_before = os.getloadavg()
    train_rows: list[dict[str, Any]] = []
    lat_rows: list[dict[str, Any]] = []
    if args.part in ("all", "training"):
        for trace, cluster, paper, _name in TRAIN_CASES:
            with console.status(f"training episodes: {trace} ({'paper' if paper else 'easy'})"):
                train_rows.append(bench_training(trace, cluster, paper, args.windows, args.seed))
        table = Table(title="Training rollout: scheduling decisions per second, one worker (target >= 5,000)")
        cols = (
            "trace",
            "cluster",
            "setting",
            "windows",
            "decisions",
            "blocked, skipped",
            "mean queue",
            "policy us/cycle",
            "decisions/s",
            "with scoring",
            "simulator-only ceiling",
        )
        for col in cols:
            table.add_column(col, justify="left" if col in ("trace", "cluster", "setting") else "right")
        for r in train_rows:
            table.add_row(
                r["trace"],
                r["cluster"],
                r["setting"],
                str(r["windows"]),
                f"{r['decisions']:,}",
                f"{r['skipped_blocked']:,}",
                f"{r['mean_queue']:.1f}",
                f"{r['us_per_cycle_policy']:,.0f}",
                f"{r['decisions_per_s']:,.0f}",
                f"{r['decisions_per_s_with_scoring']:,.0f}",
                f"{r['decisions_per_s_simulator_only']:,.0f}",
            )
        console.print(table)
    if args.part in ("all", "latency"):
        for preset, trace in LATENCY_CASES.items():
            with console.status(f"inference latency: {preset}"):
                lat_rows.extend(bench_latency(preset, trace, args.calls, args.seed))
        table = Table(
            title="Inference per decision (views + features + selection + forward + priorities), "
            "one thread, ms"
        )
        cols = ("cluster", "running", "queue", "p50", "p99", "target p99", "all 24 features: p50", "p99")
        for col in cols:
            table.add_column(col, justify="left" if col == "cluster" else "right")
        for r in lat_rows:
            target = 1.0 if r["queue"] == 256 else 4.0
            p99 = f"{r['p99_ms']:.3f}"
            p99 = f"[green]{p99}[/]" if r["p99_ms"] <= target else f"[red]{p99}[/]"
            table.add_row(
                r["cluster"],
                f"{r['running']:,}",
                f"{r['queue']:,}",
                f"{r['p50_ms']:.3f}",
                p99,
                f"{target:g}",
                f"{r['all_features_p50_ms']:.3f}",
                f"{r['all_features_p99_ms']:.3f}",
            )
        console.print(table)
    load_after = os.getloadavg()
    console.print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": {
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "load_avg_before": load_before,
                    "load_avg_after": load_after,
                    "torch": torch.__version__,
                },
                "training": train_rows,
                "inference": lat_rows,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
