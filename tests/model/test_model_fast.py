"""The single-decision path (``shared.model.fast``) against the batch path and by hand.

Scores must be the same floats as ``ActorCritic.scores`` (tied scores of saturated units would
otherwise break differently and change priorities), priorities the same integers as
``scores_to_priorities``/``order_to_priorities``, and the numpy Gumbel-top-k sample a
Plackett-Luce sample.
"""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pytest
import torch

from shared.model import ActorCritic, ModelConfig, order_to_priorities, scores_to_priorities
from shared.model.fast import (
    _ACTIVATION_CODES,
    _ACTIVATIONS,
    _VML_MODE,
    FastActor,
    _activate,
    direct_activation,
    direct_blas,
    greedy_priorities,
    gumbel_log,
    learned_keys,
    order_priorities,
    rank_sampled,
    sample_order,
    sample_with_priorities,
)


def _model(activation: str, seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    model = ActorCritic(ModelConfig(activation=activation))  # type: ignore[arg-type]
    with torch.no_grad():  # larger weights: saturated units, hence tied scores, occur
        model.actor[0].weight.mul_(6.0)
        model.actor[-1].weight.mul_(100.0)
    return model.eval()


def _actor(model: ActorCritic, path: str) -> FastActor:
    """The actor on its fused path (``_forward``: the direct BLAS calls and ``_activate``, one
    compiled call), its direct BLAS path (torch's ``sgemm_`` called from ``_dense``, torch's
    activations) or torch's."""
    actor = FastActor(model)
    if path == "fused":
        if not actor.fused:
            pytest.skip("torch exports no sgemm_ or VMSTANH_ giving its floats here")
        return actor
    actor.fused = False
    if path == "direct":
        if not direct_blas():
            pytest.skip("torch exports no sgemm_ giving addmm's floats here")
        assert actor._direct is not None
    else:
        actor._direct = None
    return actor


@pytest.mark.parametrize("path", ["fused", "direct", "torch"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_fast_scores_are_the_modules_floats(activation: str, path: str) -> None:
    model = _model(activation, seed=1)
    actor = _actor(model, path)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 8, 31, 64, 257, 1024, 2100, 5, 1):  # past the kept buffers, then back
        obs = rng.random((n, 8)).astype(np.float32)
        obs[rng.random((n, 8)) < 0.3] = 0.0  # features at 0 or 1 are common
        obs[rng.random((n, 8)) < 0.2] = 1.0
        for x in (obs, np.asfortranarray(obs)):  # the layout of the caller's array does not matter
            with torch.no_grad():
                expected = model.scores(torch.from_numpy(obs)[None], torch.ones(1, n, dtype=torch.bool))[0]
            assert np.array_equal(actor.scores(x), expected.numpy())


@pytest.mark.parametrize("path", ["fused", "direct", "torch"])
def test_fast_actor_sees_weights_loaded_in_place(path: str) -> None:
    model = _model("tanh", seed=1)
    actor = _actor(model, path)
    obs = np.random.default_rng(1).random((5, 8)).astype(np.float32)
    before = actor.scores(obs).copy()
    model.load_state_dict(_model("tanh", seed=2).state_dict())
    after = actor.scores(obs)
    assert not np.array_equal(before, after)
    with torch.no_grad():
        expected = model.scores(torch.from_numpy(obs)[None], torch.ones(1, 5, dtype=torch.bool))[0]
    assert np.array_equal(after, expected.numpy())


def test_fast_actor_rejects_a_wrong_width() -> None:
    with pytest.raises(ValueError, match=r"obs must be \[n, 8\]"):
        FastActor(_model("tanh", 0)).scores(np.zeros((3, 5), dtype=np.float32))


def test_greedy_priorities_by_hand() -> None:
    # slots 1 and 3 tie at 2.0: slot 1 first; top 2 are slots 1 and 3, then 0, 2, 4 in slot order
    scores = np.array([0.5, 2.0, -1.0, 2.0, 1.0], dtype=np.float32)
    assert greedy_priorities(scores, None).tolist() == [2, 5, 1, 4, 3]
    assert greedy_priorities(scores, 2).tolist() == [3, 5, 2, 4, 1]


@pytest.mark.parametrize("top_k", [None, 1, 3, 32])
def test_greedy_priorities_equal_the_batch_path(top_k: int | None) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 40, 300):
        scores = rng.integers(0, 4, n).astype(np.float32)  # many ties
        expected = scores_to_priorities(
            torch.from_numpy(scores)[None], torch.ones(1, n, dtype=torch.bool), top_k
        )
        assert greedy_priorities(scores, top_k).tolist() == expected[0].tolist()


def test_order_priorities_equal_the_batch_path() -> None:
    rng = np.random.default_rng(4)
    for n in (1, 2, 6, 50):
        for k in {1, min(3, n), n}:
            order = rng.permutation(n)[:k]
            expected = order_to_priorities(torch.from_numpy(order)[None], torch.ones(1, n, dtype=torch.bool))
            assert order_priorities(order, n).tolist() == expected[0].tolist()


def test_sample_order_is_a_valid_reproducible_truncated_ordering() -> None:
    scores = np.random.default_rng(5).normal(size=100).astype(np.float32)
    for top_k in (None, 1, 10, 100, 500):
        a = sample_order(scores, top_k, np.random.default_rng(9))
        b = sample_order(scores, top_k, np.random.default_rng(9))
        assert a.tolist() == b.tolist()
        assert len(a) == (100 if top_k is None else min(top_k, 100))
        assert len(set(a.tolist())) == len(a) and a.min() >= 0 and a.max() < 100


def test_sample_order_follows_plackett_luce() -> None:
    """Frequencies of the 6 orderings of 3 jobs against the Plackett-Luce probabilities (by hand:
    p(a, b, c) = e^{s_a} / (e^{s_a} + e^{s_b} + e^{s_c}) * e^{s_b} / (e^{s_b} + e^{s_c}))."""
    s = np.array([1.0, 0.0, -0.5], dtype=np.float32)
    w = np.exp(s.astype(np.float64))
    rng = np.random.default_rng(11)
    n = 30_000
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        o = tuple(sample_order(s, None, rng).tolist())
        counts[o] = counts.get(o, 0) + 1
    for a, b, c in permutations(range(3)):
        p = w[a] / (w[a] + w[b] + w[c]) * w[b] / (w[b] + w[c])
        freq = counts.get((a, b, c), 0) / n
        assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n), ((a, b, c), freq, p)
    # truncated to one pick: a softmax over the jobs
    firsts = np.bincount([int(sample_order(s, 1, rng)[0]) for _ in range(n)], minlength=3) / n
    assert np.allclose(firsts, w / w.sum(), atol=5 * math.sqrt(0.25 / n))


