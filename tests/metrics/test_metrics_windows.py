"""Evaluation windows and the chronological train/test split."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shared.domain.exclusions import Exclusion
from shared.domain.jobs import build_table
from shared.metrics import PolicyComparison, Window, chronological_split, excluded_in_window, make_windows
from shared.scheduling.binding import bind_jobs
from shared.sim.config import SimConfig
from shared.sim.evaluate import PreparedWorkload, arrival_scaling, evaluate_policies, rescale_arrivals
from tests.sim.sim_helpers import one_group_spec


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


# --- jobs left out, per window -------------------------------------------------------------------


def test_excluded_in_window_owns_the_gap_up_to_the_next_window() -> None:
    # kept jobs at 0, 10, 20, 30, 40, 50; left-out jobs at -5, 0, 15, 30, 55 and one with no time
    submit = np.array([0.0, 10.0, 20.0, 30.0, 40.0, 50.0])
    timed = Exclusion("no runtime", 5, ["a"], (55.0, -5.0, 0.0, 15.0, 30.0))
    untimed = Exclusion("no outcome yet", 1, ["z"])
    assert timed.submit_s == (-5.0, 0.0, 15.0, 30.0, 55.0)  # kept sorted
    counts = [excluded_in_window([timed, untimed], submit, Window(k, 2)) for k in (0, 2, 4)]
    # [-inf, 20): -5, 0, 15;  [20, 40): 30;  [40, inf): 55  -> every timed one exactly once
    assert counts == [3, 1, 1] and sum(counts) == timed.count
    # windows that skip jobs skip their gaps' exclusions too: [10, 20) holds only 15
    assert excluded_in_window([timed], submit, Window(1, 1)) == 1
    with pytest.raises(ValueError, match="3 submit times for 2"):
        Exclusion("bad", 2, [], (1.0, 2.0, 3.0))


def test_rescaled_exclusions_keep_their_place_among_the_kept_jobs() -> None:
    table = build_table(ids=["a", "b", "c"], submit=[0.0, 100.0, 200.0], runtime=[50.0] * 3, gpus=[1] * 3)
    left_out = Exclusion("never scheduled", 2, ["x", "y"], (50.0, 150.0))
    # in-span: a and b run their 50 s before the last arrival, c none: 100 GPU-s over 1 GPU x 200 f s
    # = 0.25 -> gaps x 2
    origin, factor = arrival_scaling(table, 1, 0.25)
    assert (origin, factor) == (0.0, pytest.approx(2.0))
    moved = left_out.rescaled(origin, factor)
    np.testing.assert_allclose(moved.submit_s, [100.0, 300.0])
    np.testing.assert_allclose(rescale_arrivals(table, 1, 0.25).submit, [0.0, 200.0, 400.0])


def test_evaluate_counts_each_windows_own_excluded_jobs() -> None:
    """17 jobs left out of a trace used to show as 17 x the number of windows: each window now
    counts its own, and the windows' sum is the number of left-out jobs they cover."""
    spec = one_group_spec(2, 4)  # 8 GPUs
    n = 40
    gpus = [16 if k % 5 == 0 else 1 for k in range(n)]  # 8 jobs fit no node group: binding drops them
    table = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=[10.0 * k for k in range(n)],
        runtime=[30.0] * n,
        estimate=[30.0] * n,
        gpus=gpus,
    )
    bound = bind_jobs(table, spec)
    assert bound.excluded_count == 8 and len(bound.jobs) == 32
    # 9 more left out at load time, between the kept jobs (at 5, 45, 85, ... s)
    at_load = Exclusion("never scheduled", 9, ["p"], tuple(5.0 + 40.0 * k for k in range(9)))
    work = PreparedWorkload("t", bound, [at_load, *bound.exclusions])
    assert work.excluded_count == 17
    windows = [Window(8 * k, 8) for k in range(4)]  # the 32 kept jobs, four windows
    metrics, _ = evaluate_policies(work, ["fcfs"], SimConfig(), windows)
    per_window = [m.excluded for m in metrics["fcfs"]]
    assert sum(per_window) == 17 and per_window == [work.excluded_in(w) for w in windows]
    totals = PolicyComparison(metrics)._totals("fcfs")
    assert totals["excluded"] == 17  # was 17 x 4 = 68
    # warmed-up windows count the same
    warm, _ = evaluate_policies(work, ["fcfs"], SimConfig(), windows[1:3], warmup=4)
    assert [m.excluded for m in warm["fcfs"]] == per_window[1:3]
