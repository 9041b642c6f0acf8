"""Feature sampling: the state rule, the fixed ablation, determinism and seeded exploration."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from shared.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    FeatureSampler,
    FeatureValues,
    SamplingConfig,
)


def _values(fragmentation: float, ways: list[float]) -> FeatureValues:
    """Feature values whose job columns hold their own column index (to check apply())."""
    q = len(ways)
    job = np.tile(np.arange(len(JOB_FEATURES), dtype=np.float64), (q, 1)) / 100
    cluster = np.arange(len(CLUSTER_FEATURES), dtype=np.float64) / 100
    cluster[CLUSTER_FEATURES.index("fragmentation")] = fragmentation
    return FeatureValues(job=job, cluster=cluster, ways=np.asarray(ways, dtype=np.float64), now=0.0)


def test_high_fragmentation_emphasizes_job_size() -> None:
    sel = FeatureSampler().select(_values(0.8, [1, 0, 1, 1]))
    assert "job_size" in sel.observation_names
    assert "urgency" not in sel.observation_names
    assert "num_ways" not in sel.observation_names  # 0 of 4 jobs have 2+ placements
    # the emphasized feature plus the 7 highest-priority others, in catalog order
    assert sel.observation_names == (
        "gpus",
        "requested_time",
        "wait",
        "can_schedule_now",
        "demand_supply",
        "job_size",
        "future_availability",
        "fragmentation",
    )
    assert sel.critic_names == (
        "free_gpus",
        "fragmentation",
        "queue_demand",
        "runnable",
        "future_availability",
    )


def test_low_fragmentation_emphasizes_urgency() -> None:
    sel = FeatureSampler().select(_values(0.1, [1, 0, 1, 1]))
    assert "urgency" in sel.observation_names
    assert "job_size" not in sel.observation_names
    assert sel.critic_names == (
        "free_gpus",
        "queue_demand",
        "mean_urgency",
        "runnable",
        "future_availability",
    )


def test_threshold_is_inclusive() -> None:
    sampler = FeatureSampler()
    assert "job_size" in sampler.select(_values(0.5, [0])).observation_names
    assert "urgency" in sampler.select(_values(0.4999, [0])).observation_names


def test_several_placements_emphasize_num_ways() -> None:
    sampler = FeatureSampler()
    # 2 of 4 jobs have >= 2 usable nodes: fraction 0.5 reaches the threshold
    both = sampler.select(_values(0.9, [3, 2, 1, 0]))
    assert {"job_size", "num_ways"} <= set(both.observation_names)
    assert len(both.observation) == 8
    assert "fragmentation" not in both.observation_names  # pushed out by the two emphasized
    low = sampler.select(_values(0.0, [5, 5, 5, 0]))
    assert {"urgency", "num_ways"} <= set(low.observation_names)
    # one of four: below the threshold
    assert "num_ways" not in sampler.select(_values(0.0, [5, 1, 1, 0])).observation_names


def test_selection_shape_and_order() -> None:
    for frag in (0.0, 1.0):
        for ways in ([0.0], [9.0, 9.0]):
            sel = FeatureSampler().select(_values(frag, ways))
            assert len(sel.observation) == 8 and len(set(sel.observation)) == 8
            assert len(sel.critic) == 5 and len(set(sel.critic)) == 5
            assert list(sel.observation) == sorted(sel.observation)
            assert list(sel.critic) == sorted(sel.critic)
            assert sel.observation_mask.sum() == 8


def test_apply_takes_the_selected_columns() -> None:
    values = _values(0.9, [1, 1, 1])
    sel = FeatureSampler().select(values)
    obs, critic = sel.apply(values)
    assert obs.shape == (3, 8)
    np.testing.assert_allclose(obs[0] * 100, sel.observation)
    np.testing.assert_array_equal(critic, values.cluster[list(sel.critic)])


def test_fixed_mode_ignores_the_state() -> None:
    sampler = FeatureSampler(SamplingConfig(mode="fixed"))
    a = sampler.select(_values(0.0, [5, 5]))
    b = sampler.select(_values(1.0, [0, 0]))
    assert a == b == sampler.fixed()
    # the top of the priority lists
    assert set(a.observation_names) == set(SamplingConfig().priority[:8])
    assert set(a.critic_names) == set(SamplingConfig().critic_priority[:5])


def test_deterministic_without_rng() -> None:
    values = _values(0.7, [2, 2, 0])
    assert FeatureSampler().select(values) == FeatureSampler().select(values)


def test_seeded_exploration_is_reproducible_and_keeps_emphasis() -> None:
    sampler = FeatureSampler(SamplingConfig(explore=3.0))
    values = _values(0.9, [2, 2, 0])
    draws = [sampler.select(values, np.random.default_rng(seed)) for seed in range(30)]
    again = [sampler.select(values, np.random.default_rng(seed)) for seed in range(30)]
    assert draws == again
    assert len({d.observation for d in draws}) > 1  # the noise changes the non-emphasized picks
    assert all({"job_size", "num_ways"} <= set(d.observation_names) for d in draws)
    assert all(len(set(d.observation)) == 8 for d in draws)
    # without exploration an rng changes nothing
    plain = FeatureSampler()
    assert plain.select(values, np.random.default_rng(1)) == plain.select(values)


def test_config_validation() -> None:
    with pytest.raises(ValidationError):
        SamplingConfig(priority=("wait", "gpus"))
    with pytest.raises(ValidationError):
        SamplingConfig(n_observation=len(JOB_FEATURES) + 1)
    with pytest.raises(ValidationError):
        SamplingConfig(critic_priority=tuple(reversed(CLUSTER_FEATURES))[1:])
