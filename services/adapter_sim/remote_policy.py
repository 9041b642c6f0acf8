"""``RemotePolicy``: a simulator policy whose queue order comes from the pipeline.

How the simulator uses a dynamic policy (``shared/sim/simulator.py``): ``keys`` is called at most
once per scheduling cycle, with every queued job in arrival order (the visit chunks, shape
pre-checks and dominated-request filters all work on those keys afterwards; they never ask for a
subset). A cycle runs at an event (an arrival or a completion) when something may start, so every
call is a moment where the queue or the cluster changed. At each call this policy:

1. describes the cluster (``SnapshotBuilder``): pending jobs (oldest first, capped), running jobs
   with their estimated ends, every node's free resources; ``sequence`` increases;
2. publishes it with the outcomes of the jobs that ended since the last cycle, and waits for the
   ``PlacementDecision`` of the same correlation id (``DecisionChannel``, lockstep: the simulated
   clock does not move meanwhile);
3. turns the decision into sort keys: ranked jobs first by ``rank`` (ties: higher ``priority``,
   then base order), then every job the decision did not rank (beyond the snapshot cap, or left
   out by the pipeline) in the base policy's order. No decision in time: the base policy's keys,
   counted as a timeout (``give_up_after`` in a row end the run with ``AdapterError``).

In accelerated mode (``mode="accelerated"``) step 2 does not wait: the simulated clock is paced at
``speedup`` times the wall clock, and step 3 uses the newest decision received so far, whichever
snapshot it was for.

Keys are distinct numbers, so the simulator's arrival tie-break never reorders the pipeline's
ranking; when the pipeline answers with the base policy's order (ties by arrival), the schedule is
the plain simulator's under that base policy. Where the jobs start is the simulated scheduler's
own placement (its placer, EASY backfill): a decision's ``nodes`` are advice, as a priority plugin's
output is to Slurm.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, Protocol

import numpy as np

from services.adapter_sim.errors import AdapterError, RunStopped
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING, SnapshotBuilder
from services.adapter_sim.stats import AdapterStats
from shared.domain.jobs import FloatArray, IntArray
from shared.policies.base import Policy, PolicyContext
from shared.scheduling.state import Alloc, ClusterState
from shared.schemas import JobOutcome, PlacementDecision, QueueSnapshot, new_correlation_id


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


#: called after each finished job: (jobs finished, jobs in the run, simulated time)
ProgressHook = Callable[[int, int, float], None]


def keys_from_decision(
    decision: PlacementDecision, job_ids: Sequence[str], base_keys: FloatArray
) -> tuple[FloatArray, int]:
    """Sort keys (smaller first) of the queued jobs ``job_ids`` (arrival order) under ``decision``.

    Ranked jobs get keys ``0 .. R-1`` in (rank, -priority, base order) order; the others get
    ``R + their position in the base order`` (base keys, ties by arrival). Returns the keys and
    how many ranked job ids were not in the queue (ignored).
    """
    n = len(job_ids)
    base_order = np.argsort(base_keys, kind="stable")
    base_pos = np.empty(n, dtype=np.int64)
    base_pos[base_order] = np.arange(n, dtype=np.int64)
    where = {job_id: k for k, job_id in enumerate(job_ids)}
    ranked: list[tuple[int, float, int, int]] = []
    unknown = 0
    for p in decision.placements:
        k = where.get(p.job_id)
        if k is None:
            unknown += 1
            continue
        ranked.append((p.rank, -p.priority, int(base_pos[k]), k))
    ranked.sort()
    keys = (base_pos + len(ranked)).astype(np.float64)
    for r, (_, _, _, k) in enumerate(ranked):
        keys[k] = float(r)
    return keys, unknown


class RemotePolicy(Policy):
    """The pipeline as the simulated cluster's priority source; see the module docstring."""

    dynamic = True
    tracks_jobs = True

    def __init__(
        self,
        base: Policy,
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
        self.mode = mode
        self.speedup = speedup
        self._anchor: tuple[float, float] | None = None  # (simulated, wall) time of the first cycle
        self.base = base
        self.channel = channel
        self.cluster = cluster
        self.stats = stats or AdapterStats()
        self.max_pending = max_pending
        self.job_id_prefix = job_id_prefix
        self.sequence = first_sequence
        self.progress = progress
        self.stop = stop or threading.Event()
        self.give_up_after = give_up_after
        self.missed_in_a_row = 0
        self.name = f"pipeline/{base.name}"

    # -- simulator hooks ------------------------------------------------------------------------

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        self.base.bind(ctx)
        self.builder = SnapshotBuilder(
            ctx.workload,
            ctx.estimate,
            self.cluster,
            max_pending=self.max_pending,
            job_id_prefix=self.job_id_prefix,
        )

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        self.base.attach(state, allocs)
        self.state = state
        self.allocs = allocs
        n = len(self.ctx.workload.jobs)
        self.start_s = np.full(n, np.nan)
        self.started_under: dict[int, str] = {}
        self.correlation_id = ""  # the decision under which jobs start now
        self.ended: list[JobOutcome] = []
        self.finished = 0

    def on_start(self, j: int, now: float) -> None:
        self.start_s[j] = now
        self.started_under[j] = self.correlation_id
        self.builder.started(j, self.allocs[j], now)
        if self.base.tracks_jobs:
            self.base.on_start(j, now)

    def on_end(self, j: int, now: float) -> None:
        self.builder.ended(j)
        if self.base.tracks_jobs:
            self.base.on_end(j, now)
        jobs = self.ctx.workload.jobs
        self.ended.append(
            JobOutcome(
                cluster=self.cluster,
                correlation_id=self.started_under.pop(j),
                job_id=self.builder.job_ids[j],
                submit_s=float(jobs.submit[j]),
                start_s=float(self.start_s[j]),
                end_s=now,
                gpus=int(jobs.gpus[j]),
            )
        )
        self.finished += 1
        if self.progress is not None:
            self.progress(self.finished, len(jobs), now)

    def describe(self) -> str:
        return self.name

    # -- the decision ---------------------------------------------------------------------------

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        if self.stop.is_set():
            raise RunStopped("the simulated cluster was stopped")
        base_keys = np.asarray(self.base.keys(idx, now), dtype=np.float64)
        self.correlation_id = new_correlation_id()
        snapshot, left_out = self.builder.build(
            self.state, self.allocs, idx, now, self.sequence, self.correlation_id
        )
        self.sequence += 1
        stats = self.stats
        stats.snapshots += 1
        if left_out:
            stats.truncated_snapshots += 1
            stats.truncated_jobs += left_out
        outcomes, self.ended = self.ended, []
        if self.mode == "accelerated":
            return self._keys_accelerated(snapshot, outcomes, idx, base_keys, now)
        rejected_before = stats.rejected
        decision = self.channel.decide(snapshot, outcomes)
        stats.outcomes += len(outcomes)
        if decision is None:
            self._missed(rejected_before)
            return base_keys
        self.missed_in_a_row = 0
        return self._apply(decision, idx, base_keys)

    def _apply(self, decision: PlacementDecision, idx: IntArray, base_keys: FloatArray) -> FloatArray:
        stats = self.stats
        stats.decisions_applied += 1
        stats.policies[decision.policy] = stats.policies.get(decision.policy, 0) + 1
        if decision.fallback:
            stats.fallbacks[decision.fallback] = stats.fallbacks.get(decision.fallback, 0) + 1
        ids = self.builder.job_ids
        keys, unknown = keys_from_decision(decision, [ids[j] for j in idx.tolist()], base_keys)
        stats.unknown_jobs += unknown
        return keys

    def _keys_accelerated(
        self,
        snapshot: QueueSnapshot,
        outcomes: list[JobOutcome],
        idx: IntArray,
        base_keys: FloatArray,
        now: float,
    ) -> FloatArray:
        """Accelerated mode: keep the simulated clock ``speedup`` times faster than the wall clock,
        publish without waiting, and order by the newest decision received so far (for this or an
        earlier snapshot: jobs it does not rank, such as later arrivals, follow in base order)."""
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
            self.stats.timeouts += 1  # nothing decided yet: the base policy orders this cycle
            return base_keys
        if decision.correlation_id != snapshot.correlation_id:
            self.stats.stale_decisions += 1
        self.correlation_id = decision.correlation_id  # jobs start under the decision applied
        return self._apply(decision, idx, base_keys)

    def _missed(self, rejected_before: int) -> None:
        """Count a cycle without a decision; give up after ``give_up_after`` in a row."""
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

    def take_outcomes(self) -> list[JobOutcome]:
        """Outcomes not yet handed to the channel (the jobs that ended after the last cycle)."""
        outcomes, self.ended = self.ended, []
        return outcomes
