"""The imitation loss: Plackett-Luce negative log-likelihood of the incumbent's order.

PPO's action is a Plackett-Luce ordering of the queue truncated to the first ``top_k`` picks
(``shared.model.plackett_luce``). Maximizing the log-probability of the incumbent's order under that
same distribution (a listwise, ListMLE-style objective) fits exactly the quantity PPO later moves:
after imitation, the sampled orders PPO starts from are concentrated around the incumbent's order,
and the greedy order (score descending) reproduces it when the likelihood is high. A pairwise or
pointwise loss would fit the scores but not the distribution PPO samples from.

The loss is divided by the number of picks of each row, so long and short queues weigh alike per
pick, and averaged over the rows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shared.model.plackett_luce import log_prob, order_width, valid_positions

__all__ = ["incumbent_order", "listwise_nll"]


def incumbent_order(mask: Tensor, top_k: int | None) -> Tensor:
    """``[B, K]`` the slot order ``0, 1, ...`` (the base policy's order), ``-1`` past each row's jobs.

    Real jobs fill each row's first slots (``pad_queues``), so slot k is the base policy's k-th job.
    """
    width = order_width(mask.shape[-1], top_k)
    order = torch.arange(width, dtype=torch.int64).expand(mask.shape[0], width)
    return torch.where(valid_positions(mask, width), order, torch.full_like(order, -1))


def listwise_nll(scores: Tensor, mask: Tensor, top_k: int | None) -> Tensor:
    """Mean over rows of ``-log P(incumbent order) / picks`` under Plackett-Luce(``scores``)."""
    order = incumbent_order(mask, top_k)
    picks = valid_positions(mask, order.shape[-1]).sum(dim=-1).clamp_min(1).to(scores.dtype)
    return (-log_prob(scores, mask, order, top_k) / picks).mean()
