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
   ceiling"). The same windows under the base policy alone are timed too (JSON only). A second
   run of the same episodes times the policy's stages (``LearnedPolicy.stage_seconds``: cluster
   view, features, forward, order) and splits a recorded decision's time into simulator, those
   stages and glue (the rest of ``keys``). The rollout's thread CPU time per decision (JSON
   ``cpu_us_per_decision``) leaves out the time other processes held the core.
2. **Inference latency** (target: p99 <= 1 ms for 256 queued jobs, <= 4 ms for 1,024): one greedy
   decision as production makes it (``LearnedPolicy.prioritize``: cluster view, features,
   selection, forward, integer priorities) on a cluster filled to 85% of its GPUs by the
   simulator's placer (``bench/features_cost.py``), single thread, p50/p99 over ``--calls`` calls.
   Before every call one running job ends or starts again (``JobToggle``: the allocation is given
   back to or taken from the state, the running jobs and the version are updated as the simulator
   does), so each decision follows a real state change and what the featurizer keeps across
   states is updated, not reused as is (no per-state values are kept: the toggle revisits
   states). "cold" times the same decisions with everything kept forgotten first (counted from
   scratch, as a first decision); the same decision computing all 24 features is timed too. The
   per-call thread CPU time (p50/p99, JSON ``cpu_*``) leaves out the time the thread was not
   running: on a loaded machine it approximates the wall time on an idle core.

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
from collections.abc import Callable
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
from shared.features.fast import WorkloadFeaturizer  # noqa: E402
from shared.metrics import chronological_split, make_windows  # noqa: E402
from shared.model import ActorCritic, ModelConfig  # noqa: E402
from shared.model.fast import FastActor, greedy_priorities  # noqa: E402
from shared.policies import PolicyContext, make_policy  # noqa: E402
from shared.rl.policy import LearnedPolicy  # noqa: E402
from shared.rl.ppo import RolloutBatch  # noqa: E402
from shared.rl.setup import RunSetup, load_runner  # noqa: E402
from shared.scheduling.state import Alloc, ClusterState  # noqa: E402
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
    c0 = time.thread_time()
    results = [runner.run(model, w, "sample", seed + k) for k, w in enumerate(chosen)]
    wall = time.perf_counter() - t0
    cpu = time.thread_time() - c0
    decisions = sum(len(r.decisions) for r in results)
    policy_s = sum(r.policy_seconds for r in results)
    skipped = sum(r.skipped for r in results)
    t1 = time.perf_counter()
    RolloutBatch.build(model, [(r.decisions, r.reward) for r in results], 1.0, 0.97)
    scoring = time.perf_counter() - t1
    # the same episodes again with the policy's stages timed (a few timer calls more per decision):
    # where a decision's time goes, per recorded decision
    t2 = time.perf_counter()
    timed_runs = [runner.run(model, w, "sample", seed + k, stages=True) for k, w in enumerate(chosen)]
    staged_wall = time.perf_counter() - t2
    split: dict[str, float] = {"simulator": staged_wall - sum(r.policy_seconds for r in timed_runs)}
    for r in timed_runs:
        for stage, sec in r.stage_seconds.items():
            split[stage] = split.get(stage, 0.0) + sec
    split["glue"] = sum(r.policy_seconds for r in timed_runs) - sum(
        v for k, v in split.items() if k != "simulator"
    )
    split_us = {k: v / decisions * 1e6 for k, v in split.items()} if decisions else {}
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
        # the rollout's thread CPU time per recorded decision (simulator + policy): on a shared
        # machine less inflated by other processes than the wall time
        "rollout_cpu_s": cpu,
        "cpu_us_per_decision": cpu / decisions * 1e6 if decisions else 0.0,
        "batch_scoring_s": scoring,
        "decisions_per_s_with_scoring": decisions / (wall + scoring) if wall > 0 else 0.0,
        "mean_queue": float(np.mean([len(d.obs) for r in results for d in r.decisions]))
        if decisions
        else 0.0,
        # per recorded decision, from a second run with the stages timed: simulator (everything
        # but the policy's keys), cluster view, features, forward, order (sample + priorities),
        # glue (the rest of keys: base keys, slots, blocked cycles' base answer, warm-up cycles)
        "us_per_decision_split": split_us,
    }


class JobToggle:
    """Ends a random running job, then starts it again, one change per call, as the simulator
    tells the policy (``RunningJobs`` and a new state version): every timed decision follows a
    start or an end, so the state it sees differs from the previous one by one job."""

    def __init__(
        self, policy: LearnedPolicy, state: ClusterState, allocs: list[Alloc], run: np.ndarray, seed: int
    ) -> None:
        self.policy, self.state, self.allocs, self.run = policy, state, allocs, run
        self.rng = np.random.default_rng(seed)
        self.out: tuple[int, float] | None = None  # the ended job: its index and estimated end

    def __call__(self) -> None:
        running = self.policy.running
        if self.out is None:
            k = int(self.rng.integers(len(self.allocs)))
            j = int(self.run[k])
            self.state.give(self.allocs[k])
            end = float(running.est_end[np.flatnonzero(running.jobs == j)[0]])
            running.remove(j)
            self.out = (k, end)
        else:
            k, end = self.out
            self.state.take(self.allocs[k])
            running.add(int(self.run[k]), self.allocs[k].group, end)
            self.out = None
        self.policy.touch()

    def restore(self) -> None:
        if self.out is not None:
            self()


