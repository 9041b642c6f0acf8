"""Evaluation windows and the chronological train/test split."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.metrics import Window, chronological_split, make_windows


def test_window_basics() -> None:
    w = Window(10, 5)
    assert (w.stop, w.range, w.slice, w.label) == (15, range(10, 15), slice(10, 15), "jobs[10:15]")
    np.testing.assert_array_equal(w.indices(), [10, 11, 12, 13, 14])
    assert sorted([Window(5, 1), Window(1, 1)]) == [Window(1, 1), Window(5, 1)]
    with pytest.raises(ValueError, match="start"):
        Window(-1, 5)
    with pytest.raises(ValueError, match="size"):
        Window(0, 0)


@pytest.mark.parametrize(
    ("n", "frac", "train", "test"),
    [
        (10, 0.9, range(9), range(9, 10)),
        (10, 0.7, range(7), range(7, 10)),  # 10 * 0.7 = 7.000000000000001, not 6
        (100, 0.29, range(29), range(29, 100)),  # 100 * 0.29 = 28.999999999999996, still 29
        (2, 0.5, range(1), range(1, 2)),
        (7, 0.5, range(3), range(3, 7)),  # floor
    ],
)
def test_chronological_split(n: int, frac: float, train: range, test: range) -> None:
    assert chronological_split(n, frac) == (train, test)


def test_chronological_split_default_is_90_10() -> None:
    train, test = chronological_split(1000)
    assert (len(train), len(test), train.stop, test.start) == (900, 100, 900, 900)


@pytest.mark.parametrize(
    ("n", "frac", "match"),
    [
        (10, 0.0, "strictly between"),
        (10, 1.0, "strictly between"),
        (10, -0.5, "strictly between"),
        (1, 0.5, "cannot split 1 job"),
        (0, 0.5, "cannot split 0 job"),
        (2, 0.1, "empty train or test"),
        (3, 0.3, "empty train or test"),  # floor(0.9) = 0 train jobs
    ],
)
def test_chronological_split_errors(n: int, frac: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        chronological_split(n, frac)


def test_make_windows_non_overlapping_sample() -> None:
    wins = make_windows(range(100, 1000), size=100, count=3, seed=1)
    assert len(wins) == 3
    assert wins == sorted(wins)
    for w in wins:
        assert w.size == 100 and (w.start - 100) % 100 == 0  # aligned consecutive slots
        assert w.start >= 100 and w.stop <= 1000
    starts = [w.start for w in wins]
    assert all(b - a >= 100 for a, b in itertools.pairwise(starts))  # no overlap
    assert make_windows(range(100, 1000), 100, 3, seed=1) == wins  # deterministic
    samples = {tuple(w.start for w in make_windows(range(100, 1000), 100, 3, seed=s)) for s in range(10)}
    assert len(samples) > 1  # the seed matters


def test_make_windows_returns_all_when_few_fit() -> None:
    # 950 jobs hold 9 whole windows of 100; the 50-job tail is not used
    wins = make_windows(range(50, 1000), size=100, count=20, seed=0)
    assert [w.start for w in wins] == [50 + 100 * k for k in range(9)]
    assert make_windows(range(5), size=5, count=1) == [Window(0, 5)]


def test_make_windows_overlap() -> None:
    wins = make_windows(range(30), size=10, count=15, seed=3, overlap=True)
    starts = [w.start for w in wins]
    assert len(starts) == 15 and len(set(starts)) == 15 and starts == sorted(starts)
    assert all(0 <= s <= 20 for s in starts)
    # only 21 possible starts exist: asking for more gives all of them
    assert [w.start for w in make_windows(range(30), 10, 100, overlap=True)] == list(range(21))


@pytest.mark.parametrize(
    ("jobs", "size", "count", "match"),
    [
        (range(10, 19), 10, 1, "holds 9 jobs, fewer than one window of 10"),
        (range(0), 1, 1, "fewer than one window"),
        (range(0, 100, 2), 5, 1, "step 1"),
        (range(100), 0, 1, "size"),
        (range(100), 10, 0, "count"),
    ],
)
def test_make_windows_errors(jobs: range, size: int, count: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_windows(jobs, size, count)


def test_split_then_windows() -> None:
    train, test = chronological_split(10_000, 0.9)
    wins = make_windows(test, size=100, count=5, seed=0)
    assert all(w.start >= train.stop and w.stop <= 10_000 for w in wins)
