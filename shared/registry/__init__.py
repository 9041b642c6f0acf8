"""The model registry: checkpoints registered as candidates, promoted through a gate, rolled back.

``Registry`` keeps the versions and their history in the store and announces changes on the
``models`` subject, which the prioritizers hot-reload from; ``evaluate_gate`` is the promotion gate
(held-out windows, paired bootstrap). ``docs/model-registry.md`` describes both.
"""

from shared.registry.gate import GateError, GateResult, GateSettings, decide, evaluate_gate
from shared.registry.registry import (
    Announcement,
    EventInfo,
    PromotionResult,
    Registry,
    RegistryError,
    ShadowResult,
    VersionInfo,
    default_actor,
)
from shared.registry.settings import RegistrySettings

__all__ = [
    "Announcement",
    "EventInfo",
    "GateError",
    "GateResult",
    "GateSettings",
    "PromotionResult",
    "Registry",
    "RegistryError",
    "RegistrySettings",
    "ShadowResult",
    "VersionInfo",
    "decide",
    "default_actor",
    "evaluate_gate",
]