def timed(
    calls: int, before: Callable[[], object], fn: Callable[[], object]
) -> tuple[np.ndarray, np.ndarray]:
    """Wall and thread CPU times of ``fn()`` in ms, each after an untimed ``before()``."""
    wall, cpu = [], []
    for _ in range(calls):
        before()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        cpu.append(time.thread_time() - c0)
        wall.append(t1 - t0)
    return np.asarray(wall) * 1e3, np.asarray(cpu) * 1e3


def bench_latency(preset: str, trace: str, calls: int, seed: int) -> list[dict[str, Any]]:
    work = prepare_workload(trace, preset, seed=seed)
    jobs = work.bound.jobs
    state, run, run_group, remaining, allocs = busy_cluster(work, 0.85, seed)
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
        toggle = JobToggle(policy, state, allocs, run, seed + q)
        featurizer = policy.featurizer
        # the toggle returns to the same state every other call, which a production queue would
        # rarely do: no per-state values are kept (only the last version's), so none is reused
        featurizer.states_kept = 0

        def decide(policy: LearnedPolicy = policy, queued: np.ndarray = queued, now: float = now) -> None:
            policy.prioritize(queued, now)

        def cold(toggle: JobToggle = toggle, featurizer: WorkloadFeaturizer = featurizer) -> None:
            toggle()
            featurizer.forget()

        timed(20, toggle, decide)
        # after one job started or ended: what the featurizer keeps across states is updated
        ms, cpu_ms = timed(calls, toggle, decide)
        # cold: the same, with everything kept across states forgotten first (counted from scratch)
        cold_ms, cold_cpu_ms = timed(calls, cold, decide)
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
            values = policy.featurizer.values(queued, now, policy.cluster_view(), policy.version)
            obs, _ = sampler.select(values).apply(values)
            return greedy_priorities(actor.scores(obs), model.config.top_k)

        toggle()
        assert np.array_equal(full(), policy.prioritize(queued, now))
        full_ms, _ = timed(calls, toggle, full)
        toggle.restore()
        rows.append(
            {
                "cluster": preset,
                "running": len(policy.running),
                "queue": q,
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "min_ms": float(ms.min()),
                "cold_p50_ms": float(np.percentile(cold_ms, 50)),
                "cold_p99_ms": float(np.percentile(cold_ms, 99)),
                "cpu_p50_ms": float(np.percentile(cpu_ms, 50)),
                "cpu_p99_ms": float(np.percentile(cpu_ms, 99)),
                "cold_cpu_p50_ms": float(np.percentile(cold_cpu_ms, 50)),
                "cold_cpu_p99_ms": float(np.percentile(cold_cpu_ms, 99)),
                "all_features_p50_ms": float(np.percentile(full_ms, 50)),
                "all_features_p99_ms": float(np.percentile(full_ms, 99)),
                "incremental": featurizer.incremental,
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
        cols: tuple[str, ...] = (
            "trace",
            "cluster",
            "setting",
            "windows",
            "decisions",
            "blocked, skipped",
            "mean queue",
            "policy us/cycle",
            "decisions/s",
            "CPU us/decision",
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
                f"{r['cpu_us_per_decision']:,.0f}",
                f"{r['decisions_per_s_with_scoring']:,.0f}",
                f"{r['decisions_per_s_simulator_only']:,.0f}",
            )
        console.print(table)
        stages = ("simulator", "view", "features", "forward", "order", "glue")
        split = Table(
            title="Where a recorded decision's time goes, us (a second run, the policy's stages timed)"
        )
        for col in ("trace", "setting", *stages):
            split.add_column(col, justify="left" if col in ("trace", "setting") else "right")
        for r in train_rows:
            us = r["us_per_decision_split"]
            split.add_row(r["trace"], r["setting"], *(f"{us.get(k, 0.0):,.0f}" for k in stages))
        console.print(split)
    if args.part in ("all", "latency"):
        for preset, trace in LATENCY_CASES.items():
            with console.status(f"inference latency: {preset}"):
                lat_rows.extend(bench_latency(preset, trace, args.calls, args.seed))
        table = Table(
            title="Inference per decision (views + features + selection + forward + priorities), "
            "one thread, ms"
        )
        cols = (
            "cluster",
            "running",
            "queue",
            "p50",
            "p99",
            "target p99",
            "cpu p50",
            "cpu p99",
            "cold: p50",
            "p99",
            "cold cpu p99",
            "all 24 features: p50",
            "p99",
        )
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
                f"{r['cpu_p50_ms']:.3f}",
                f"{r['cpu_p99_ms']:.3f}",
                f"{r['cold_p50_ms']:.3f}",
                f"{r['cold_p99_ms']:.3f}",
                f"{r['cold_cpu_p99_ms']:.3f}",
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
