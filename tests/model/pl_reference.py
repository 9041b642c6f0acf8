"""A brute-force Plackett-Luce reference for the model tests, sharing no code with ``shared.model``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence


def brute_force_order_prob(scores: Sequence[float], order: Sequence[int], real: Sequence[int]) -> float:
    """Probability of picking ``order`` first, one softmax draw at a time, in plain Python.

    Written from the definition (each pick is a softmax over the real jobs not picked yet), with no
    code shared with ``shared.model``.
    """
    remaining = list(real)
    prob = 1.0
    for slot in order:
        total = sum(math.exp(scores[j]) for j in remaining)
        prob *= math.exp(scores[slot]) / total
        remaining.remove(slot)
    return prob


def all_prefixes(real: Sequence[int], length: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(real, length))


def marginal_by_enumeration(scores: Sequence[float], prefix: Sequence[int], real: Sequence[int]) -> float:
    """Probability of a top-m prefix: the sum over every full ordering that starts with it."""
    rest = [j for j in real if j not in prefix]
    return sum(
        brute_force_order_prob(scores, (*prefix, *tail), real) for tail in itertools.permutations(rest)
    )
