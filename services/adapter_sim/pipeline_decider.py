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

Because the placer runs the simulator's cycle (``shared.sim.cycle_on``) on the cluster this
snapshot describes exactly, a lockstep run whose decisions rank the jobs as the base policy does
gets ``Simulator.run``'s schedule under that policy: the same starts, ends and nodes.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, Protocol

from services.adapter_sim.errors import AdapterError, RunStopped
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING, SnapshotBuilder
from services.adapter_sim.stats import AdapterStats
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import alloc_fits
from shared.scheduling.state import Alloc, ClusterState, gpu_ids_of
from shared.schemas import JobOutcome, PlacementDecision, QueueSnapshot, new_correlation_id
from shared.schemas.messages import JobPlacement
from shared.sim.applied import ClusterView, SimulatorDecider
from shared.sim.config import SimConfig


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
        self.sequence = first_sequence
        self.progress = progress
        self.stop = stop or threading.Event()
        self.give_up_after = give_up_after
        self.missed_in_a_row = 0
        self.fallback = SimulatorDecider(workload, base, config, estimate)
        self.builder = SnapshotBuilder(
            workload, estimate, cluster, max_pending=max_pending, job_id_prefix=job_id_prefix
        )
        self.index = {job_id: j for j, job_id in enumerate(self.builder.job_ids)}
        self.node_at = {
            name: (g, i) for g, names in enumerate(self.builder.names) for i, name in enumerate(names)
        }
        self._anchor: tuple[float, float] | None = None  # (simulated, wall) time of the first event
        self.started_under: dict[int, str] = {}
        self.start_s: dict[int, float] = {}
        self.pending_outcomes: list[JobOutcome] = []
        self.finished = 0

    # -- the cluster's events ------------------------------------------------------------------

    def _ended(self, ended: Sequence[tuple[int, float]]) -> None:
        jobs = self.workload.jobs
        for j, when in ended:
            self.builder.ended(j)
            self.pending_outcomes.append(
                JobOutcome(
                    cluster=self.cluster,
                    correlation_id=self.started_under.pop(j),
                    job_id=self.builder.job_ids[j],
                    submit_s=float(jobs.submit[j]),
                    start_s=self.start_s.pop(j),
                    end_s=when,
                    gpus=int(jobs.gpus[j]),
                )
            )
            self.finished += 1
            if self.progress is not None:
                self.progress(self.finished, len(jobs), when)

    def take_outcomes(self) -> list[JobOutcome]:
        """Outcomes not yet handed to the channel (the jobs that ended after the last event)."""
        outcomes, self.pending_outcomes = self.pending_outcomes, []
        return outcomes

    def note_end(self, ended: Sequence[tuple[int, float]]) -> None:
        """Jobs that ended after the last event with a queue (the run's tail)."""
        self._ended(ended)

    # -- the decision --------------------------------------------------------------------------

    def decide(self, view: ClusterView) -> Mapping[int, Alloc]:
        if self.stop.is_set():
            raise RunStopped("the simulated cluster was stopped")
        self._ended(view.ended)
        correlation_id = new_correlation_id()
        running = {j: r.alloc for j, r in view.running.items()}
        snapshot, left_out = self.builder.build(
            view.state, running, view.queued, view.now, self.sequence, correlation_id
        )
        self.sequence += 1
        stats = self.stats
        stats.snapshots += 1
        if left_out:
            stats.truncated_snapshots += 1
            stats.truncated_jobs += left_out
        outcomes = self.take_outcomes()
        if self.mode == "accelerated":
            decision = self._accelerated(snapshot, outcomes, view.now)
        else:
            rejected_before = stats.rejected
            decision = self.channel.decide(snapshot, outcomes)
            stats.outcomes += len(outcomes)
            if decision is None:
                self._missed(rejected_before)
            else:
                self.missed_in_a_row = 0
        starts: dict[int, Alloc] = {}
        under = correlation_id
        if decision is not None:
            starts = self._apply(decision, view)
            under = decision.correlation_id
        if decision is None or (not starts and decision.correlation_id != correlation_id):
            # no decision, or (accelerated) an earlier snapshot's that starts nothing here any more:
            # the simulator's own cycle in the base policy's order, so an idle cluster never stalls
            starts = dict(self.fallback.decide(view))
            under = correlation_id
        for j, a in starts.items():
            self.builder.started(j, a, view.now)
            self.started_under[j] = under
            self.start_s[j] = view.now
        return starts

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

    def _apply(self, decision: PlacementDecision, view: ClusterView) -> dict[int, Alloc]:
        """The decision's starts as allocations, for jobs still queued; in accelerated mode only
        those that still fit (a decision for an earlier snapshot)."""
        stats = self.stats
        stats.decisions_applied += 1
        stats.policies[decision.policy] = stats.policies.get(decision.policy, 0) + 1
        if decision.fallback:
            stats.fallbacks[decision.fallback] = stats.fallbacks.get(decision.fallback, 0) + 1
        queued = set(view.queued.tolist())
        check = copy.deepcopy(view.state) if self.mode == "accelerated" else None
        gpus_taken: dict[tuple[int, int], list[int]] = {}
        starts: dict[int, Alloc] = {}
        for p in decision.placements:
            j = self.index.get(p.job_id)
            if j is None or j not in queued:
                stats.unknown_jobs += j is None
                continue
            if not p.nodes:
                continue
            a = self._alloc(j, p, view.state, gpus_taken)
            if check is not None:
                if not alloc_fits(check, a, None, int(self.workload.jobs.gpu_milli[j])):
                    continue
                check.take(a)
            starts[j] = a
        return starts

    def _alloc(
        self, j: int, p: JobPlacement, state: ClusterState, gpus_taken: dict[tuple[int, int], list[int]]
    ) -> Alloc:
        """Job ``j``'s allocation as placement ``p`` states it: its per-node columns (schema version
        6), or for a single node the job's own request; physical GPUs as given, else the node's
        lowest free ones (a share: the fullest GPU that holds it, as best-fit picks)."""
        where = [self.node_at[name] for name in p.nodes]
        g = where[0][0]
        if any(k != g for k, _ in where):
            raise AdapterError(f"decision starts job {p.job_id!r} over several node groups: {p.nodes}")
        nodes = [i for _, i in where]
        jobs = self.workload.jobs
        milli = int(jobs.gpu_milli[j]) if int(jobs.gpus[j]) else WHOLE_GPU_MILLI
        share = milli < WHOLE_GPU_MILLI
        if p.node_gpus:
            whole, cpu, mem = list(p.node_gpus), list(p.node_cpus_milli), list(p.node_mem_mib)
        elif len(nodes) == 1:
            whole = [0 if share else int(jobs.gpus[j])]
            cpu, mem = [int(jobs.cpus_milli[j])], [int(jobs.mem_mib[j])]
        else:
            raise AdapterError(
                f"decision starts gang {p.job_id!r} without its per-node GPUs, CPUs and memory"
            )
        gs = state.groups[g]
        if gs.gfree is None:
            return Alloc(g, nodes, whole, cpu, mem)
        if share:
            frac = p.share_gpu
            if frac < 0:  # the fullest GPU that holds the share, as best-fit picks it
                row = gs.gfree[nodes[0]].tolist()
                room = [(v, k) for k, v in enumerate(row) if v >= milli]
                frac = min(room)[1] if room else 0
            return Alloc(g, nodes, whole, cpu, mem, None, frac, milli)
        masks = list(p.node_gpu_mask) if p.node_gpu_mask else [0] * len(nodes)
        ids: list[list[int]] = []
        for i, w, mask in zip(nodes, whole, masks, strict=True):
            if mask:
                ids.append(gpu_ids_of(mask))
                continue
            taken = gpus_taken.setdefault((g, i), [])
            free = [k for k, v in enumerate(gs.gfree[i].tolist()) if v == WHOLE_GPU_MILLI and k not in taken]
            ids.append(free[:w])
            taken.extend(free[:w])
        return Alloc(g, nodes, whole, cpu, mem, ids)

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
