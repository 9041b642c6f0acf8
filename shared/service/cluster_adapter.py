"""The contract every cluster adapter implements, and the rules all of them share (issue 18, item 5).

Why one contract: Hylo runs beside an external scheduler, and the adapter is the only part that knows
that system (``services/adapter_slurm`` for Slurm, ``services/adapter_sim`` for the simulated
cluster). Like Kueue's one-adapter-per-external-system design, every adapter does the same things
over the same messages, so the pipeline never learns which system it talks to:

1. **observe** the cluster and describe it as a ``QueueSnapshot`` with a sequence number that never
   goes back (``SnapshotSequence``), together with the ``JobOutcome`` of every job that finished
   since the previous observation;
2. **publish** them: the snapshot, and every outcome until JetStream acknowledged it
   (``OutcomeOutbox``; a refused publish loses nothing);
3. **receive** the ``PlacementDecision`` of its snapshot: its own cluster's only, and never one
   older than a decision already applied (``DecisionGate``);
4. **apply** it to the external system (Slurm: priorities with ``scontrol``; the simulator: starts on
   the decided nodes) and say what it did (``AppliedDecision``);
5. **report outcomes once** per job (``ReportedOnce``; the bus and the store deduplicate as well);
6. **hand back** the jobs it manages to the external system's own scheduler when it stops.

These rules were written twice before (sequence numbers in both adapters, the stale-decision check
in the Slurm adapter only, "reported once" in Slurm's outcome tracker, outcome publishing in the
simulated cluster's bridge and in Slurm's poll loop); here they are written once, and
``tests/adapter_contract/`` runs the same assertions against every adapter. An adapter whose
system is polled (Slurm, and any queue with a client API) also reuses the loop that drives it:
``shared.service.adapter_loop.PollingLoop``. ``docs/architecture.md`` ("How to add a cluster
adapter") lists the steps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from shared.bus.sequence import JumpGuard, SequenceJump
from shared.bus.settings import BusSettings
from shared.schemas.base import Message
from shared.schemas.messages import JobOutcome, PlacementDecision
from shared.schemas.snapshot import QueueSnapshot

__all__ = [
    "AppliedDecision",
    "ClusterAdapter",
    "DecisionGate",
    "Observation",
    "OutcomeOutbox",
    "Publish",
    "ReportedOnce",
    "SequenceJump",
    "SnapshotSequence",
    "WrongCluster",
    "answers",
    "wall_clock_sequence",
]

log = logging.getLogger(__name__)

#: how a message reaches the bus (``Publisher.publish``, or a test's stand-in)
Publish = Callable[[Message], Awaitable[object]]


class Observation(Protocol):
    """What one look at the cluster gives: the snapshot, and the jobs that finished since the last."""

    @property
    def snapshot(self) -> QueueSnapshot: ...

    @property
    def outcomes(self) -> Sequence[JobOutcome]: ...


class AppliedDecision(Protocol):
    """What applying one decision did to the external system."""

    @property
    def applied(self) -> Sequence[str]:
        """Job ids the external system now treats as the decision says (Slurm: priorities written;
        the simulator: jobs started)."""
        ...

    @property
    def skipped(self) -> Sequence[tuple[str, str]]:
        """(job id, why) for jobs the decision names that the adapter left alone."""
        ...

    @property
    def stale(self) -> bool:
        """True when the decision was older than one already applied, and nothing was done."""
        ...


O_co = TypeVar("O_co", bound=Observation, covariant=True)
A_co = TypeVar("A_co", bound=AppliedDecision, covariant=True)


class ClusterAdapter(Protocol[O_co, A_co]):
    """The operations an adapter for a new external system implements; see the module docstring.

    The calls are synchronous and may block (a Slurm command, the simulator's thread): a service
    runs them in a worker thread, one at a time (``PollingLoop`` holds a lock around them).
    """

    @property
    def cluster(self) -> str:
        """The cluster's name on the bus (``<root>.v1.<cluster>.<kind>``)."""
        ...

    def observe(self) -> O_co:
        """Look at the cluster now: a snapshot with the next sequence number, and the outcomes of
        the jobs that finished since the previous observation (each job's once). An observation
        that fails raises and leaves the adapter's state as the last good one left it."""
        ...

    def apply(self, decision: PlacementDecision) -> A_co:
        """Make the external system follow ``decision`` for the jobs this adapter manages. A
        decision of another cluster raises ``WrongCluster``; one older than a decision already
        applied changes nothing and says ``stale``. Applying the same decision twice is harmless."""
        ...

    def outcomes(self) -> Sequence[JobOutcome]:
        """Outcomes the adapter learned without observing (the simulated cluster: jobs that ended
        after its last event), each job's once; an adapter that learns them only by observing
        returns none."""
        ...

    def hand_back(self) -> int:
        """Stop deciding: the jobs this adapter manages go back to the external system's own
        scheduler (Slurm: its multifactor priorities; the simulator: the base policy's cycle).
        Returns how many waiting jobs were handed back."""
        ...


def wall_clock_sequence(per_second: int, now: float | None = None) -> int:
    """The wall clock (or ``now``, epoch seconds) in units of ``1 / per_second`` s: a sequence
    number above every one an earlier run of the same cluster used, as long as that run numbered
    its snapshots no faster than ``per_second`` a second."""
    if now is None:
        return time.time_ns() * per_second // 1_000_000_000
    return int(now * per_second)


class SnapshotSequence:
    """Sequence numbers of one cluster's snapshots: strictly increasing, from ``first`` on.

    Why it matters: the featurizer keeps only the newest snapshot per cluster (latest-wins by
    ``sequence``) and adapters ignore decisions older than the newest applied, so a number that
    repeats or goes back would silently drop a snapshot or let an old decision win. ``next(floor)``
    returns at least ``floor`` (a clock reading: Slurm numbers a poll by its time in ms, so numbers
    keep increasing across adapter restarts) and always more than the previous number (two polls
    in the same millisecond, or a clock stepped back, still get increasing numbers).
    """

    def __init__(self, first: int = 0) -> None:
        if first < 0:
            raise ValueError(f"a snapshot sequence starts at 0 or above, got {first}")
        self._next = first
        self.last = -1

    def next(self, floor: int = 0) -> int:
        value = max(self._next, floor)
        self._next = value + 1
        self.last = value
        return value


class WrongCluster(ValueError):
    """A decision reached the adapter of another cluster (a wiring error: never applied)."""


class DecisionGate:
    """Which decisions an adapter may apply: its own cluster's, and none older than one applied.

    Why by sequence and not by arrival: JetStream redelivers a decision whose handler failed (an
    unreachable controller), possibly after a newer one was applied; applying the old one then would
    undo the newer order. A decision for the same snapshot as the newest applied passes (a redelivery
    or a retry must be able to finish what a failure interrupted). ``answers`` is the lockstep form:
    the decision made for exactly this snapshot.

    Why bounded (issue 20): a forged decision with a huge sequence, once applied, made every later
    real decision "stale". A decision whose sequence lies more than ``max_jump`` past the newest
    applied raises ``SequenceJump`` (the adapter's route dead-letters it) and is never applied; one
    that far below is stale, as before. Three such decisions in a row that agree with each other are
    taken as a new numbering (``shared.bus.sequence``: an adapter restarted with other numbers).
    ``max_jump`` defaults to ``HYLO_MAX_SEQUENCE_JUMP``.
    """

    def __init__(self, cluster: str, max_jump: int | None = None) -> None:
        self.cluster = cluster
        #: the snapshot sequence of the newest decision applied (-1: none yet)
        self.newest = -1
        if max_jump is None:  # read once, when the adapter is built
            max_jump = BusSettings().max_sequence_jump
        self._jumps = JumpGuard(max_jump, what="decision sequence")

    def admit(self, decision: PlacementDecision) -> bool:
        """True when ``decision`` may be applied; False (logged) when it is stale. Raises
        ``WrongCluster`` for another cluster's decision and ``SequenceJump`` for one whose sequence
        jumps beyond the window past the newest applied."""
        if decision.cluster != self.cluster:
            raise WrongCluster(f"decision for cluster {decision.cluster!r}, this adapter is {self.cluster!r}")
        if self.newest >= 0:
            verdict = self._jumps.check(self.cluster, decision.sequence, self.newest)
            if verdict.rebase:
                self.newest = -1  # ``applied`` adopts this decision's numbering
                return True
            if verdict.reason is not None and decision.sequence > self.newest:
                raise SequenceJump(verdict.reason)
        if decision.sequence < self.newest:
            log.info(
                "decision of snapshot %d is older than the one applied (%d): ignored",
                decision.sequence,
                self.newest,
            )
            return False
        return True

    def applied(self, decision: PlacementDecision) -> None:
        """Record that ``decision`` was applied."""
        self.newest = max(self.newest, decision.sequence)


def answers(decision: PlacementDecision, snapshot: QueueSnapshot) -> bool:
    """True when ``decision`` is the one made for ``snapshot``: the same cluster, correlation id and
    sequence (what an adapter that waits for each decision, as the simulated cluster does, accepts)."""
    return (
        decision.cluster == snapshot.cluster
        and decision.correlation_id == snapshot.correlation_id
        and decision.sequence == snapshot.sequence
    )


class ReportedOnce:
    """The jobs whose outcome was reported, newest ``limit`` kept: each job's outcome goes out once.

    Why bounded: an adapter runs for months; an id older than the newest ``limit`` is still
    deduplicated downstream (an outcome's message id is ``outcomes.<cluster>.<job_id>.<digest of its
    times>``, and the store inserts it once), so forgetting it costs at most a duplicate the bus
    drops.
    """

    def __init__(self, limit: int = 100_000) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, job_id: str) -> bool:
        """Remember ``job_id``; True the first time (report it), False after (do not)."""
        if job_id in self._ids:
            return False
        self._ids[job_id] = None
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return True


class OutcomeOutbox:
    """Outcomes waiting for the bus: each leaves once JetStream acknowledged it, none is lost.

    Why: outcomes are what the store derives wait, JCT and slowdown from, and what retraining learns
    from; a bus that refuses a publish (down, full) must not make them vanish. ``flush`` publishes
    all waiting outcomes concurrently (each awaits its ack), keeps the ones that failed, in order,
    for the next flush, and raises the first failure. Publishing one twice is harmless (the stream
    drops the duplicate by message id).
    """

    def __init__(self) -> None:
        self.pending: list[JobOutcome] = []

    def add(self, outcomes: Iterable[JobOutcome]) -> None:
        self.pending.extend(outcomes)

    async def flush(self, publish: Publish) -> int:
        """Publish every waiting outcome; returns how many went out."""
        batch, self.pending = self.pending, []
        if not batch:
            return 0
        try:
            results = await asyncio.gather(*(publish(o) for o in batch), return_exceptions=True)
        except BaseException:  # cancelled: keep them all (any that went out is a harmless duplicate)
            self.pending[:0] = batch
            raise
        failed = [o for o, r in zip(batch, results, strict=True) if isinstance(r, BaseException)]
        self.pending[:0] = failed  # ahead of any added meanwhile
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return len(batch)
