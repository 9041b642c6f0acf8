"""What a policy may do beyond ``Policy.keys``: optional capabilities, as protocols.

``Policy`` requires one method, ``keys``. Everything else a caller may use is a capability that a
policy has or not, checked with ``isinstance`` against a ``runtime_checkable`` protocol below (a
structural check: the class defines the methods, it does not register anywhere):

- ``SnapshotForm``: its keys from a ``QueueSnapshot``'s pending columns, without a simulator (the
  prioritizer service's base policy, ``shared.policies.snapshot_keys``);
- ``CompiledForm``: what the simulator's compiled core needs to run it (one of the core's policy
  kinds and its per-job columns, ``shared.sim.compiled.run``); a policy with static keys needs none
  (the core takes its keys up front, ``P_STATIC``);
- ``ExternalCompiled``: the compiled core may run it by asking ``keys`` at every cycle that orders
  the queue (the learned policy);
- ``ScalarKey``, ``TracksJobs``, ``WatchesCluster``, ``OrderClasses``: the simulator's hooks.

Why protocols and not more abstract methods or flags: a policy is one class in one file (the
formula, its snapshot form, its compiled form side by side) plus a line in ``registry.py``, and a
new policy writes only what it can do; the callers ask what it can do instead of naming classes
(``isinstance(policy, WFP3)`` in the compiled core's dispatch, ``if name == "wfp3"`` in the
snapshot keys), which is what made a new policy touch five files.

The simulator resolves the four hooks once per run (``hooks``): a policy without one is simply
not called (``TracksJobs``, ``WatchesCluster``), asked ``keys`` of one job (``ScalarKey``) or
taken to promise no order classes (``OrderClasses``).

A check costs microseconds: callers check once per run or per call of a service, never per job.
Where even that shows (the compiled core's dispatch, once per simulated window: a 256-job window
runs in about a millisecond), ``capable`` decides per class instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np

from shared.domain.jobs import FloatArray, IntArray

if TYPE_CHECKING:
    from shared.domain.cluster import ClusterSpec
    from shared.policies.base import Policy
    from shared.policies.multifactor import MultifactorWeights
    from shared.scheduling.state import Alloc, ClusterState

__all__ = [
    "CompiledForm",
    "CompiledKind",
    "CompiledPolicy",
    "ExternalCompiled",
    "Hooks",
    "OrderClasses",
    "PendingColumns",
    "ScalarKey",
    "SnapshotContext",
    "SnapshotForm",
    "SnapshotPolicyError",
    "TracksJobs",
    "WatchesCluster",
    "capable",
    "float_column",
    "hooks",
    "int_column",
]


# -- the snapshot form --------------------------------------------------------------------------


class PendingColumns(Protocol):
    """The pending jobs' columns that base-policy keys read: what ``shared.schemas.snapshot.PendingJobs``
    holds. Why a protocol and not that class: policies sit below the messages in Hylo's layers
    (``tests/test_layers.py``), so they name what they read, and a snapshot's jobs fit it."""

    @property
    def submit_s(self) -> Sequence[float]: ...
    @property
    def est_runtime_s(self) -> Sequence[float]: ...
    @property
    def gpus(self) -> Sequence[int]: ...
    @property
    def gpu_milli(self) -> Sequence[int]: ...
    @property
    def partition(self) -> Sequence[str]: ...
    @property
    def qos(self) -> Sequence[str]: ...
    def __len__(self) -> int: ...


@dataclass(frozen=True)
class SnapshotContext:
    """What a snapshot form may read besides the pending jobs: the cluster's spec (None when the
    service has none for this cluster), the multifactor weights configured for the service (None:
    the policy's own) and the origin of F1's submit times on the cluster clock."""

    spec: ClusterSpec | None = None
    weights: MultifactorWeights | None = None
    f1_origin_s: float = 0.0


class SnapshotPolicyError(ValueError):
    """A policy that cannot be computed from a snapshot (or an unknown one)."""


@runtime_checkable
class SnapshotForm(Protocol):
    """Keys computable from a snapshot's pending jobs alone (production, no simulator)."""

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        """The keys ``keys`` gives the same jobs at ``now`` (as closely as a snapshot allows; the
        policy is not bound). Raises ``SnapshotPolicyError`` where ``ctx`` lacks what it needs."""
        ...


def float_column(values: Sequence[float], n: int) -> FloatArray:
    """A snapshot column as float64 (shape ``(n,)`` even when empty)."""
    return np.array(values, dtype=np.float64).reshape(n)


def int_column(values: Sequence[int], n: int) -> IntArray:
    """A snapshot column as int64 (shape ``(n,)`` even when empty)."""
    return np.array(values, dtype=np.int64).reshape(n)


# -- the compiled form --------------------------------------------------------------------------

#: the compiled core's policy kinds (``shared.sim.compiled.records``: P_STATIC, P_WFP3, P_UNICEP,
#: P_MULTIFACTOR), each a key formula that ``kernels._key`` computes bit for bit as Python does
CompiledKind = Literal["static", "wfp3", "unicep", "multifactor"]


@dataclass(frozen=True)
class CompiledPolicy:
    """A policy as the compiled core runs it: one of its kinds, the per-job columns that kind reads
    (``records.JOB`` field -> one value per job of the run's range), and for ``multifactor`` the
    fair-share parameters (``records.FAIRSHARE`` fields) and the number of users.

    Why names and not the records themselves: policies sit below the simulator in the layers, so
    they say what to fill and ``shared.sim.compiled.run`` fills it (and refuses an unknown field).
    """

    kind: CompiledKind
    columns: Mapping[str, np.ndarray]
    fairshare: Mapping[str, float] = field(default_factory=dict)
    n_users: int = 1


