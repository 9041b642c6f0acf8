"""Base scheduling policies: each turns the queued jobs into sort keys, vectorized over the queue."""

from shared.policies.base import MissingPredictionsError, Policy, PolicyContext
from shared.policies.registry import POLICY_NAMES, baseline_names, make_policy, needs_predictions

__all__ = [
    "POLICY_NAMES",
    "MissingPredictionsError",
    "Policy",
    "PolicyContext",
    "baseline_names",
    "make_policy",
    "needs_predictions",
]
