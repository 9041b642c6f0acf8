"""Base scheduling policies: each turns the queued jobs into sort keys, vectorized over the queue."""

from shared.policies.base import Policy, PolicyContext
from shared.policies.registry import POLICY_NAMES, make_policy

__all__ = ["POLICY_NAMES", "Policy", "PolicyContext", "make_policy"]