@runtime_checkable
class CompiledForm(Protocol):
    """A policy whose keys the compiled core computes itself (a kind other than static keys)."""

    def compiled_form(self, lo: int, hi: int) -> CompiledPolicy | str:
        """The form of the bound policy for jobs ``lo .. hi - 1`` (estimates from the bound
        context, which are the simulator's), or why the core cannot run it now (a subclass with
        its own keys, usage from an earlier run): then the run goes to the Python loop. The
        dispatch rule asks first for no jobs (``lo == hi == 0``) whether there is a form: the
        reason must not depend on the range. A ``static`` form's keys must not be NaN."""
        ...


@runtime_checkable
class ExternalCompiled(Protocol):
    """A policy the compiled core may run by stopping at every cycle that orders the queue and
    asking ``keys`` of the whole queue (``shared.sim.compiled.run.run_external``).

    The promise: of the state given to ``attach`` the policy reads only its groups' free
    ``whole``, ``cpu``, ``mem``, ``maxfrac`` and ``n``, and of the allocations only their
    ``group`` (which is all the compiled core keeps where Python can see it).
    """

    def external_hints(self, jobs: IntArray) -> tuple[float, FloatArray | None]:
        """For the external runs of ``jobs`` (the run's job range): ``(t, keys)``, where ``keys``
        (one per job of ``jobs``, or None) order the queue of every cycle before ``t`` and of
        every cycle with one queued job exactly as ``keys()`` would, with no side effect there:
        the core then orders those cycles itself instead of asking. ``(-inf, None)``: always ask."""
        ...

    def external_changed(self, n_events: int) -> bool:
        """``n_events`` jobs started or ended since the policy was last asked for keys. True has
        each passed to ``on_start``/``on_end`` (in order, at its time); False says the policy
        needs no more, e.g. because it reads the running jobs from the state it was attached to
        (``running``)."""
        ...


# -- the simulator's hooks ----------------------------------------------------------------------


@runtime_checkable
class ScalarKey(Protocol):
    """``keys`` of one job in scalar code, the same value bit for bit (the simulator asks it for
    the next job of an order class while a cycle runs; a one-element numpy call costs more)."""

    def key(self, j: int, now: float) -> float: ...


@runtime_checkable
class TracksJobs(Protocol):
    """Told of every start and end (fair-share usage, the learned policy's running jobs)."""

    def on_start(self, j: int, now: float) -> None: ...
    def on_end(self, j: int, now: float) -> None: ...


@runtime_checkable
class WatchesCluster(Protocol):
    """Given the live cluster state and the running jobs' allocations at the start of a run
    (read-only), e.g. to build the learned policy's observation."""

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None: ...


@runtime_checkable
class OrderClasses(Protocol):
    """Classes of jobs the policy always orders by arrival: the simulator's class-head shortcuts
    and the compiled core need them."""

    def order_classes(self) -> IntArray | None:
        """Each job's class, or None (no such promise now). The promise, for every class: at any
        time, the key of a job (``keys``) is non-decreasing in its index among the jobs of its
        class (jobs arrive in index order, ties go to the earlier arrival), and keys depend only
        on the job and the time (calling ``keys`` again at the same time gives the same values,
        with no side effect beyond the clock). The simulator then needs, per class, only the
        first queued job: with a long queue it orders a few hundred class heads instead of every
        queued job, and it may skip ``keys`` where a cycle would try a lone job. The base
        policies return None for a subclass that overrides ``keys`` (it must make its own
        promise). Called after ``bind``."""
        ...


def capable(policy: object, capability: type) -> bool:
    """``isinstance(policy, capability)`` for a capability protocol above, decided by the
    policy's class. Why: on Python 3.11 ``isinstance`` on a protocol walks the protocol's members
    at every call (15-40 us, a few percent of a short window's compiled run), while ``issubclass``
    is cached per class by ``ABCMeta``. A capability is a class's: an instance that sets one of
    the methods to None is not told apart."""
    return issubclass(type(policy), capability)


@dataclass(frozen=True)
class Hooks:
    """A policy's simulator hooks, resolved once at the start of a run: the Python loop calls
    ``key`` per job of a cycle and ``on_start``/``on_end`` per job, so it reads bound methods
    from here instead of checking a capability each time. None: the policy lacks the hook."""

    key: Callable[[int, float], float]
    on_start: Callable[[int, float], None] | None
    on_end: Callable[[int, float], None] | None
    attach: Callable[[ClusterState, Mapping[int, Alloc]], None] | None
    order_classes: Callable[[], IntArray | None] | None


def hooks(policy: Policy) -> Hooks:
    """``policy``'s hooks (``Hooks``); ``key`` is a one-job ``keys`` call where the policy has no
    scalar ``key``."""

    def one_key(j: int, now: float) -> float:
        return float(policy.keys(np.array([j], dtype=np.int64), now)[0])

    on_start: Callable[[int, float], None] | None = None
    on_end: Callable[[int, float], None] | None = None
    if isinstance(policy, TracksJobs):
        on_start, on_end = policy.on_start, policy.on_end
    return Hooks(
        key=policy.key if isinstance(policy, ScalarKey) else one_key,
        on_start=on_start,
        on_end=on_end,
        attach=policy.attach if isinstance(policy, WatchesCluster) else None,
        order_classes=policy.order_classes if isinstance(policy, OrderClasses) else None,
    )
