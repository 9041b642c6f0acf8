"""Checkpoints in ``hylo run``'s own regime: many independent 800-job replays, not windows of one trace.

    .venv/bin/python bench/shipped_model.py shared/presets/models/embedded --seeds 0-29 \
        --out docs/results/shipped-model/demo-regime.json

``hylo run`` replays 800 embedded jobs (seed 0) at the in-span offered load 0.9 onto an empty
cluster: they arrive within the hour, and the queue they build drains for days. ``hylo evaluate``
measures a checkpoint on windows of one long workload instead, so this bench asks the question of
the demo itself, with more than its one sample: for each seed whose 800 jobs reach that load
(``LoadOutOfReach`` skips the others), the workload ``hylo run --seed S`` replays, simulated whole
(one window, no warm-up) under each checkpoint (greedy, as the prioritizer decides; laid over its
card's base policy) and each base policy, and paired bootstrap CIs over the seeds. The simulator's
schedule is the pipeline's decision for decision (``docs/adapter-sim.md``), so seed 0's row is what
``hylo run`` prints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from shared.domain.load import LoadOutOfReach
from shared.metrics import Window, paired_difference
from shared.rl.reward import window_score
from shared.rl.setup import RunSetup, load_runner, load_trained

POLICIES = ("fcfs", "sjf", "sjf-oracle", "wfp3", "unicep", "f1", "multifactor", "sjf-pred", "wfp3-pred")
METRICS = ("wait", "bsld")
JOBS, LOAD = 800, 0.9  # hylo run's defaults (shared/cli/run.py DEFAULT_JOBS, DEMO_LOAD)


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def measure(checkpoints: list[Path], seeds: list[int]) -> dict[str, Any]:
    """Per seed and schedule, the mean wait (s) and mean bounded slowdown of all 800 jobs."""
    torch.set_num_threads(1)
    models = {str(c): load_trained(c) for c in checkpoints}
    values: dict[str, dict[str, list[float]]] = {k: {m: [] for m in METRICS} for k in [*models, *POLICIES]}
    used = []
    for seed in seeds:
        setup = RunSetup(
            base_policy="fcfs", metric="wait", warmup=0, seed=seed, n_jobs=JOBS, target_load=LOAD
        )
        try:
            work, runner = load_runner(None, "embedded", setup, predictions=True)
        except LoadOutOfReach:
            continue
        used.append(seed)
        window = Window(0, len(work.bound.jobs))
        for name, (model, card, _) in models.items():
            policy = runner.learned_policy(
                model, window, "greedy", torch.Generator().manual_seed(0), card.training.base_policy
            )
            policy.record = False
            result = runner.simulate(policy, window)
            for m in METRICS:
                values[name][m].append(window_score(result, m))
        for name in POLICIES:
            result = runner.simulate(name, window)
            for m in METRICS:
                values[name][m].append(window_score(result, m))
    return {"jobs": JOBS, "load": LOAD, "seeds": used, "values": values}


def compare(report: dict[str, Any], checkpoints: list[Path]) -> dict[str, Any]:
    """Each checkpoint against each base policy: relative improvement [95% paired bootstrap CI]."""
    values = report["values"]
    out: dict[str, Any] = {}
    for c in map(str, checkpoints):
        for ref in POLICIES:
            for m in METRICS:
                d = paired_difference(values[c][m], values[ref][m], lower_is_better=True, n_boot=2000, seed=0)
                out.setdefault(c, {}).setdefault(ref, {})[m] = [d.rel_improvement, d.rel_low, d.rel_high]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoints", type=Path, nargs="+", help="checkpoint folders")
    parser.add_argument("--seeds", default="0-29", help="seeds of the 800-job workloads, LO-HI")
    parser.add_argument("--out", type=Path, default=Path("bench/results/shipped_model.json"))
    args = parser.parse_args()
    report = measure(args.checkpoints, _seeds(args.seeds))
    report["compared"] = compare(report, args.checkpoints)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"{len(report['seeds'])} workloads (seeds {report['seeds']})")
    for name, v in report["values"].items():
        means = ", ".join(f"{m} {sum(v[m]) / len(v[m]):.4g}" for m in METRICS)
        print(f"  {name}: {means}")
    for c, refs in report["compared"].items():
        for ref in ("fcfs", "sjf"):
            line = "; ".join(
                f"{m} {x * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}]"
                for m, (x, lo, hi) in refs[ref].items()
            )
            print(f"{c} vs {ref}: {line}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
