"""The normalized-gap reward on hand-computed window scores."""

from __future__ import annotations

import math

import pytest

from shared.rl.reward import RewardSpec, normalized_gap


def test_gap_sign_and_normalization() -> None:
    # the agent halves the base's mean BSLD: (10 - 5) / max(10, 5, 1) = 0.5
    assert normalized_gap(10.0, 5.0, "bsld") == pytest.approx(0.5)
    # the agent doubles it: (5 - 10) / 10 = -0.5
    assert normalized_gap(5.0, 10.0, "bsld") == pytest.approx(-0.5)
    # waits of 7200 s vs 1800 s: (7200 - 1800) / 7200 = 0.75, whatever the unit
    assert normalized_gap(7200.0, 1800.0, "wait") == pytest.approx(0.75)
    # below one second the floor of 1 applies: (0.5 - 0.25) / 1
    assert normalized_gap(0.5, 0.25, "wait") == pytest.approx(0.25)
    assert normalized_gap(3.0, 3.0, "jct") == 0.0


def test_utilization_is_higher_better_difference() -> None:
    assert normalized_gap(0.6, 0.7, "utilization") == pytest.approx(0.1)
    assert normalized_gap(0.7, 0.6, "utilization") == pytest.approx(-0.1)


def test_nan_scores_give_no_signal_and_unknown_metric_fails() -> None:
    assert normalized_gap(math.nan, 2.0, "bsld") == 0.0
    with pytest.raises(ValueError, match="unknown metric"):
        normalized_gap(1.0, 2.0, "throughput")


def test_weighted_mix() -> None:
    spec = RewardSpec.parse("wait:3,bsld:1")
    assert spec.weights == (("wait", 0.75), ("bsld", 0.25))
    base = {"wait": 100.0, "bsld": 4.0}
    agent = {"wait": 50.0, "bsld": 8.0}
    # 0.75 * (100 - 50) / 100 + 0.25 * (4 - 8) / 8 = 0.375 - 0.125
    assert spec.reward(base, agent) == pytest.approx(0.25)
    assert RewardSpec.parse("bsld").describe() == "bsld"
    with pytest.raises(ValueError):
        RewardSpec.parse("wait:-1")
