"""A Plackett-Luce distribution over orderings of a padded, masked queue.

The scheduler starts jobs in priority order, so the policy's action is an *ordering* of the queue.
Plackett-Luce is the distribution of picking jobs one after another without replacement, each pick
a softmax over the scores of the jobs not picked yet:

    log p(o_1, ..., o_m) = sum_k [ s_{o_k} - logsumexp_{j real, not in o_1..o_{k-1}} s_j ]

Everything here is batched: ``scores`` and ``mask`` are ``[B, N]`` (``mask`` True for real jobs),
an ordering is ``[B, K]`` slot indices, best first. A row with ``n`` real jobs has ``min(K, n)``
meaningful positions; later positions hold ``-1`` and are ignored. Padded slots never receive
probability, never appear in a sample, and their scores never matter.

Truncation to the first ``top_k`` picks makes the action the *top* of the order. The probability of
a top-k prefix is the marginal over all completions, which is exactly the formula above stopped at
``k``: the remaining jobs still sit in every denominator.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "PlackettLuce",
    "check_order",
    "first_pick_entropy",
    "greedy_order",
    "log_prob",
    "order_width",
    "sample_order",
    "sequential_entropy",
    "valid_positions",
]


def _neg(dtype: torch.dtype) -> float:
    """A finite stand-in for -inf: exp() of it is 0, but sums and gradients stay finite (no NaN)."""
    return torch.finfo(dtype).min / 4


def order_width(num_slots: int, top_k: int | None) -> int:
    """Number of positions an ordering of ``num_slots`` slots has when truncated to ``top_k``."""
    return num_slots if top_k is None else min(top_k, num_slots)


def valid_positions(mask: Tensor, width: int) -> Tensor:
    """``[B, width]`` bool: position k of an ordering is meaningful iff k < number of real jobs."""
    n_real = mask.sum(dim=-1, keepdim=True)
    return torch.arange(width, device=mask.device) < n_real


def _finish(order: Tensor, mask: Tensor) -> Tensor:
    """Replace positions beyond each row's real jobs by -1."""
    return torch.where(valid_positions(mask, order.shape[-1]), order, torch.full_like(order, -1))


def sample_order(
    scores: Tensor, mask: Tensor, top_k: int | None = None, generator: torch.Generator | None = None
) -> Tensor:
    """Exact Plackett-Luce sample of the first ``top_k`` picks, ``[B, K]`` slot indices.

    Gumbel-top-k: sorting ``scores + Gumbel(0, 1)`` noise gives an ordering distributed exactly as
    the sequential picks (the Gumbel-max trick applied to each remaining set), in one sort instead
    of K softmax draws. The noise is ``-log(E)`` with ``E ~ Exp(1)``.
    """
    width = order_width(scores.shape[-1], top_k)
    exp_noise = torch.empty_like(scores, dtype=torch.float64).exponential_(generator=generator)
    gumbel = -torch.log(exp_noise.clamp_min(torch.finfo(torch.float64).tiny))
    keys = (scores.detach().to(torch.float64) + gumbel).masked_fill(~mask, float("-inf"))
    order = torch.topk(keys, width, dim=-1, sorted=True).indices
    return _finish(order, mask)


def greedy_order(scores: Tensor, mask: Tensor, top_k: int | None = None) -> Tensor:
    """Deterministic ordering for evaluation and production: score descending, ties by slot index.

    Ties go to the lower slot, i.e. queue position, which is arrival order when the featurizer keeps
    the queue in arrival order, like every base policy's tie-break.
    """
    width = order_width(scores.shape[-1], top_k)
    keys = (-scores.detach()).masked_fill(~mask, float("inf"))
    order = torch.sort(keys, dim=-1, stable=True).indices[..., :width]
    return _finish(order, mask)


def _unpicked_real(mask: Tensor, order: Tensor, valid: Tensor) -> Tensor:
    """Real jobs that the (truncated) ordering does not pick, ``[B, N]`` bool."""
    counts = torch.zeros(mask.shape, dtype=torch.int32, device=mask.device)
    counts.scatter_add_(-1, order.clamp_min(0), valid.to(torch.int32))
    return mask & (counts == 0)


def _suffix_logsumexp(values: Tensor, valid: Tensor, rest: Tensor, rest_mask: Tensor) -> Tensor:
    """``logsumexp`` over ``values[k:]`` (valid positions) plus ``rest`` (masked), for every k.

    A reverse cumulative sum in log space: the denominator at pick k covers the picks k..K and every
    real job the truncated ordering leaves unpicked.
    """
    neg = _neg(values.dtype)
    tail = torch.logcumsumexp(values.masked_fill(~valid, neg).flip(-1), dim=-1).flip(-1)
    unpicked = rest.masked_fill(~rest_mask, neg).logsumexp(dim=-1, keepdim=True)
    return torch.logaddexp(tail, unpicked)


def _truncate(order: Tensor, top_k: int | None) -> Tensor:
    return order if top_k is None else order[..., :top_k]