def test_direct_path_on_other_layer_shapes() -> None:
    """Wider, deeper actors (their shapes checked by ``direct_blas`` on first use) give the
    module's floats too, on either path."""
    torch.manual_seed(3)
    model = ActorCritic(ModelConfig(actor_hidden=(64, 48, 8))).eval()
    obs = np.random.default_rng(3).random((23, 8)).astype(np.float32)
    with torch.no_grad():
        expected = model.scores(torch.from_numpy(obs)[None], torch.ones(1, 23, dtype=torch.bool))[0]
    for path in ("fused", "direct", "torch"):
        actor = FastActor(model)
        if path != "fused":
            actor.fused = False
        if path == "torch":
            actor._direct = None
        assert np.array_equal(actor.scores(obs), expected.numpy())


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_activation_is_torchs_in_place_one(activation: str) -> None:
    """``_activate`` against ``torch.tanh_``/``torch.relu_``, on other values than
    ``direct_activation``'s check: wide ranges, -0.0, infinities, NaN, subnormals."""
    if not direct_activation(activation):
        pytest.skip("torch's activation takes another path here")
    rng = np.random.default_rng(8)
    count, mode = np.zeros(1, dtype=np.int32), np.array([_VML_MODE], dtype=np.int64)
    for n in (1, 7, 8, 9, 33, 500):
        x = (rng.standard_normal((n, 16)) * rng.choice([1e-3, 1.0, 10.0, 1e4], (n, 16))).astype(np.float32)
        x.flat[:6] = np.array([-0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40], dtype=np.float32)[: x.size]
        want = _ACTIVATIONS[activation](torch.from_numpy(x.copy())).numpy()
        got = x.copy()
        _activate(got, _ACTIVATION_CODES[activation], count, mode)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("path", ["fused", "direct"])
@pytest.mark.parametrize("top_k", [None, 1, 4, 16])
def test_sample_is_sample_with_priorities_and_writes_the_keys(path: str, top_k: int | None) -> None:
    """``FastActor.sample`` from ``gumbel_log``'s draws: ``sample_with_priorities`` of the
    module's scores with the same generator state, and (fused path) ``learned_keys`` of its
    priorities; ties at the cut (saturated scores, equal draws) go to numpy's ranking."""
    model = _model("tanh", seed=4)
    actor = _actor(model, path)
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 5, 17, 64, 300):
        obs = rng.random((n, 8)).astype(np.float32)
        with torch.no_grad():
            scores = model.scores(torch.from_numpy(obs)[None], torch.ones(1, n, dtype=torch.bool))[0].numpy()
        for seed in range(3):
            want_order, want_prio = sample_with_priorities(scores, top_k, np.random.default_rng(seed))
            log_e = gumbel_log(np.random.default_rng(seed), n)
            base_order = rng.permutation(n + 4).astype(np.int64)
            keys = np.full(n + 4, np.nan)
            order, prio, written = actor.sample(obs, log_e, top_k, base_order, keys)
            assert np.array_equal(order, want_order) and np.array_equal(prio, want_prio)
            assert written == (path == "fused")
            if written:
                want_keys = np.empty(n + 4)
                learned_keys(base_order, want_prio, want_keys)
                assert keys.tobytes() == want_keys.tobytes()
    tied = np.zeros(10, dtype=np.float64)  # equal draws on equal scores: every key ties
    zeros = np.zeros((10, 8), dtype=np.float32)
    order, prio, written = actor.sample(zeros, tied, 3, np.arange(10), np.empty(10))
    want_order, want_prio = rank_sampled(actor.scores(zeros), tied, 3)  # numpy's partial sort
    assert not written and np.array_equal(order, want_order) and np.array_equal(prio, want_prio)
