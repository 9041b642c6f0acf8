"""The makespan metric of the reward (issue 23: wait and makespan together, the paper's mix) and
training on given windows (whole bursts, ``TrainConfig.train_windows``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.domain.jobs import build_table
from shared.metrics import Window, summarize_window
from shared.model import ActorCritic, ModelConfig
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.rl.reward import RewardSpec, normalized_gap, window_makespan, window_score, window_values
from shared.rl.trainer import TrainConfig, _Loop, split_windows
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.rl.conftest import one_node


def _result(
    submit: list[float], start: list[float], end: list[float], mask: list[bool] | None = None
) -> SimResult:
    n = len(submit)
    table = build_table(ids=[f"j{k}" for k in range(n)], submit=submit, runtime=[1.0] * n, gpus=[1] * n)
    return SimResult(
        jobs=table,
        start=np.asarray(start, dtype=np.float64),
        end=np.asarray(end, dtype=np.float64),
        capacity_gpus=4,
        timeline_t=np.asarray([0.0]),
        timeline_busy=np.asarray([0.0]),
        timeline_queued=np.asarray([0], dtype=np.int64),
        metric_mask=np.asarray(mask if mask is not None else [True] * n),
    )


def test_makespan_is_lower_better_gap() -> None:
    # the agent ends the burst at 330 s, the base at 300 s: (300 - 330) / 330
    assert normalized_gap(300.0, 330.0, "makespan") == pytest.approx(-30.0 / 330.0)
    assert normalized_gap(330.0, 300.0, "makespan") == pytest.approx(30.0 / 330.0)


def test_mix_of_wait_and_makespan_can_trade_them() -> None:
    spec = RewardSpec.parse("wait:0.5,makespan:0.5")
    # waits halved (+0.5) but the makespan 25% longer (-0.2): 0.25 - 0.1
    reward = spec.reward({"wait": 100.0, "makespan": 300.0}, {"wait": 50.0, "makespan": 375.0})
    assert reward == pytest.approx(0.5 * 0.5 + 0.5 * (-75.0 / 375.0))
    # a wait gain bought with a makespan loss that outweighs it is negative
    assert spec.reward({"wait": 100.0, "makespan": 300.0}, {"wait": 90.0, "makespan": 400.0}) < 0


def test_window_makespan_counts_only_the_windows_scored_jobs() -> None:
    # job 3 (outside the window) ends last and job 1 (masked) ends late: neither counts
    result = _result(
        submit=[5.0, 6.0, 7.0, 8.0],
        start=[5.0, 6.0, 9.0, 8.0],
        end=[20.0, 90.0, 40.0, 500.0],
        mask=[True, False, True, True],
    )
    assert window_makespan(result, Window(0, 3)) == pytest.approx(40.0 - 5.0)
    # first arrival of the scored jobs, not of the window's first row
    masked_first = _result([5.0, 6.0], [5.0, 6.0], [20.0, 30.0], mask=[False, True])
    assert window_makespan(masked_first, Window(0, 2)) == pytest.approx(30.0 - 6.0)


def test_window_makespan_is_nan_when_a_job_did_not_finish() -> None:
    result = _result([0.0, 1.0], [0.0, math.nan], [10.0, math.nan])
    assert math.isnan(window_makespan(result, Window(0, 2)))
    assert normalized_gap(10.0, window_makespan(result, Window(0, 2)), "makespan") == 0.0


def _burst_workload() -> BoundWorkload:
    """Two bursts of 1- and 4-GPU jobs on one 4-GPU node, far apart."""
    rng = np.random.default_rng(3)
    submit = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 1000.0, 1000.5, 1001.0, 1001.5, 1002.0, 1002.5]
    gpus = [int(g) for g in rng.choice([1, 4], size=len(submit))]
    runtime = [float(r) for r in rng.choice([10.0, 60.0], size=len(submit))]
    table = build_table(
        ids=[f"j{k}" for k in range(len(submit))], submit=submit, runtime=runtime, estimate=runtime, gpus=gpus
    )
    return bind_jobs(table, one_node())


def test_makespan_agrees_with_the_window_summary_on_a_simulated_run() -> None:
    w = _burst_workload()
    window = Window(6, 6)
    result = Simulator(w, make_policy("sjf")).run((6, 12), (6, 12))
    summary = summarize_window(result, window)
    assert window_makespan(result, window) == pytest.approx(summary.makespan_s)
    assert window_score(summary, "makespan") == pytest.approx(summary.makespan_s)
    values = window_values(result, window, ("wait", "makespan"))
    assert values == pytest.approx({"wait": summary.wait_s.mean, "makespan": summary.makespan_s})


def test_episode_reward_uses_the_makespan() -> None:
    w = _burst_workload()
    settings = EpisodeSettings(
        base_policy="fcfs", reward=RewardSpec.parse("makespan"), config=SimConfig(), warmup=0
    )
    runner = EpisodeRunner(w, settings)
    model = ActorCritic(ModelConfig(base_prior=1.0)).eval()
    window = Window(0, 6)
    res = runner.run(model, window, "greedy")
    base = runner.base_metrics(window)
    assert res.base_scores == {"makespan": pytest.approx(base.makespan_s)}
    # with the prior and a zero output layer the greedy model is FCFS: same makespan, reward 0
    assert res.agent_scores["makespan"] == pytest.approx(base.makespan_s)
    assert res.reward == pytest.approx(0.0)


def test_given_windows_replace_the_chronological_split() -> None:
    windows = tuple(Window(6 * k, 6) for k in range(5))
    cfg = TrainConfig(windows_per_epoch=3, train_windows=windows[:4], validation_list=windows[4:])
    fit, val = split_windows(30, cfg)
    assert fit == range(0, 24)
    assert val == [windows[4]]
    w = _burst_workload()
    settings = EpisodeSettings(base_policy="fcfs", reward=RewardSpec.parse("wait"), warmup=0)
    loop = _Loop(EpisodeRunner(w, settings), cfg, None)
    first = loop.epoch_windows(1)
    assert len(first) == 3 and set(first) <= set(windows[:4])
    assert len(set(first)) == 3  # without replacement while the list lasts
    assert loop.epoch_windows(1) == first  # seeded by (seed, epoch)
    many = TrainConfig(windows_per_epoch=9, train_windows=windows[:2])
    assert set(_Loop(EpisodeRunner(w, settings), many, None).epoch_windows(2)) <= set(windows[:2])
