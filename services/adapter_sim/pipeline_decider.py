"""``PipelineDecider``: the simulated cluster starts what the pipeline's placer decided, where it decided.

How a run uses it (``shared.sim.applied.run_applied``): at every event with a queue the cluster asks
``decide``, which

1. publishes the outcomes of the jobs that ended since the last event, then describes the cluster
   (``SnapshotBuilder``): pending jobs (oldest first, capped), running jobs with their exact
   allocations (schema version 6) and estimated ends, every node's free resources; ``sequence``
   increases;
2. waits for the ``PlacementDecision`` of the same correlation id (``DecisionChannel``, lockstep: the
   simulated clock does not move meanwhile);
3. returns the decision's starts as allocations: the nodes it names, with its per-node GPUs, CPUs,
   memory and physical GPUs (``Placements`` columns; read back as the placer's ``Alloc``). The
   cluster checks that each fits (``RefusedStart`` otherwise) and starts it.

No decision in time (or a snapshot a stage dead-lettered): the simulator's own cycle decides in the
base policy's order (``SimulatorDecider``), counted as a timeout; ``give_up_after`` in a row end the
run with ``AdapterError``. In accelerated mode step 2 does not wait: the simulated clock is paced
at ``speedup`` times the wall clock and the newest decision received so far is applied, for the
jobs it starts that are still queued and still fit; one for an earlier snapshot that starts nothing
any more is replaced by the base policy's cycle (so an idle cluster with a queue never stalls).

What is done to the cluster (observing it, applying a decision, reporting outcomes, the base
policy's cycle) is ``SimulatedCluster``'s, the simulated cluster's implementation of the contract
every cluster adapter implements (``shared.service.cluster_adapter``); this class is only the loop
between it and the pipeline.

Because the placer runs the simulator's cycle (``shared.sim.cycle_on``) on the cluster this
snapshot describes exactly, a lockstep run whose decisions rank the jobs as the base policy does
gets ``Simulator.run``'s schedule under that policy: the same starts, ends and nodes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from services.adapter_sim.cluster import ProgressHook, SimulatedCluster
from services.adapter_sim.errors import AdapterError, RunStopped
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING
from services.adapter_sim.stats import AdapterStats
from shared.domain.jobs import FloatArray
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc
from shared.schemas import JobOutcome, PlacementDecision, QueueSnapshot
from shared.sim.applied import ClusterView
from shared.sim.config import SimConfig

__all__ = ["DecisionChannel", "Mode", "PipelineDecider", "ProgressHook"]


class DecisionChannel(Protocol):
    """The pipeline as seen from the simulator thread."""

    def decide(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> PlacementDecision | None:
        """Publish ``outcomes`` then ``snapshot``; the decision for it, or None when none came in time."""
        ...

    def send(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> None:
        """Publish ``outcomes`` then ``snapshot`` without waiting (accelerated mode)."""
        ...

    def latest(self) -> PlacementDecision | None:
        """The decision of the newest snapshot answered so far (accelerated mode)."""
        ...


Mode = Literal["lockstep", "accelerated"]


class PipelineDecider:
    """The pipeline as the simulated cluster's scheduler; see the module docstring."""

    def __init__(
        self,
        workload: BoundWorkload,
        estimate: FloatArray,
        base: Policy,
        config: SimConfig,
        channel: DecisionChannel,
        cluster: str,
        *,
        stats: AdapterStats | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        job_id_prefix: str = "",
        first_sequence: int = 0,
        progress: ProgressHook | None = None,
        stop: threading.Event | None = None,
        give_up_after: int = 5,
        mode: Mode = "lockstep",
        speedup: float = 3600.0,
    ) -> None:
        if give_up_after < 0:
            raise ValueError(f"give_up_after must be >= 0 (0 = never), got {give_up_after}")
        if mode not in ("lockstep", "accelerated"):
            raise ValueError(f"mode must be 'lockstep' or 'accelerated', got {mode!r}")
        if not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup}")
        self.workload = workload
        self.channel = channel
        self.cluster = cluster
        self.mode: Mode = mode
        self.speedup = speedup
        self.stats = stats or AdapterStats()
        self.stop = stop or threading.Event()
        self.give_up_after = give_up_after
        self.missed_in_a_row = 0
        self._anchor: tuple[float, float] | None = None  # (simulated, wall) time of the first event
        #: the cluster itself, as a cluster adapter (in accelerated mode a decision may be for an
        #: earlier snapshot: only its placements that still fit start)
        self.adapter = SimulatedCluster(
            workload,
            estimate,
            base,
            config,
            cluster,
            stats=self.stats,
            max_pending=max_pending,
            job_id_prefix=job_id_prefix,
            first_sequence=first_sequence,
            progress=progress,
            check_fit=mode == "accelerated",
        )

    def take_outcomes(self) -> list[JobOutcome]:
        """Outcomes not yet handed to the channel (the jobs that ended after the last event)."""
        return self.adapter.outcomes()

    def note_end(self, ended: Sequence[tuple[int, float]]) -> None:
        """Jobs that ended after the last event with a queue (the run's tail)."""
        self.adapter.note_end(ended)

    # -- the decision --------------------------------------------------------------------------

    def decide(self, view: ClusterView) -> Mapping[int, Alloc]:
        if self.stop.is_set():
            raise RunStopped("the simulated cluster was stopped")
        adapter = self.adapter
        adapter.at(view)
        if adapter.handed_back:
            return adapter.own_cycle()
        observed = adapter.observe()
        snapshot, outcomes = observed.snapshot, observed.outcomes
        if self.mode == "accelerated":
            decision = self._accelerated(snapshot, outcomes, view.now)
        else:
            rejected_before = self.stats.rejected
            decision = self.channel.decide(snapshot, outcomes)
            self.stats.outcomes += len(outcomes)
            if decision is None:
                self._missed(rejected_before)
            else:
                self.missed_in_a_row = 0
        if decision is not None:
            applied = adapter.apply(decision)
            if applied.starts or decision.correlation_id == snapshot.correlation_id:
                return applied.starts
        # no decision, or (accelerated) an earlier snapshot's that starts nothing here any more:
        # the simulator's own cycle in the base policy's order, so an idle cluster never stalls
        return adapter.own_cycle(snapshot.correlation_id)

    def _accelerated(
        self, snapshot: QueueSnapshot, outcomes: list[JobOutcome], now: float
    ) -> PlacementDecision | None:
        """Keep the simulated clock ``speedup`` times faster than the wall clock, publish without
        waiting, and return the newest decision received so far (for this or an earlier snapshot)."""
        if self._anchor is None:
            self._anchor = (now, time.perf_counter())
        sim0, wall0 = self._anchor
        ahead = wall0 + (now - sim0) / self.speedup - time.perf_counter()
        if ahead > 0 and self.stop.wait(ahead):
            raise RunStopped("the simulated cluster was stopped")
        self.channel.send(snapshot, outcomes)
        self.stats.outcomes += len(outcomes)
        decision = self.channel.latest()
        if decision is None:
            self.stats.timeouts += 1  # nothing decided yet: the base policy decides this event
        elif decision.correlation_id != snapshot.correlation_id:
            self.stats.stale_decisions += 1
        return decision

    def _missed(self, rejected_before: int) -> None:
        """Count an event without a decision; give up after ``give_up_after`` in a row."""
        stats = self.stats
        rejected = stats.rejected > rejected_before
        if not rejected:
            stats.timeouts += 1
        self.missed_in_a_row += 1
        if self.give_up_after and self.missed_in_a_row >= self.give_up_after:
            why = (
                f"the last one was dead-lettered: {stats.last_rejection}"
                if rejected and stats.last_rejection
                else "none came within the timeout"
            )
            raise AdapterError(
                f"no decision for {self.missed_in_a_row} snapshots in a row of cluster {self.cluster!r} "
                f"({why}): are the featurizer, prioritizer and placer running on this bus and subject "
                f"root, with {self.cluster!r} in HYLO_CLUSTERS and the same cluster spec?"
            )
