"""Bootstrap intervals: determinism, coverage, paired sign conventions and speed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.metrics import bootstrap_ci, paired_difference

NAN = float("nan")


def test_bootstrap_deterministic_for_seed() -> None:
    values = np.random.default_rng(0).exponential(100.0, size=60)
    a = bootstrap_ci(values, seed=42)
    assert a == bootstrap_ci(values, seed=42)
    assert a != bootstrap_ci(values, seed=43)
    assert a.low < a.mean < a.high
    assert a.mean == pytest.approx(float(values.mean()))
    assert (a.n, a.n_nan, a.ci) == (60, 0, 0.95)


def test_bootstrap_covers_true_mean_most_of_the_time() -> None:
    # 200 independent samples of 40 values from N(5, 2): a 95% interval should contain 5 in about
    # 95% of them (percentile bootstrap runs a little narrow at n = 40, hence the 88% floor).
    rng = np.random.default_rng(123)
    hits = 0
    for rep in range(200):
        ci = bootstrap_ci(rng.normal(5.0, 2.0, size=40), n_boot=1000, seed=rep)
        hits += ci.low <= 5.0 <= ci.high
    assert hits / 200 >= 0.88


def test_bootstrap_wider_at_higher_level() -> None:
    values = np.random.default_rng(1).normal(size=50)
    narrow = bootstrap_ci(values, ci=0.5)
    wide = bootstrap_ci(values, ci=0.99)
    assert wide.low < narrow.low and narrow.high < wide.high


def test_bootstrap_edge_cases() -> None:
    one = bootstrap_ci([3.0])
    assert (one.mean, one.low, one.high, one.n) == (3.0, 3.0, 3.0, 1)
    with_nan = bootstrap_ci([1.0, NAN, 3.0])
    assert (with_nan.mean, with_nan.n, with_nan.n_nan) == (2.0, 2, 1)
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_ci([NAN])
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_ci([1.0], n_boot=0)
    with pytest.raises(ValueError, match="ci"):
        bootstrap_ci([1.0], ci=1.0)
    with pytest.raises(ValueError, match="one-dimensional"):
        bootstrap_ci([[1.0, 2.0]])


def test_paired_lower_is_better_sign_conventions() -> None:
    b = np.array([100.0, 200.0, 300.0, 400.0])  # baseline
    a = b - 25.0  # candidate waits 25 s less in every window
    d = paired_difference(a, b)
    # mean_diff = mean(a - b) = -25; relative improvement = (mean b - mean a) / mean b = 25 / 250
    assert d.mean_diff == pytest.approx(-25.0)
    assert (d.diff_low, d.diff_high) == pytest.approx((-25.0, -25.0))  # constant difference
    assert d.rel_improvement == pytest.approx(0.1)
    assert d.rel_low > 0 and d.rel_high > 0
    assert (d.frac_a_better, d.frac_tie, d.n, d.lower_is_better) == (1.0, 0.0, 4, True)
    worse = paired_difference(b, a)
    assert worse.mean_diff == pytest.approx(25.0)
    assert worse.rel_improvement == pytest.approx(-25.0 / 225.0)
    assert worse.frac_a_better == 0.0


def test_paired_higher_is_better() -> None:
    b = np.array([0.5, 0.6, 0.7])  # baseline utilization
    a = b + 0.06
    d = paired_difference(a, b, lower_is_better=False)
    # positive = better: (mean a - mean b) / mean b = 0.06 / 0.6 = 0.1
    assert d.mean_diff == pytest.approx(0.06)
    assert d.rel_improvement == pytest.approx(0.1)
    assert d.frac_a_better == 1.0
    assert paired_difference(a, b, lower_is_better=True).rel_improvement == pytest.approx(-0.1)


def test_paired_ties_nan_and_zero_baseline() -> None:
    d = paired_difference([1.0, 2.0, NAN, 5.0], [1.0, 3.0, 4.0, NAN])
    # only windows 0 and 1 are paired: ties 1/2, a better 1/2
    assert (d.n, d.n_nan, d.frac_tie, d.frac_a_better) == (2, 2, 0.5, 0.5)
    zero = paired_difference([0.0, 1.0], [0.0, 0.0])
    assert math.isnan(zero.rel_improvement) and math.isnan(zero.rel_low)
    assert zero.mean_diff == 0.5
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least one window"):
        paired_difference([NAN], [1.0])


def test_paired_resamples_windows_jointly() -> None:
    # Window loads vary 100x, the candidate is 1% better everywhere. Joint resampling must see a
    # tight interval around 1%; resampling a and b independently would straddle zero.
    rng = np.random.default_rng(7)
    b = rng.lognormal(mean=5.0, sigma=1.5, size=50)
    a = 0.99 * b
    d = paired_difference(a, b, seed=3)
    assert d.rel_improvement == pytest.approx(0.01)
    assert 0.0099 < d.rel_low <= d.rel_high < 0.0101
    assert d.diff_high < 0


def test_paired_deterministic() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(10, 1, 30), rng.normal(11, 1, 30)
    assert paired_difference(a, b, seed=9) == paired_difference(a, b, seed=9)
