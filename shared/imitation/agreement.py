"""How closely a model's greedy order agrees with the incumbent's, on held-out demonstrations.

The order compared is the one production applies: ``ActorCritic.priorities`` (greedy top-``top_k``
by score, then the rest in slot order), and the incumbent's order is the slot order. Two numbers per
queue, averaged over queues:

- **Kendall tau** (tau-a) between the model's priority ranks and the slot order: +1 when identical,
  -1 when reversed, about 0 for an order unrelated to the incumbent's (an untrained model, whose
  scores are near-random functions of the features);
- **top-1**: the model's first job is the incumbent's first job (what starts first matters most).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shared.imitation.demonstrations import Demonstration
from shared.model import ActorCritic


def kendall_tau(priorities: np.ndarray) -> float:
    """Kendall tau-a between ``priorities`` (higher first, distinct) and the slot order 0, 1, ...

    A pair of slots i < j is concordant when the model also puts i first (``p_i > p_j``).
    """
    p = np.asarray(priorities, dtype=np.float64)
    n = len(p)
    if n < 2:
        raise ValueError(f"Kendall tau needs at least 2 jobs, got {n}")
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    diff = p[:, None] - p[None, :]  # i before j in the model's order iff p_i > p_j
    concordant = int(np.sum((diff > 0) & upper))
    discordant = int(np.sum((diff < 0) & upper))
    return (concordant - discordant) / (n * (n - 1) / 2)


@dataclass(frozen=True)
class Agreement:
    """Mean Kendall tau and top-1 agreement over ``queues`` decisions."""

    kendall_tau: float
    top1: float
    queues: int


def agreement(model: ActorCritic, demos: Sequence[Demonstration]) -> Agreement:
    """Agreement of ``model``'s greedy order with the incumbent's on every demonstration."""
    if not demos:
        raise ValueError("no demonstrations to measure agreement on")
    taus, tops = [], []
    model.eval()
    with torch.no_grad():
        for d in demos:
            obs = torch.from_numpy(np.ascontiguousarray(d.obs)).unsqueeze(0)
            mask = torch.ones((1, d.size), dtype=torch.bool)
            prio = model.priorities(obs, mask)[0].numpy()
            taus.append(kendall_tau(prio))
            tops.append(float(np.argmax(prio) == 0))
    return Agreement(float(np.mean(taus)), float(np.mean(tops)), len(demos))
