"""From orderings to what the scheduler consumes: integer priorities; and padding of queues.

The production prioritizer and the simulator consume the same thing: an integer priority per
queued job, higher starts first. The simulator's policies sort by a key, smaller first, so the
learned policy's key is ``-priority`` (``shared/policies/base.py``). Priorities are ranks, not raw
scores: exact integers (Slurm's job priority is an integer), distinct within a queue, meaning
nothing beyond the order.

An action may order only the first ``top_k`` jobs. The rest follow in slot order, which is the
order the featurizer laid the queue out in (the base policy's order when it sorts the queue that
way). That tail rule does not depend on the model, so the action's log-probability covers every
choice the model made, and training and production fill the tail the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from shared.model.plackett_luce import greedy_order


def order_to_priorities(order: Tensor, mask: Tensor) -> Tensor:
    """Priorities ``[B, N]`` (int64) of an ordering (``-1`` = no pick): higher starts first.

    With n real jobs the k-th pick gets n - k (the first gets n); the real jobs the ordering does
    not pick come next, in slot order; padded slots get 0.
    """
    batch, slots = mask.shape
    picked = order >= 0
    positions = torch.arange(order.shape[-1], device=order.device).expand_as(order)
    # Scatter each pick's position onto its slot; non-picks go to a spare column that is dropped.
    rank = torch.full((batch, slots + 1), -1, dtype=torch.int64, device=order.device)
    rank.scatter_(-1, torch.where(picked, order, slots), torch.where(picked, positions, -1))
    rank = rank[:, :slots]
    unpicked = mask & (rank < 0)
    tail_rank = picked.sum(dim=-1, keepdim=True) + unpicked.cumsum(dim=-1) - 1
    rank = torch.where(rank >= 0, rank, tail_rank)
    n_real = mask.sum(dim=-1, keepdim=True)
    return torch.where(mask, n_real - rank, torch.zeros_like(rank))


def scores_to_priorities(scores: Tensor, mask: Tensor, top_k: int | None = None) -> Tensor:
    """Deterministic priorities: the greedy order (score descending, ties by slot) of the first
    ``top_k`` jobs, then the rest in slot order (``top_k=None``: the whole queue by score)."""
    return order_to_priorities(greedy_order(scores, mask, top_k), mask)


def pad_queues(
    queues: Sequence[np.ndarray | Tensor], max_queue: int, num_features: int
) -> tuple[Tensor, Tensor]:
    """Stack per-decision ``[n_i, F]`` job features into ``obs [B, max_queue, F]`` and ``mask``.

    A queue longer than ``max_queue`` is an error, not a silent truncation: which jobs the model
    sees is the featurizer's decision (e.g. the first ``max_queue`` by base-policy order).
    """
    obs = torch.zeros((len(queues), max_queue, num_features), dtype=torch.float32)
    mask = torch.zeros((len(queues), max_queue), dtype=torch.bool)
    for row, queue in enumerate(queues):
        jobs = torch.as_tensor(queue, dtype=torch.float32)
        if jobs.dim() != 2 or jobs.shape[1] != num_features:
            raise ValueError(f"queue {row} must be [n, {num_features}], got {tuple(jobs.shape)}")
        if jobs.shape[0] > max_queue:
            raise ValueError(f"queue {row} has {jobs.shape[0]} jobs, more than max_queue={max_queue}")
        obs[row, : jobs.shape[0]] = jobs
        mask[row, : jobs.shape[0]] = True
    return obs, mask
