"""The compiled ranking of ``shared.model.fast`` gives numpy's orders and priorities exactly.

``sample_with_priorities`` must draw the same noise and return the order ``sample_order`` returns
(and ``order_priorities`` of it) for the same generator state; ``greedy_priorities`` must rank like
a stable argsort of the negated scores, ties by slot, on scores with many ties and with NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.model.fast import greedy_priorities, order_priorities, sample_order, sample_with_priorities


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