def log_prob(scores: Tensor, mask: Tensor, order: Tensor, top_k: int | None = None) -> Tensor:
    """Log-probability ``[B]`` of each row's ordering (or top-k prefix of it).

    The ordering must list distinct real slots in its meaningful positions (``check_order``);
    this function does not verify it, to stay cheap inside the PPO update.
    """
    order = _truncate(order, top_k)
    valid = valid_positions(mask, order.shape[-1])
    picked_scores = scores.gather(-1, order.clamp_min(0))
    unpicked = _unpicked_real(mask, order, valid)
    denominators = _suffix_logsumexp(picked_scores, valid, scores, unpicked)
    terms = torch.where(valid, picked_scores - denominators, torch.zeros_like(picked_scores))
    return terms.sum(dim=-1)


def first_pick_entropy(scores: Tensor, mask: Tensor) -> Tensor:
    """Exact entropy ``[B]`` of the first pick: a softmax over the real jobs (0 for an empty queue)."""
    logp = torch.log_softmax(scores.masked_fill(~mask, _neg(scores.dtype)), dim=-1)
    return -torch.where(mask, logp.exp() * logp, torch.zeros_like(logp)).sum(dim=-1)


def sequential_entropy(scores: Tensor, mask: Tensor, order: Tensor, top_k: int | None = None) -> Tensor:
    """Sum of the entropies of each pick's softmax given the picks before it along ``order``, ``[B]``.

    By the chain rule, its expectation over ``order ~ PL`` is the exact entropy of the (top-k)
    ordering, so along sampled orders it is an unbiased estimate of it; along any order its
    gradient pushes every pick's distribution towards uniform. Computed in O(N + K) per row with
    H_k = lse_k - E_k[s], where E_k[s] = c + exp(L_k - lse_k) and L_k is the log-sum-exp of
    ``s + log(s - c)`` over the remaining jobs, c = min real score - 1 (so the log is defined).
    """
    order = _truncate(order, top_k)
    valid = valid_positions(mask, order.shape[-1])
    shift = scores.detach().masked_fill(~mask, float("inf")).amin(dim=-1, keepdim=True) - 1.0
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    weighted = scores + torch.log(torch.where(mask, scores - shift, torch.ones_like(scores)))

    unpicked = _unpicked_real(mask, order, valid)
    idx = order.clamp_min(0)
    lse = _suffix_logsumexp(scores.gather(-1, idx), valid, scores, unpicked)
    lse_weighted = _suffix_logsumexp(weighted.gather(-1, idx), valid, weighted, unpicked)
    mean_score = shift + torch.exp(lse_weighted - lse)
    per_pick = torch.where(valid, lse - mean_score, torch.zeros_like(lse)).clamp_min(0.0)
    return per_pick.sum(dim=-1)


def check_order(order: Tensor, mask: Tensor) -> None:
    """Raise ``ValueError`` unless every row lists distinct real slots in its meaningful positions."""
    valid = valid_positions(mask, order.shape[-1])
    if ((order < -1) | (order >= mask.shape[-1])).any():
        raise ValueError(f"ordering has slot indices outside [-1, {mask.shape[-1]})")
    if (valid & (order < 0)).any():
        raise ValueError("ordering has -1 at a position before the row's last real job")
    if (valid & ~mask.gather(-1, order.clamp_min(0))).any():
        raise ValueError("ordering picks a padded slot")
    counts = torch.zeros(mask.shape, dtype=torch.int32, device=mask.device)
    counts.scatter_add_(-1, order.clamp_min(0), valid.to(torch.int32))
    if (counts > 1).any():
        raise ValueError("ordering picks the same slot twice")


class PlackettLuce:
    """The action distribution, with the Categorical-like interface a CleanRL-style loop expects.

    ``top_k`` truncates samples, greedy orders and log-probabilities to the first picks; ``entropy``
    is either the exact first-pick entropy or the sequential estimate along a given order.
    """

    def __init__(self, scores: Tensor, mask: Tensor, top_k: int | None = None) -> None:
        if scores.shape != mask.shape:
            raise ValueError(f"scores {tuple(scores.shape)} and mask {tuple(mask.shape)} differ in shape")
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool, got {mask.dtype}")
        self.scores = scores
        self.mask = mask
        self.top_k = top_k

    def sample(self, generator: torch.Generator | None = None) -> Tensor:
        return sample_order(self.scores, self.mask, self.top_k, generator)

    def mode(self) -> Tensor:
        return greedy_order(self.scores, self.mask, self.top_k)

    def log_prob(self, order: Tensor) -> Tensor:
        return log_prob(self.scores, self.mask, order, self.top_k)

    def entropy(self, order: Tensor | None = None) -> Tensor:
        """Sequential estimate along ``order`` if one is given, else the exact first-pick entropy."""
        if order is None:
            return first_pick_entropy(self.scores, self.mask)
        return sequential_entropy(self.scores, self.mask, order, self.top_k)
