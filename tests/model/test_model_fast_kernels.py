"""The compiled ranking of ``shared.model.fast`` gives numpy's orders and priorities exactly.

``sample_with_priorities`` must draw the same noise and return the order ``sample_order`` returns
(and ``order_priorities`` of it) for the same generator state; ``greedy_priorities`` must rank like
a stable argsort of the negated scores, ties by slot, on scores with many ties and with NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.model.fast import (
    _stable_argsort,
    base_head,
    greedy_priorities,
    learned_keys,
    order_priorities,
    sample_order,
    sample_with_priorities,
)


def _numpy_greedy(scores: np.ndarray, top_k: int | None) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")
    return order_priorities(order if top_k is None else order[:top_k], len(scores))


@pytest.mark.parametrize("top_k", [None, 1, 3, 16])
@pytest.mark.parametrize("n", [2, 3, 5, 17, 64, 300])
def test_sample_with_priorities_is_sample_order(n: int, top_k: int | None) -> None:
    for seed in range(20):
        scores = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        if seed % 3 == 0:  # saturated, tied scores
            scores = np.round(scores).clip(-1, 1)
        order, prio = sample_with_priorities(scores, top_k, np.random.default_rng(seed + 100))
        want = sample_order(scores, top_k, np.random.default_rng(seed + 100))
        assert order.dtype == np.int64 and np.array_equal(order, want)
        assert np.array_equal(prio, order_priorities(want, n))


@pytest.mark.parametrize("top_k", [None, 1, 4, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_greedy_priorities_rank_like_a_stable_sort(top_k: int | None, dtype: type) -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 40, 257):
        for scores in (
            rng.standard_normal(n),
            rng.integers(0, 3, n).astype(np.float64),  # many ties: slot order decides
            np.where(rng.random(n) < 0.2, np.nan, rng.standard_normal(n)),  # NaN: numpy's path
        ):
            s = scores.astype(dtype)
            assert np.array_equal(greedy_priorities(s, top_k), _numpy_greedy(s, top_k))


def test_ties_at_the_cut_fall_back_to_numpy() -> None:
    """Equal keys among the first top_k + 1: numpy's argpartition decides, as before."""
    scores = np.zeros(10, dtype=np.float32)

    class Zero(np.random.Generator):  # every draw the same: every key equal
        def standard_exponential(self, size: object = None, *args: object, **kwargs: object) -> np.ndarray:
            return np.ones(int(size))  # type: ignore[call-overload]

    gen = Zero(np.random.PCG64(0))
    order, prio = sample_with_priorities(scores, 3, gen)
    want = sample_order(scores, 3, gen)
    assert np.array_equal(order, want) and np.array_equal(prio, order_priorities(want, 10))


@pytest.mark.parametrize("n", [1, 2, 5, 31, 32, 33, 100])
def test_stable_argsort_is_numpys(n: int) -> None:
    rng = np.random.default_rng(n)
    for keys in (rng.standard_normal(n), rng.integers(0, 3, n).astype(np.float64), np.zeros(n)):
        keys[rng.random(n) < 0.1] = -0.0  # -0.0 and 0.0 are equal keys: slot order decides
        assert np.array_equal(_stable_argsort(keys), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("max_queue", [1, 3, 8, 256])
def test_base_head_and_learned_keys_are_the_numpy_expressions(max_queue: int) -> None:
    """The learned policy's slots and keys, as ``LearnedPolicy.keys`` computed them in numpy."""
    rng = np.random.default_rng(max_queue)
    for n in (2, 3, 9, 40, 300):
        idx = rng.permutation(10 * n)[:n].astype(np.int64)
        base_keys = rng.integers(0, 5, n).astype(np.float64)  # ties: slot order decides
        h = min(n, max_queue)
        order, head = np.empty(n, dtype=np.int64), np.empty(h, dtype=np.int64)
        assert base_head(idx, base_keys, order, head)
        want_order = base_keys.argsort(kind="stable")
        assert np.array_equal(order, want_order) and np.array_equal(head, idx[want_order[:h]])
        priorities = rng.permutation(h).astype(np.int64) + 1
        keys = np.empty(n)
        learned_keys(order, priorities, keys)
        want = np.empty(n)
        want[want_order[:h]] = -priorities
        want[want_order[h:]] = np.arange(n - h, dtype=np.float64)
        assert keys.tobytes() == want.tobytes()
    nan_keys = np.array([1.0, np.nan, 0.0])  # numpy sorts NaN last: its own call decides
    assert not base_head(np.arange(3), nan_keys, np.empty(3, dtype=np.int64), np.empty(2, dtype=np.int64))
