"""``SimulatedCluster``: the simulated cluster as a cluster adapter (``ClusterAdapter``), at one event.

Why a class apart from ``PipelineDecider``: what the simulated cluster does is what every adapter
does (``shared.service.cluster_adapter``): observe the cluster as a snapshot with increasing
sequence numbers and the outcomes of jobs that ended, apply a decision (here: start the jobs it
places, on its nodes, with its per-node GPUs, CPUs and memory), report each outcome once, and hand
the jobs back to the cluster's own scheduler. ``PipelineDecider`` is only the lockstep (or
accelerated) loop that sends the observation to the pipeline and brings the decision back; the
contract tests (``tests/adapter_contract/``) drive this class directly, as they drive the Slurm
adapter.

The simulator's clock only moves between events (``shared.sim.applied.run_applied``), so the
adapter works on the event it was last shown (``at``): every operation describes or changes the
cluster at that moment, and the jobs it starts are handed to the simulator when the event ends
(``event_starts``). Observing again in the same event after a start sees that start.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.adapter_sim.errors import AdapterError
from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING, SnapshotBuilder
from services.adapter_sim.stats import AdapterStats
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray, IntArray
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import alloc_fits
from shared.scheduling.state import Alloc, ClusterState, gpu_ids_of
from shared.schemas import JobOutcome, PlacementDecision, QueueSnapshot, new_correlation_id
from shared.schemas.messages import JobPlacement
from shared.service.cluster_adapter import ClusterAdapter, DecisionGate, ReportedOnce, SnapshotSequence
from shared.sim.applied import ClusterView, SimulatorDecider
from shared.sim.config import SimConfig

__all__ = ["ProgressHook", "SimApplied", "SimObservation", "SimulatedCluster", "as_cluster_adapter"]

#: called after each finished job: (jobs finished, jobs in the run, simulated time)
ProgressHook = Callable[[int, int, float], None]


@dataclass(frozen=True)
class SimObservation:
    """The contract's observation, plus how many queued jobs ``max_pending`` left out."""

    snapshot: QueueSnapshot
    outcomes: list[JobOutcome]
    left_out: int = 0


@dataclass
class SimApplied:
    """The contract's applied decision: the jobs started (``starts``: job index -> allocation)."""

    starts: dict[int, Alloc] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stale: bool = False


