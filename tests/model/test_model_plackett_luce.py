"""The Plackett-Luce action against brute-force enumeration of orderings.

Every expected probability comes from ``pl_reference`` (plain-Python sequential softmax picks),
never from the code under test. Padded slots carry large scores on purpose: if they leaked into a
denominator or a sample, the numbers would be far off.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from pl_reference import all_prefixes, brute_force_order_prob, marginal_by_enumeration

from shared.model.plackett_luce import (
    PlackettLuce,
    check_order,
    first_pick_entropy,
    greedy_order,
    log_prob,
    sample_order,
    sequential_entropy,
)

# 6 slots, 4 real jobs at slots 0, 2, 3, 5; the padded slots hold scores that would dominate.
SCORES = [0.7, 9.0, -1.2, 1.5, 12.0, 0.1]
MASK = [True, False, True, True, False, True]
REAL = [i for i, m in enumerate(MASK) if m]


def batch(
    rows: int, scores: list[float] = SCORES, mask: list[bool] = MASK
) -> tuple[torch.Tensor, torch.Tensor]:
    s = torch.tensor(scores, dtype=torch.float64).expand(rows, -1).contiguous()
    m = torch.tensor(mask).expand(rows, -1).contiguous()
    return s, m


def test_full_orderings_match_enumeration_and_sum_to_one() -> None:
    orders = list(itertools.permutations(REAL))
    assert len(orders) == 24
    s, m = batch(len(orders))
    probs = log_prob(s, m, torch.tensor(orders)).exp()
    expected = torch.tensor([brute_force_order_prob(SCORES, o, REAL) for o in orders], dtype=torch.float64)
    torch.testing.assert_close(probs, expected, rtol=1e-10, atol=1e-12)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_top2_prefix_equals_marginal_over_completions() -> None:
    prefixes = all_prefixes(REAL, 2)
    assert len(prefixes) == 12
    s, m = batch(len(prefixes))
    probs = log_prob(s, m, torch.tensor(prefixes)).exp()
    expected = torch.tensor([marginal_by_enumeration(SCORES, p, REAL) for p in prefixes], dtype=torch.float64)
    torch.testing.assert_close(probs, expected, rtol=1e-10, atol=1e-12)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_top_k_truncates_a_longer_ordering() -> None:
    orders = list(itertools.permutations(REAL))
    s, m = batch(len(orders))
    probs = log_prob(s, m, torch.tensor(orders), top_k=2).exp()
    expected = torch.tensor(
        [marginal_by_enumeration(SCORES, o[:2], REAL) for o in orders], dtype=torch.float64
    )
    torch.testing.assert_close(probs, expected, rtol=1e-10, atol=1e-12)


def test_top_k_beyond_the_queue_is_the_full_ordering() -> None:
    order = (3, 0, 5, 2)
    s, m = batch(1)
    # 6 positions for 4 real jobs: the two trailing positions are ignored, whatever they hold.
    padded_order = torch.tensor([[*order, -1, -1]])
    got = log_prob(s, m, padded_order, top_k=10).exp().item()
    assert got == pytest.approx(brute_force_order_prob(SCORES, order, REAL), rel=1e-10)
    garbage_tail = torch.tensor([[*order, 1, 4]])
    assert log_prob(s, m, garbage_tail).exp().item() == pytest.approx(got, rel=1e-12)


def test_log_prob_is_shift_invariant_and_stable_for_large_scores() -> None:
    # real slots 0, 2, 3, 5 with scores 300, -250, 40, 1000: gaps of hundreds of nats
    s, m = batch(1, [300.0, 0.0, -250.0, 40.0, 0.0, 1000.0])
    s = s.float()
    best_first = torch.tensor([[5, 0, 3, 2]])
    # each pick beats the rest by >= 260 nats, so every term is -log(1 + e^-260...) = 0 in float32
    assert log_prob(s, m, best_first).item() == pytest.approx(0.0, abs=1e-4)
    # picking -250 second among {-250, 300, 40} costs -250 - 300 = -550; the other picks cost 0
    worse = torch.tensor([[5, 2, 0, 3]])
    assert log_prob(s, m, worse).item() == pytest.approx(-550.0, abs=1e-3)
    shifted = log_prob(s + 5000.0, m, worse)
    assert torch.isfinite(shifted).all()
    assert shifted.item() == pytest.approx(-550.0, abs=1e-2)


def test_first_pick_gradient_is_onehot_minus_softmax() -> None:
    s, m = batch(1)
    s.requires_grad_(True)
    log_prob(s, m, torch.tensor([[3]]), top_k=1).sum().backward()
    assert s.grad is not None
    total = sum(math.exp(SCORES[j]) for j in REAL)
    expected = [(1.0 if j == 3 else 0.0) - math.exp(SCORES[j]) / total if MASK[j] else 0.0 for j in range(6)]
    torch.testing.assert_close(s.grad[0], torch.tensor(expected, dtype=torch.float64))


def test_gumbel_samples_follow_plackett_luce_frequencies() -> None:
    scores = [0.3, 5.0, 1.1, -0.4, 7.0]
    mask = [True, False, True, True, False]
    real = [0, 2, 3]
    n = 60_000
    s, m = batch(n, scores, mask)
    orders = sample_order(s, m, generator=torch.Generator().manual_seed(1234))
    assert (orders[:, 3:] == -1).all()
    counts: dict[tuple[int, ...], int] = {}
    for row in orders[:, :3].tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    assert set(counts) <= set(itertools.permutations(real))
    for perm in itertools.permutations(real):
        p = brute_force_order_prob(scores, perm, real)
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(counts.get(perm, 0) / n - p) < 4.5 * sigma, perm


def test_truncated_samples_follow_the_marginals() -> None:
    n = 40_000
    s, m = batch(n)
    orders = sample_order(s, m, top_k=2, generator=torch.Generator().manual_seed(99))
    assert orders.shape == (n, 2)
    for prefix in all_prefixes(REAL, 2):
        p = marginal_by_enumeration(SCORES, prefix, REAL)
        freq = (orders == torch.tensor(prefix)).all(dim=1).double().mean().item()
        assert abs(freq - p) < 4.5 * math.sqrt(p * (1 - p) / n) + 1e-9, prefix


def test_samples_are_valid_orders_on_random_masks() -> None:
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(200, 12, generator=gen) * 3
    mask = torch.rand(200, 12, generator=gen) < torch.rand(200, 1, generator=gen)
    mask[0] = False  # an empty queue
    mask[1] = False
    mask[1, 5] = True  # a single job
    for top_k in (None, 1, 4, 20):
        order = sample_order(scores, mask, top_k=top_k, generator=gen)
        check_order(order, mask)
        n_real = mask.sum(dim=1)
        width = order.shape[1]
        positions = torch.arange(width)
        assert ((order >= 0) == (positions < n_real[:, None])).all()
        picked = order.clamp_min(0)
        assert mask.gather(1, picked)[order >= 0].all()
    assert (sample_order(scores, mask)[0] == -1).all()
    assert sample_order(scores, mask)[1, 0].item() == 5


def test_greedy_order_is_score_descending_with_ties_by_slot() -> None:
    s = torch.tensor([[1.0, 3.0, 3.0, 50.0, 3.0, -2.0]])
    m = torch.tensor([[True, True, True, False, True, True]])
    assert greedy_order(s, m).tolist() == [[1, 2, 4, 0, 5, -1]]
    assert greedy_order(s, m, top_k=2).tolist() == [[1, 2]]
    assert PlackettLuce(s, m, top_k=3).mode().tolist() == [[1, 2, 4]]


def test_first_pick_entropy_matches_definition() -> None:
    s, m = batch(1)
    total = sum(math.exp(SCORES[j]) for j in REAL)
    probs = [math.exp(SCORES[j]) / total for j in REAL]
    expected = -sum(p * math.log(p) for p in probs)
    assert first_pick_entropy(s, m).item() == pytest.approx(expected, rel=1e-10)
    uniform = first_pick_entropy(torch.zeros(1, 6), m).item()
    assert uniform == pytest.approx(math.log(4), rel=1e-6)


@pytest.mark.parametrize("length", [4, 2, 1])
def test_sequential_entropy_is_unbiased_for_the_ordering_entropy(length: int) -> None:
    prefixes = all_prefixes(REAL, length)
    probs = [marginal_by_enumeration(SCORES, p, REAL) for p in prefixes]
    exact = -sum(p * math.log(p) for p in probs)
    s, m = batch(len(prefixes))
    estimates = sequential_entropy(s, m, torch.tensor(prefixes))
    expectation = sum(p * e for p, e in zip(probs, estimates.tolist(), strict=True))
    assert expectation == pytest.approx(exact, rel=1e-9)
    if length == 1:
        torch.testing.assert_close(estimates, first_pick_entropy(s, m))


def test_sequential_entropy_stays_finite_and_nonnegative_for_spread_scores() -> None:
    s = torch.tensor([[80.0, -60.0, 0.0, 25.0]])
    m = torch.ones(1, 4, dtype=torch.bool)
    h = sequential_entropy(s, m, torch.tensor([[1, 2, 0, 3]]))
    assert torch.isfinite(h).all()
    assert h.item() >= 0.0


def test_empty_queue_rows_are_zero_and_finite() -> None:
    s = torch.randn(2, 5, requires_grad=True)
    m = torch.zeros(2, 5, dtype=torch.bool)
    m[1, :2] = True
    order = sample_order(s, m, generator=torch.Generator().manual_seed(0))
    assert (order[0] == -1).all()
    lp = log_prob(s, m, order)
    ent = first_pick_entropy(s, m) + sequential_entropy(s, m, order)
    assert lp[0].item() == 0.0
    assert ent[0].item() == 0.0
    (lp.sum() + ent.sum()).backward()
    assert s.grad is not None
    assert torch.isfinite(s.grad).all()
    assert (s.grad[0] == 0).all()
    assert (s.grad[1, 2:] == 0).all()


def test_single_job_has_probability_one() -> None:
    s = torch.tensor([[4.0, -3.0, 8.0]])
    m = torch.tensor([[False, True, False]])
    assert log_prob(s, m, torch.tensor([[1, -1, -1]])).item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ([[0, 0, 3, 5]], "twice"),
        ([[0, 1, 3, 5]], "padded"),
        ([[0, 2, -1, 5]], "-1"),
        ([[0, 2, 3, 6]], "outside"),
    ],
)
def test_check_order_rejects_invalid_orderings(order: list[list[int]], message: str) -> None:
    _, m = batch(1)
    with pytest.raises(ValueError, match=message):
        check_order(torch.tensor(order), m)


def test_distribution_rejects_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="shape"):
        PlackettLuce(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        PlackettLuce(torch.zeros(2, 3), torch.ones(2, 3))
