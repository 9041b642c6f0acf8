"""The real-trace mode of ``bench/trainer_warmstart.py``: what its numbers rest on.

1. Scoring the model between epochs (``scored_run``, through ``captured_model``) must not change
   the training it measures: the weights after a scored run equal those of an unscored ``train``
   with the same config, and the epoch-0 point is the model ``train`` starts from.
2. "Beats the base" needs a positive mean improvement AND a 95% interval above zero.
3. ``period`` keeps exactly the chosen jobs, in order.

Small synthetic workload (the bench's ``A``, 400 jobs), 32-job windows: a few seconds.
"""

from __future__ import annotations

import argparse
from types import ModuleType

import numpy as np
import pytest
import torch

from shared.metrics import chronological_split
from shared.rl.trainer import train
from shared.sim.evaluate import PreparedWorkload
from tests.bench_script import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("trainer_warmstart")


def args() -> argparse.Namespace:
    return argparse.Namespace(
        base="fcfs",
        metric="wait",
        windows_per_epoch=2,
        window_size=32,
        learning_rate=1e-3,
        update_epochs=2,
        minibatch_size=64,
        kl_min_epochs=1,
    )


def test_scoring_between_epochs_leaves_training_unchanged(bench: ModuleType) -> None:
    torch.set_num_threads(1)
    bound = bench.workload(False, 400, 0)
    a = args()
    _, test = chronological_split(len(bound.jobs), 0.9)
    held = bench.HeldOut(bench.fresh_runner(bound, a), test, 2, 32, "wait")
    cfg = bench.real_config(a, seed=3, epochs=3)

    run = bench.scored_run(bench.fresh_runner(bound, a), held, cfg, None, 0.0, lambda e: True, None, None)
    plain = train(bench.fresh_runner(bound, a), bench.real_config(a, seed=3, epochs=3))

    assert [p["epoch"] for p in run["curve"]] == [0, 1, 2, 3]
    for name, value in plain.model.state_dict().items():
        assert torch.equal(run["state"][name], value), name
    torch.manual_seed(3)
    initial = bench.ActorCritic(cfg.model).eval()
    assert run["curve"][0]["per_window"] == held.score(initial)
    assert run["curve"][-1]["per_window"] == held.score(plain.model)


def test_beating_needs_the_interval_above_zero(bench: ModuleType) -> None:
    held = bench.HeldOut.__new__(bench.HeldOut)
    held.spec = bench.get_spec("wait_mean")
    held.base = [100.0, 200.0, 300.0, 400.0]

    better = held.compare([90.0, 180.0, 270.0, 360.0])  # 10% lower in every window
    assert better["beats"]
    assert better["improvement"] == pytest.approx(0.1)
    assert better["ci_low"] == pytest.approx(0.1) and better["ci_high"] == pytest.approx(0.1)

    mixed = held.compare([40.0, 250.0, 250.0, 450.0])  # better on average, worse in half the windows
    assert mixed["improvement"] > 0
    assert mixed["ci_low"] < 0
    assert not mixed["beats"]

    assert not held.compare(list(held.base))["beats"]


def test_period_keeps_the_chosen_jobs(bench: ModuleType) -> None:
    bound = bench.workload(False, 200, 0)
    work = PreparedWorkload(name="A", bound=bound)
    part = bench.period(work, 50, 120)
    assert list(part.jobs.ids) == list(bound.jobs.ids[50:120])
    assert np.array_equal(part.jobs.submit, bound.jobs.submit[50:120])
