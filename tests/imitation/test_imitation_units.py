"""The imitation loss and the agreement measures on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from shared.imitation import incumbent_order, kendall_tau, listwise_nll


def test_incumbent_order_is_slot_order_with_padding() -> None:
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    assert incumbent_order(mask, None).tolist() == [[0, 1, 2, -1], [0, 1, -1, -1]]
    assert incumbent_order(mask, 2).tolist() == [[0, 1], [0, 1]]


def test_listwise_nll_matches_hand_computed_plackett_luce() -> None:
    # scores (1, 0, 2) of three real jobs; incumbent order 0, 1, 2:
    # P = e^1/(e^1+e^0+e^2) * e^0/(e^0+e^2) * 1, per pick over 3 picks (the last is certain)
    scores = torch.tensor([[1.0, 0.0, 2.0]])
    mask = torch.ones((1, 3), dtype=torch.bool)
    e = math.e
    log_p = math.log(e / (e + 1 + e**2)) + math.log(1 / (1 + e**2))
    assert float(listwise_nll(scores, mask, None)) == pytest.approx(-log_p / 3, rel=1e-5)
    # truncated to the first pick: a softmax over the three jobs
    assert float(listwise_nll(scores, mask, 1)) == pytest.approx(-math.log(e / (e + 1 + e**2)), rel=1e-5)


def test_listwise_nll_ignores_padding_and_is_lower_for_the_right_order() -> None:
    mask = torch.tensor([[True, True, False]])
    good = torch.tensor([[5.0, 0.0, 99.0]])  # padded slot's score must not matter
    bad = torch.tensor([[0.0, 5.0, -99.0]])
    assert float(listwise_nll(good, mask, None)) < float(listwise_nll(bad, mask, None))
    # two jobs, scores 5 and 0: -log(e^5 / (e^5 + 1)) over 2 picks
    assert float(listwise_nll(good, mask, None)) == pytest.approx(math.log1p(math.exp(-5)) / 2, rel=1e-5)


def test_kendall_tau_hand_cases() -> None:
    assert kendall_tau(np.array([3, 2, 1])) == 1.0  # the slot order itself
    assert kendall_tau(np.array([1, 2, 3])) == -1.0  # reversed
    # slots 0 and 1 swapped: pairs (0,1) discordant, (0,2) and (1,2) concordant -> (2 - 1) / 3
    assert kendall_tau(np.array([2, 3, 1])) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least 2"):
        kendall_tau(np.array([1]))
