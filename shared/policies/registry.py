"""Policy names as the CLI and configs spell them: one ``register`` line per policy.

Adding a policy is its class (``keys``, and what else it can do: ``shared.policies.capabilities``)
plus one line here. Everything that lists or builds policies by name reads this registry: the
CLI's ``--policy``/``--base-policy``/``--imitate``, the simulated adapter's settings, the
prioritizer's base policies (``snapshot_keys.SNAPSHOT_POLICIES``: the registered ones with a
snapshot form), the property tests and benchmarks that sample ``POLICY_NAMES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shared.policies.base import Policy
from shared.policies.classic import F1, FCFS, SJF, UNICEP, WFP3
from shared.policies.multifactor import SlurmMultifactor
from shared.policies.predicted import SmallFirst, on_predictions

PolicyFactory = Callable[[], Policy]

_FACTORIES: dict[str, PolicyFactory] = {}


def register(name: str, factory: PolicyFactory) -> None:
    """Make ``make_policy(name)`` call ``factory`` (a policy class, or a function for a policy
    with arguments). A name is registered once (``unregister`` first to replace it)."""
    if name in _FACTORIES:
        raise ValueError(f"policy {name!r} is already registered")
    _FACTORIES[name] = factory


def unregister(name: str) -> None:
    """Remove ``name`` (tests that register a policy of their own clean up with it)."""
    del _FACTORIES[name]


register("fcfs", FCFS)
register("sjf", SJF)
register("sjf-oracle", lambda: SJF(oracle=True))
register("wfp3", WFP3)
register("unicep", UNICEP)
register("f1", F1)
register("multifactor", SlurmMultifactor)
# the same orders on predicted runtimes, and the online small/large split (``predicted.py``)
register("sjf-pred", lambda: on_predictions(SJF()))
register("wfp3-pred", lambda: on_predictions(WFP3()))
register("unicep-pred", lambda: on_predictions(UNICEP()))
register("f1-pred", lambda: on_predictions(F1()))
register("small-first", SmallFirst)

#: the policies registered above, in that order (``policy_names`` adds any registered later)
POLICY_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def policy_names() -> tuple[str, ...]:
    """Every registered name, in registration order."""
    return tuple(_FACTORIES)


def needs_predictions(names: Iterable[str]) -> bool:
    """Whether any of the registered policies ``names`` orders by predicted runtimes, so that
    the workload must be prepared with them (``prepare_workload(predictions=True)``)."""
    return any(make_policy(name).runtimes == "predicted" for name in names)


def baseline_names() -> tuple[str, ...]:
    """The registered policies a careful admin could run: every one but the clairvoyant (the
    "best baseline" of an evaluation is the best of these)."""
    return tuple(name for name in _FACTORIES if not make_policy(name).clairvoyant)


def make_policy(name: str) -> Policy:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(policy_names())}") from None
    return factory()