class SimulatedCluster:
    """One bound workload replayed as cluster ``cluster``; see the module docstring.

    ``check_fit``: start only the placements that still fit the cluster (a decision for an earlier
    snapshot, accelerated mode); without it every placement is started and the simulator refuses
    one that does not fit (``RefusedStart``).
    """

    def __init__(
        self,
        workload: BoundWorkload,
        estimate: FloatArray,
        base: Policy,
        config: SimConfig,
        cluster: str,
        *,
        stats: AdapterStats | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
        job_id_prefix: str = "",
        first_sequence: int = 0,
        progress: ProgressHook | None = None,
        check_fit: bool = False,
    ) -> None:
        self.workload = workload
        self.cluster = cluster
        self.stats = stats or AdapterStats()
        self.check_fit = check_fit
        self.progress = progress
        self.sequence = SnapshotSequence(first_sequence)
        self.gate = DecisionGate(cluster)
        self.reported = ReportedOnce(max(1, len(workload.jobs)))
        #: the cluster's own scheduler: the simulator's cycle in the base policy's order
        self.own = SimulatorDecider(workload, base, config, estimate)
        self.builder = SnapshotBuilder(
            workload, estimate, cluster, max_pending=max_pending, job_id_prefix=job_id_prefix
        )
        self.index = {job_id: j for j, job_id in enumerate(self.builder.job_ids)}
        self.node_at = {
            name: (g, i) for g, names in enumerate(self.builder.names) for i, name in enumerate(names)
        }
        self.view: ClusterView | None = None
        #: jobs started at the current event (handed to the simulator when it ends)
        self.event_starts: dict[int, Alloc] = {}
        self.started_under: dict[int, str] = {}
        self.start_s: dict[int, float] = {}
        #: where each running job really runs (reported with its outcome)
        self.ran_on: dict[int, Alloc] = {}
        self.pending_outcomes: list[JobOutcome] = []
        self.finished = 0
        self.handed_back = False

    # -- the simulator's events ----------------------------------------------------------------

    def at(self, view: ClusterView) -> None:
        """The simulator reached an event with a queue: record the jobs that ended since the last."""
        self.view = view
        self.event_starts = {}
        self._ended(view.ended)

    def note_end(self, ended: Sequence[tuple[int, float]]) -> None:
        """Jobs that ended after the last event with a queue (the run's tail)."""
        self._ended(ended)

    def _ended(self, ended: Sequence[tuple[int, float]]) -> None:
        jobs = self.workload.jobs
        for j, when in ended:
            self.builder.ended(j)
            job_id = self.builder.job_ids[j]
            if not self.reported.add(job_id):
                continue
            self.pending_outcomes.append(
                JobOutcome(
                    cluster=self.cluster,
                    correlation_id=self.started_under.pop(j),
                    job_id=job_id,
                    submit_s=float(jobs.submit[j]),
                    start_s=self.start_s.pop(j),
                    end_s=when,
                    gpus=int(jobs.gpus[j]),
                    **self._where(self.ran_on.pop(j)),
                )
            )
            self.finished += 1
            if self.progress is not None:
                self.progress(self.finished, len(jobs), when)

    def _where(self, a: Alloc) -> dict[str, Any]:
        """Where a job ran, as its outcome reports it: the nodes of its allocation (whatever decided
        it: a decision, or the cluster's own cycle), the whole GPUs on each, the group's GPU type."""
        names = self.builder.names[a.group]
        return {
            "nodes": tuple(names[i] for i in a.nodes),
            "node_gpus": tuple(a.whole),
            "gpu_type": self.workload.spec.node_groups[a.group].gpu_type,
        }

    def _now(self) -> ClusterView:
        if self.view is None:
            raise AdapterError("the simulated cluster has not reached its first event yet")
        return self.view

    def _queued(self, view: ClusterView) -> IntArray:
        """The queue at this event, without the jobs started during it."""
        if not self.event_starts:
            return view.queued
        return np.asarray([j for j in view.queued.tolist() if j not in self.event_starts], dtype=np.int64)

    def _state(self, view: ClusterView) -> ClusterState:
        """The cluster's resources at this event, with the jobs started during it taken."""
        if not self.event_starts:
            return view.state
        state = copy.deepcopy(view.state)
        for a in self.event_starts.values():
            state.take(a)
        return state

    def _start(self, starts: dict[int, Alloc], correlation_id: str) -> None:
        now = self._now().now
        for j, a in starts.items():
            self.builder.started(j, a, now)
            self.started_under[j] = correlation_id
            self.start_s[j] = now
            self.event_starts[j] = a
            self.ran_on[j] = a

    # -- the contract --------------------------------------------------------------------------

    def observe(self) -> SimObservation:
        """The snapshot at this event (the next sequence number), and the outcomes since the last."""
        view = self._now()
        running = {j: r.alloc for j, r in view.running.items()}
        running.update(self.event_starts)
        snapshot, left_out = self.builder.build(
            self._state(view),
            running,
            self._queued(view),
            view.now,
            self.sequence.next(),
            new_correlation_id(),
        )
        stats = self.stats
        stats.snapshots += 1
        if left_out:
            stats.truncated_snapshots += 1
            stats.truncated_jobs += left_out
        return SimObservation(snapshot, self.outcomes(), left_out)

    def outcomes(self) -> list[JobOutcome]:
        """Outcomes not yet handed over (since the last observation, or the run's tail)."""
        outcomes, self.pending_outcomes = self.pending_outcomes, []
        return outcomes

    def apply(self, decision: PlacementDecision) -> SimApplied:
        """Start the jobs ``decision`` places that are still queued (with ``check_fit``, only those
        that still fit), on its nodes; a stale decision starts nothing."""
        view = self._now()
        if not self.gate.admit(decision):
            return SimApplied(stale=True)
        applied = self._starts_of(decision, view)
        self.gate.applied(decision)
        self._start(applied.starts, decision.correlation_id)
        return applied

    def own_cycle(self, correlation_id: str | None = None) -> dict[int, Alloc]:
        """The cluster's own scheduler decides this event: the simulator's cycle in the base
        policy's order (no decision came, or the jobs were handed back). Call it before any start
        of this event; its starts carry ``correlation_id`` (default: a new one) to their outcomes."""
        starts = dict(self.own.decide(self._now()))
        self._start(starts, correlation_id or new_correlation_id())
        return starts

    def hand_back(self) -> int:
        """From now on the cluster's own scheduler decides every event; returns the jobs queued."""
        self.handed_back = True
        return 0 if self.view is None else len(self._queued(self.view))

    # -- a decision's starts -------------------------------------------------------------------

    def _starts_of(self, decision: PlacementDecision, view: ClusterView) -> SimApplied:
        stats = self.stats
        stats.decisions_applied += 1
        stats.policies[decision.policy] = stats.policies.get(decision.policy, 0) + 1
        if decision.fallback:
            stats.fallbacks[decision.fallback] = stats.fallbacks.get(decision.fallback, 0) + 1
        queued = set(self._queued(view).tolist())
        state = self._state(view)
        check = copy.deepcopy(state) if self.check_fit else None
        gpus_taken: dict[tuple[int, int], list[int]] = {}
        out = SimApplied()
        for p in decision.placements:
            j = self.index.get(p.job_id)
            if j is None or j not in queued:
                stats.unknown_jobs += j is None
                out.skipped.append((p.job_id, "not a job of this cluster" if j is None else "not queued"))
                continue
            if not p.nodes:
                continue
            unknown = [name for name in p.nodes if name not in self.node_at]
            if unknown:
                out.skipped.append((p.job_id, f"unknown node(s) {', '.join(unknown)}"))
                continue
            a = self._alloc(j, p, state, gpus_taken)
            if check is not None:
                if not alloc_fits(check, a, None, int(self.workload.jobs.gpu_milli[j])):
                    out.skipped.append((p.job_id, "no longer fits"))
                    continue
                check.take(a)
            out.starts[j] = a
            out.applied.append(p.job_id)
        return out

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


def as_cluster_adapter(cluster: SimulatedCluster) -> ClusterAdapter[SimObservation, SimApplied]:
    """``cluster`` typed as the contract (so ``mypy --strict`` checks that the class implements it;
    the contract tests drive it through this type)."""
    return cluster
