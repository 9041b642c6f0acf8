"""What the fast rollout keeps or measures changes no decision.

1. Timing the policy's stages (``run(..., stages=True)``, used by bench/rl_throughput.py) gives the
   same episode: same decisions, orders and reward, and stage times that add up to no more than
   the policy's time.
2. An episode records the same observations, critic features and orders whatever the featurizer
   keeps across decisions (nothing, placement counts updated from the changed nodes, every job
   kind's values per free state): each mode is exact, so a training run cannot tell them apart.
   The last mode takes the fused path (``SimObserver``, ``finish_and_sample``), the others the
   cluster view and separate calls.
3. The fused path's pieces, turned off one by one (the BLAS products, numba's ``log`` and
   ``log1p``, the sample's last call, the observation's call), give the same episode: decisions,
   orders, schedule.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from shared.features.fast import WorkloadFeaturizer
from shared.features.sim_observe import SimObserver
from shared.metrics import chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.policies.base import PolicyContext
from shared.rl.episodes import EpisodeRunner
from shared.rl.fused import blas_matches_numpy, libm_matches_numpy
from shared.rl.policy import Decision, LearnedPolicy
from shared.rl.setup import RunSetup, load_runner
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator


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
    # the fused path (``LearnedPolicy._sample``): the cluster view is part of the features
    assert set(timed.stage_seconds) == {"features", "forward", "order"}
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
        assert policy._fused == flags[1]  # every kind's values: the fused path (``SimObserver``)
        assert len(got) == len(reference), flags
        for x, y in zip(reference, got, strict=True):
            assert x.time == y.time
            assert np.array_equal(x.obs, y.obs) and np.array_equal(x.critic, y.critic), flags
            assert np.array_equal(x.order, y.order), flags


class _Unfused(LearnedPolicy):
    """A learned policy with the fused path's pieces turned off: ``level`` 1, ``demand_supply``'s
    BLAS calls in the last call (numpy's before it); 2, numba's ``log`` and ``log1p`` too; 3, the
    sample's last call (``_sample``); 4, the observation's call too (``SimObserver``); 0, none."""

    level = 0

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        super().attach(state, allocs)
        assert self._fused and self.observer.usable  # what is turned off was on
        assert self._libm == libm_matches_numpy() and self._blas == blas_matches_numpy()
        if self.level >= 1:
            self._blas = False
        if self.level >= 2:
            self._libm = False
        if self.level >= 3:
            self._fused = False
        if self.level >= 4:
            self.observer = SimObserver(self.builder, self.featurizer)
            self.observer.enabled = False


@pytest.mark.parametrize("paper", [False, True])
def test_fused_path_records_the_same_episode(
    embedded: tuple[BoundWorkload, EpisodeRunner], paper: bool
) -> None:
    bound, runner = embedded
    model = _model()
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=5)[0]
    config = SimConfig.paper() if paper else SimConfig()
    results = []
    for level in (0, 1, 2, 3, 4):
        base = runner.learned_policy(model, window, "sample")
        policy = _Unfused(
            model,
            base.base,
            mode="sample",
            warm_until=base.warm_until,
            sampler=base.sampler,
            generator=np.random.default_rng(7),
        )
        policy.level = level
        result = Simulator(bound, policy, config).run(runner.job_range(window), (window.start, window.stop))
        results.append((result, policy))
    (ref, ref_policy), *others = results
    assert len(ref_policy.log) > 20
    for result, policy in others:
        np.testing.assert_array_equal(result.start, ref.start)
        assert policy.skipped == ref_policy.skipped and len(policy.log) == len(ref_policy.log)
        for x, y in zip(ref_policy.log.decisions, policy.log.decisions, strict=True):
            assert x.time == y.time and x.obs.dtype == y.obs.dtype == np.float32
            assert np.array_equal(x.obs, y.obs) and np.array_equal(x.critic, y.critic)
            assert x.order.dtype == np.int64 and np.array_equal(x.order, y.order)


def test_compiled_numpy_calls_are_checked_here() -> None:
    """On this machine numba's ``log``/``log1p`` and the direct BLAS products give numpy's floats
    (x86-64 without AVX-512 and numpy's OpenBLAS wheel; elsewhere the checks may say no, and the
    fused path then calls numpy): the episodes above exercised them."""
    if not (libm_matches_numpy() and blas_matches_numpy()):
        pytest.skip("numpy's log/log1p or matmul take other paths here")
    from shared.rl.fused import _pool_demand

    rng = np.random.default_rng(1)
    for q, n_groups in ((2, 1), (7, 2), (40, 3), (256, 2)):
        share = rng.random(q) / 7.0
        elig = np.ascontiguousarray(rng.random((q, n_groups)) < 0.5, dtype=np.float64)
        cap = rng.integers(1, 500, n_groups).astype(np.float64)
        got = np.empty(q)
        _pool_demand(share, elig, cap, got)
        assert got.tobytes() == (elig @ (cap * (share @ elig))).tobytes()
