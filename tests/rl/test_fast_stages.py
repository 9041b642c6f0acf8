"""What the fast rollout keeps or measures changes no decision.

1. Timing the policy's stages (``run(..., stages=True)``, used by bench/rl_throughput.py) gives the
   same episode: same decisions, orders and reward, and stage times that add up to no more than
   the policy's time.
2. An episode records the same observations, critic features and orders whatever the featurizer
   keeps across decisions (nothing, placement counts updated from the changed nodes, every job
   kind's values per free state): each mode is exact, so a training run cannot tell them apart.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared.features.fast import WorkloadFeaturizer
from shared.metrics import chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.policies.base import PolicyContext
from shared.rl.episodes import EpisodeRunner
from shared.rl.policy import Decision, LearnedPolicy
from shared.rl.setup import RunSetup, load_runner
from shared.sim.binding import BoundWorkload


@pytest.fixture(scope="module")
def embedded() -> tuple[BoundWorkload, EpisodeRunner]:
    work, runner = load_runner(None, None, RunSetup(n_jobs=1500, target_load=1.1, warmup=64))
    return work.bound, runner


def _model() -> ActorCritic:
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig()).eval()
    with torch.no_grad():  # scores far apart: the sampled orders depend on the features
        model.actor[-1].weight.mul_(30.0)
    return model


def test_timed_stages_change_nothing(embedded: tuple[BoundWorkload, EpisodeRunner]) -> None:
    bound, runner = embedded
    model = _model()
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=4)[0]
    plain = runner.run(model, window, "sample", seed=3)
    timed = runner.run(model, window, "sample", seed=3, stages=True)
    assert len(plain.decisions) > 20 and plain.reward == timed.reward
    for x, y in zip(plain.decisions, timed.decisions, strict=True):
        assert np.array_equal(x.obs, y.obs) and np.array_equal(x.order, y.order)
    assert plain.stage_seconds == {}
    assert set(timed.stage_seconds) == {"view", "features", "forward", "order"}
    assert min(timed.stage_seconds.values()) > 0
    assert sum(timed.stage_seconds.values()) <= timed.policy_seconds


class _ModePolicy(LearnedPolicy):
    """A learned policy whose featurizer keeps what the test says (not the shared one)."""

    mode_flags: tuple[bool, bool] = (False, False)

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        incremental, all_kinds = self.mode_flags
        self.featurizer = WorkloadFeaturizer(
            self.builder.all_jobs(),
            self.builder.empty_cluster(),
            self.feature_config,
            incremental=incremental,
            all_kinds=all_kinds,
        )
        self.featurizer.ends_sorted = True


def _episode(
    runner: EpisodeRunner, bound: BoundWorkload, flags: tuple[bool, bool]
) -> tuple[list[Decision], _ModePolicy]:
    model = _model()
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=6)[0]
    base = runner.learned_policy(model, window, "sample")
    policy = _ModePolicy(
        model,
        base.base,
        mode="sample",
        warm_until=base.warm_until,
        sampler=base.sampler,
        generator=np.random.default_rng(11),
    )
    policy.mode_flags = flags
    runner.simulate(policy, window)
    return policy.log.decisions, policy


def test_featurizer_modes_record_the_same_episode(embedded: tuple[BoundWorkload, EpisodeRunner]) -> None:
    bound, runner = embedded
    reference, _ = _episode(runner, bound, (False, False))
    assert len(reference) >= 10
    for flags in ((True, False), (False, True)):
        got, policy = _episode(runner, bound, flags)
        if flags[0]:
            assert policy.featurizer._counts.updates > 10  # counts were kept and updated
        assert len(got) == len(reference), flags
        for x, y in zip(reference, got, strict=True):
            assert x.time == y.time
            assert np.array_equal(x.obs, y.obs) and np.array_equal(x.critic, y.critic), flags
            assert np.array_equal(x.order, y.order), flags
