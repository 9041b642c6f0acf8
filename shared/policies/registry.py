"""Policy names as the CLI and configs spell them."""

from __future__ import annotations

from collections.abc import Callable

from shared.policies.base import Policy
from shared.policies.classic import F1, FCFS, SJF, UNICEP, WFP3
from shared.policies.multifactor import SlurmMultifactor

_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fcfs": FCFS,
    "sjf": SJF,
    "sjf-oracle": lambda: SJF(oracle=True),
    "wfp3": WFP3,
    "unicep": UNICEP,
    "f1": F1,
    "multifactor": SlurmMultifactor,
}

POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def make_policy(name: str) -> Policy:
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}") from None
