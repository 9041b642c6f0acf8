"""Base-policy keys and priorities for the pending jobs of a snapshot (production, no simulator).

Why a second form of each policy: the simulator's policies read a bound workload
(``PolicyContext``) and, for multifactor, usage accumulated over the simulation; the prioritizer
service only has a ``QueueSnapshot``. Each policy class writes its snapshot form next to its
``keys`` (``snapshot_keys``, the ``SnapshotForm`` capability), from the same formula function; this
module finds the class by name through the registry and refuses what a snapshot cannot give:

- a policy with no snapshot form, or a clairvoyant one (``sjf-oracle`` needs true runtimes), or
  one that orders by predicted runtimes (``sjf-pred``, ``small-first``: a snapshot carries
  estimates only);
- ``f1`` uses submit times since the trace start; here since ``f1_origin_s`` on the cluster clock
  (default 0, which is the trace start for the simulated adapter, whose clock starts there);
- ``multifactor`` needs the cluster spec, and has no user's usage (``shared.policies.multifactor``).

``tests/stages`` checks every snapshot form against the simulator's policy on the same jobs.

Keys follow ``Policy.keys``: smaller starts first. ``priorities_from_keys`` turns them into
integer priorities, higher first: the job first in (key, submit time, position) order gets Q, the
last 1, so ties are broken by submit time, then by the order of the input.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.policies.base import Policy
from shared.policies.capabilities import (
    PendingColumns,
    SnapshotContext,
    SnapshotForm,
    SnapshotPolicyError,
)
from shared.policies.multifactor import MultifactorWeights
from shared.policies.multifactor import snapshot_priority as multifactor_priority
from shared.policies.registry import make_policy, policy_names

__all__ = [
    "SNAPSHOT_POLICIES",
    "PendingColumns",
    "SnapshotPolicyError",
    "base_order",
    "check_policy",
    "multifactor_priority",
    "priorities_from_keys",
    "snapshot_keys",
    "snapshot_policies",
]

FloatArray = npt.NDArray[np.float64]


def _form(name: str) -> SnapshotForm:
    """Registered policy ``name`` as a ``SnapshotForm``; ``SnapshotPolicyError`` says why not."""
    if name not in policy_names():
        raise SnapshotPolicyError(
            f"unknown base policy {name!r}; from a snapshot: {', '.join(snapshot_policies())}"
        )
    policy = make_policy(name)
    if policy.clairvoyant:
        raise SnapshotPolicyError(f"{name} needs true runtimes, which a snapshot does not carry")
    if policy.runtimes != "estimate":
        raise SnapshotPolicyError(f"{name} orders by predicted runtimes, which a snapshot does not carry")
    if not isinstance(policy, SnapshotForm):
        raise SnapshotPolicyError(f"base policy {name!r} has no snapshot form (snapshot_keys)")
    return policy


def snapshot_policies() -> tuple[str, ...]:
    """The registered policies computable from a snapshot, in registration order."""
    return tuple(n for n in policy_names() if _computable(make_policy(n)))


def _computable(policy: Policy) -> bool:
    return not policy.clairvoyant and policy.runtimes == "estimate" and isinstance(policy, SnapshotForm)


#: the base policies computable from a snapshot (``multifactor`` needs the cluster spec): those
#: registered in ``registry.py`` (``snapshot_policies`` adds any registered later)
SNAPSHOT_POLICIES: tuple[str, ...] = snapshot_policies()


def check_policy(name: str) -> None:
    """Raise ``SnapshotPolicyError`` unless base policy ``name`` can be computed from a snapshot."""
    _form(name)


def snapshot_keys(
    policy: str,
    jobs: PendingColumns,
    now: float,
    spec: ClusterSpec | None = None,
    *,
    weights: MultifactorWeights | None = None,
    f1_origin_s: float = 0.0,
) -> FloatArray:
    """Sort keys (smaller first) of ``jobs`` under base policy ``policy`` at time ``now``."""
    ctx = SnapshotContext(spec=spec, weights=weights, f1_origin_s=f1_origin_s)
    return _form(policy).snapshot_keys(jobs, now, ctx)


def base_order(keys: FloatArray, submit: FloatArray) -> npt.NDArray[np.int64]:
    """Positions in base order: key ascending, ties by submit time, then position."""
    return np.lexsort((np.arange(len(keys)), submit, keys)).astype(np.int64)


def priorities_from_keys(keys: FloatArray, submit: FloatArray) -> FloatArray:
    """Integer priorities (higher first) from keys: Q for the first in base order, ..., 1 for the last."""
    order = base_order(keys, submit)
    prio = np.empty(len(keys), dtype=np.float64)
    prio[order] = np.arange(len(keys), 0, -1, dtype=np.float64)
    return prio
