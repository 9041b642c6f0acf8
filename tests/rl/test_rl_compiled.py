"""The learned policy on the simulator's compiled core gives what it gives on the Python loop.

Training episodes and evaluations run ``LearnedPolicy`` on the compiled core by default
(``ExternalCompiled``): the core calls back into Python at each cycle that orders the
queue. The bar is the Python loop's episode, decision for decision: the same schedule, the same
recorded decisions (observation, critic features, sampled order, time) and the same count of
blocked cycles, greedy and sampled (numpy's stream, and torch's, which also samples blocked
cycles), in the paper setting and under EASY with estimates, over a base policy with static keys
(whose keys the core uses itself before the window: ``external_hints``) and over the multifactor
policy (clock-dependent, tracking jobs: every start and end is replayed to it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared.metrics import Window, chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.rl.episodes import EpisodeRunner
from shared.rl.policy import LearnedPolicy
from shared.rl.setup import RunSetup, load_runner
from shared.sim.simulator import Simulator


def episode(
    runner: EpisodeRunner, model: ActorCritic, window: Window, mode: str, gen: str, core: str, seed: int
) -> tuple[Simulator, LearnedPolicy, np.ndarray]:
    rng: torch.Generator | np.random.Generator = (
        np.random.default_rng(seed) if gen == "numpy" else torch.Generator().manual_seed(seed)
    )
    policy = runner.learned_policy(model, window, mode, rng)  # type: ignore[arg-type]
    sim = Simulator(runner.workload, policy, runner.settings.config)
    sim.core = core
    result = sim.run(runner.job_range(window), (window.start, window.stop))
    assert sim.last_core == core, sim.core_reason
    return sim, policy, np.stack([result.start, result.end, result.nodes_used.astype(float)])


@pytest.mark.parametrize("base", ["fcfs", "multifactor"])
@pytest.mark.parametrize("paper", [False, True])
def test_learned_episodes_are_the_same_on_both_loops(base: str, paper: bool) -> None:
    work, runner = load_runner(
        None, None, RunSetup(n_jobs=1500, target_load=1.1, warmup=64, paper=paper, base_policy=base)
    )
    train, _ = chronological_split(len(work.bound.jobs), 0.8)
    windows = make_windows(train, 128, 3, seed=1)
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig()).eval()
    recorded = 0
    for k, window in enumerate(windows):
        for mode, gen in (("greedy", "numpy"), ("sample", "numpy"), ("sample", "torch")):
            _, pa, sa = episode(runner, model, window, mode, gen, "python", k)
            _, pb, sb = episode(runner, model, window, mode, gen, "compiled", k)
            np.testing.assert_array_equal(sa, sb)
            assert pa.skipped == pb.skipped
            assert len(pa.log.decisions) == len(pb.log.decisions)
            for da, db in zip(pa.log.decisions, pb.log.decisions, strict=True):
                assert da.time == db.time
                np.testing.assert_array_equal(da.obs, db.obs)
                np.testing.assert_array_equal(da.critic, db.critic)
                np.testing.assert_array_equal(da.order, db.order)
            recorded += len(pb.log.decisions)
    assert recorded > 50  # the windows queue: there were decisions to compare


def test_training_episodes_run_on_the_compiled_core() -> None:
    # the capped load these tests were tuned on: 600 jobs reach at most 0.4 in-span
    work, runner = load_runner(
        None, None, RunSetup(n_jobs=600, target_load=1.1, warmup=64, load_definition="capped")
    )
    window = make_windows(chronological_split(len(work.bound.jobs), 0.8)[0], 128, 1, seed=0)[0]
    policy = runner.learned_policy(
        ActorCritic(ModelConfig()).eval(), window, "sample", np.random.default_rng(0)
    )
    sim = Simulator(runner.workload, policy, runner.settings.config)
    sim.run(runner.job_range(window), (window.start, window.stop))
    assert sim.last_core == "compiled" and sim.core_reason is None
