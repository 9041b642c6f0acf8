"""Integer priorities for the scheduler, and padding of per-decision queues."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared.model import order_to_priorities, pad_queues, scores_to_priorities


def test_priorities_are_ranks_with_ties_by_queue_position() -> None:
    # slots 1 and 3 tie at 2.0: slot 1 (earlier in the queue) ranks first; slot 4 is padding
    scores = torch.tensor([[0.5, 2.0, -1.0, 2.0, 99.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    assert scores_to_priorities(scores, mask).tolist() == [[2, 4, 1, 3, 0]]


def test_truncated_priorities_put_the_rest_in_slot_order() -> None:
    # real slots 0, 1, 2, 4, 5 (slot 3 is padding); best two by score: slot 5 (3.0), then slot 2 (2.5)
    scores = torch.tensor([[0.1, -4.0, 2.5, 50.0, 1.0, 3.0]])
    mask = torch.tensor([[True, True, True, False, True, True]])
    # ranks: 5 -> 5, 2 -> 4, then slots 0, 1, 4 in slot order -> 3, 2, 1
    assert scores_to_priorities(scores, mask, top_k=2).tolist() == [[3, 2, 4, 0, 1, 5]]
    # the whole queue by score: 5, 2, 4, 0, 1
    assert scores_to_priorities(scores, mask).tolist() == [[2, 1, 4, 0, 3, 5]]


def test_order_to_priorities_for_sampled_orders() -> None:
    mask = torch.tensor([[True, True, False, True], [False, False, False, False], [True, True, True, True]])
    order = torch.tensor([[3, -1], [-1, -1], [2, 0]])
    # row 0: slot 3 picked first (3), then slots 0, 1 (2, 1); row 1 empty; row 2: 2, 0, then 1, 3
    assert order_to_priorities(order, mask).tolist() == [[2, 1, 0, 3], [0, 0, 0, 0], [3, 2, 4, 1]]


def test_priorities_reproduce_the_order_under_the_simulator_key_convention() -> None:
    gen = torch.Generator().manual_seed(2)
    scores = torch.randint(0, 4, (50, 20), generator=gen).float()  # many ties
    mask = torch.rand(50, 20, generator=gen) < 0.7
    prio = scores_to_priorities(scores, mask)
    assert (prio[~mask] == 0).all()
    for row in range(50):
        real = np.flatnonzero(mask[row].numpy())
        # policies sort by key ascending, stable over a queue in arrival order: key = -priority
        simulated = real[np.argsort(-prio[row, real].numpy(), kind="stable")]
        # reference: score descending, ties by position, written without the code under test
        row_scores = scores[row].tolist()
        reference = sorted(real.tolist(), key=lambda j: (-row_scores[j], j))
        assert simulated.tolist() == reference
        assert sorted(prio[row, real].tolist()) == list(range(1, len(real) + 1))


def test_pad_queues() -> None:
    queues: list[np.ndarray | torch.Tensor] = [np.ones((3, 4)), np.zeros((0, 4)), torch.full((5, 4), 2.0)]
    obs, mask = pad_queues(queues, max_queue=5, num_features=4)
    assert obs.shape == (3, 5, 4)
    assert mask.sum(dim=1).tolist() == [3, 0, 5]
    assert obs[0, :3].eq(1).all()
    assert obs[0, 3:].eq(0).all()
    assert obs[2].eq(2).all()
    with pytest.raises(ValueError, match="more than max_queue"):
        pad_queues([np.ones((6, 4))], max_queue=5, num_features=4)
    with pytest.raises(ValueError, match=r"must be \[n, 4\]"):
        pad_queues([np.ones((2, 3))], max_queue=5, num_features=4)
