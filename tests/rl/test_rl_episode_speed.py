"""What the training episode's speed-ups leave unchanged.

- ``EpisodeRunner.run`` scores the agent with ``window_means`` instead of ``summarize_window``:
  the reward and the scores must be those of the whole summary (``RewardSpec.scores``), here
  computed by the old path (``EpisodeRunner.simulate`` on a policy with the same seed), for every
  metric and a mix, in the paper setting and under EASY, and on results with unstarted and
  unfinished jobs (NaN waits and ends) and an empty timeline.
- the compiled core calls back into Python through ``kernels._call_back``: an exception raised by
  the policy there still ends the run and reaches the caller.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from shared.metrics import chronological_split, make_windows, summarize_window, window_means
from shared.model import ActorCritic, ModelConfig
from shared.policies import make_policy
from shared.rl.reward import RewardSpec
from shared.rl.setup import RunSetup, load_runner
from shared.scheduling.result import SimResult
from shared.sim.simulator import Simulator


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("paper", [False, True])
@pytest.mark.parametrize("metric", ["bsld", "wait", "jct", "utilization", "wait:0.3,bsld:0.7"])
def test_episode_scores_are_the_whole_summarys(paper: bool, metric: str) -> None:
    work, runner = load_runner(
        None, None, RunSetup(n_jobs=1200, target_load=1.1, warmup=64, paper=paper, metric=metric)
    )
    train, _ = chronological_split(len(work.bound.jobs), 0.8)
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig()).eval()
    spec = RewardSpec.parse(metric)
    for k, window in enumerate(make_windows(train, 128, 3, seed=2)):
        got = runner.run(model, window, "sample", k)
        # the old path: the whole summary of the same episode (same seed, same decisions)
        policy = runner.learned_policy(model, window, "sample", np.random.default_rng(k))
        want_scores = spec.scores(runner.simulate(policy, window))
        assert len(policy.log.decisions) == len(got.decisions)
        assert got.agent_scores.keys() == want_scores.keys()
        assert all(same(got.agent_scores[n], want_scores[n]) for n in want_scores)
        base = spec.scores(runner.base_metrics(window))
        assert same(got.reward, spec.reward(base, want_scores))


def test_window_means_match_the_summary_with_unfinished_jobs() -> None:
    # the capped load these tests were tuned on: 600 jobs reach at most 0.4 in-span
    _, runner = load_runner(
        None, None, RunSetup(n_jobs=600, target_load=1.2, warmup=0, load_definition="capped")
    )
    sim = Simulator(runner.workload, make_policy("fcfs"), runner.settings.config)
    full = sim.run((0, 300), (50, 250))
    rng = np.random.default_rng(3)
    cases = [full]
    for drop in (0.1, 0.5, 1.0):  # jobs cut off: never started, or started and not finished
        start, end = full.start.copy(), full.end.copy()
        cut = rng.random(len(start)) < drop
        end[cut] = np.nan
        start[cut & (rng.random(len(start)) < 0.5)] = np.nan
        cases.append(
            SimResult(
                jobs=full.jobs,
                start=start,
                end=end,
                capacity_gpus=full.capacity_gpus,
                timeline_t=full.timeline_t if drop < 1.0 else full.timeline_t[:0],
                timeline_busy=full.timeline_busy if drop < 1.0 else full.timeline_busy[:0],
                timeline_queued=full.timeline_queued if drop < 1.0 else full.timeline_queued[:0],
                metric_mask=full.metric_mask,
            )
        )
    for result in cases:
        for sel in (range(50, 250), range(0, 300), np.arange(60, 90)):
            for mask in (True, False):
                m = summarize_window(result, sel, respect_metric_mask=mask)
                got = window_means(result, sel, respect_metric_mask=mask)
                want = {
                    "wait": m.wait_s.mean,
                    "jct": m.jct_s.mean,
                    "bsld": m.bsld.mean,
                    "utilization": m.utilization,
                }
                assert all(same(got[n], want[n]) for n in want), (got, want)


def test_an_exception_in_the_policy_reaches_the_caller() -> None:
    # the capped load these tests were tuned on: 600 jobs reach at most 0.4 in-span
    work, runner = load_runner(
        None, None, RunSetup(n_jobs=600, target_load=1.2, warmup=32, load_definition="capped")
    )
    train, _ = chronological_split(len(work.bound.jobs), 0.8)
    window = make_windows(train, 128, 1, seed=0)[0]
    torch.manual_seed(0)
    policy = runner.learned_policy(
        ActorCritic(ModelConfig()).eval(), window, "sample", np.random.default_rng(0)
    )
    calls = []

    def fail(idx: np.ndarray, now: float) -> np.ndarray:
        calls.append(now)
        raise RuntimeError("policy failed")

    policy.keys = fail  # type: ignore[method-assign]
    sim = Simulator(runner.workload, policy, runner.settings.config)
    sim.core = "compiled"
    with pytest.raises(RuntimeError, match="policy failed"):
        sim.run(runner.job_range(window), (window.start, window.stop))
    assert len(calls) == 1
