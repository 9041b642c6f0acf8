"""Snapshots of simulated clusters: the simulator's state and queue written as a QueueSnapshot.

Used by the consistency tests (production features and priorities against the simulator path, on
the same jobs and cluster) and by the stage benchmarks. Node ``i`` of group ``k`` is named
``"<group name>-<i>"`` and reported in index order, so the snapshot's node order within a group is
the simulator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.policies.base import Policy, PolicyContext
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import make_placer
from shared.scheduling.state import Alloc, ClusterState
from shared.schemas import (
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
)
from shared.schemas.snapshot_cluster import allocation_fields


def node_name(workload: BoundWorkload, group: int, index: int) -> str:
    return f"{workload.spec.node_groups[group].name}-{index}"


def frac_groups(workload: BoundWorkload) -> set[int]:
    """Node groups where some fractional job may run (the simulator tracks GPU shares there)."""
    jobs = workload.jobs
    return {
        g
        for c in np.unique(workload.job_class[jobs.gpu_milli < WHOLE_GPU_MILLI])
        for g in workload.class_groups[int(c)]
    }


@dataclass
class SimCluster:
    """A simulated cluster state with its running jobs (index into workload.jobs -> allocation)."""

    workload: BoundWorkload
    state: ClusterState
    allocs: dict[int, Alloc]
    start: dict[int, float]
    estimate: np.ndarray

    def est_end(self, j: int) -> float:
        return self.start[j] + float(self.estimate[j])


def fill_cluster(
    workload: BoundWorkload,
    running: Sequence[int],
    start: Mapping[int, float] | float = 0.0,
    estimate: np.ndarray | None = None,
) -> SimCluster:
    """Start ``running`` jobs with the simulator's best-fit placer, in order (those that fit)."""
    est = np.asarray(workload.jobs.estimate if estimate is None else estimate, dtype=np.float64)
    est = np.nan_to_num(est, nan=3600.0)
    state = ClusterState(workload.spec, frac_groups(workload))
    placer = make_placer("best-fit")
    allocs: dict[int, Alloc] = {}
    starts: dict[int, float] = {}
    for j in running:
        a = placer.place(state, *workload.request(j), None, workload.node_slack)
        if a is None:
            continue
        state.take(a)
        allocs[int(j)] = a
        starts[int(j)] = float(start[j] if isinstance(start, Mapping) else start)
    return SimCluster(workload, state, allocs, starts, est)


def simulator_order(policy: Policy, sim: SimCluster, queued: np.ndarray, now: float) -> list[str]:
    """The ids of ``queued`` in the order ``policy`` gives them in the simulator, on ``sim``'s
    cluster (bound, attached to the running jobs and told of their starts): what a service stage
    must reproduce from the snapshot of the same moment."""
    workload = sim.workload
    policy.bind(
        PolicyContext(workload=workload, estimate=sim.estimate, capacity_gpus=workload.spec.total_gpus)
    )
    policy.attach(sim.state, sim.allocs)  # type: ignore[attr-defined]
    for j in sim.allocs:
        policy.on_start(j, sim.start[j])  # type: ignore[attr-defined]
    keys = policy.keys(queued, now)
    return [str(workload.jobs.ids[queued[k]]) for k in np.lexsort((np.arange(len(queued)), keys))]


def pending_job(workload: BoundWorkload, j: int, estimate: np.ndarray) -> PendingJob:
    jobs = workload.jobs
    return PendingJob(
        job_id=str(jobs.ids[j]),
        submit_s=float(jobs.submit[j]),
        gpus=int(jobs.gpus[j]),
        gpu_milli=int(jobs.gpu_milli[j]),
        gpu_types=tuple(jobs.type_sets[int(jobs.type_set[j])]),
        cpus_milli=int(jobs.cpus_milli[j]),
        mem_mib=int(jobs.mem_mib[j]),
        est_runtime_s=float(estimate[j]),
        user=jobs.users[int(jobs.user[j])],
        partition=jobs.vcs[int(jobs.vc[j])],
        qos=jobs.qoses[int(jobs.qos[j])],
    )


def snapshot_of(
    sim: SimCluster,
    queued: Sequence[int],
    now: float,
    cluster: str | None = None,
    correlation_id: str = "sim",
    sequence: int = 1,
    allocations: bool = True,
) -> QueueSnapshot:
    """The QueueSnapshot an adapter would report for this simulated state and queue; with
    ``allocations`` the running jobs' exact per-node allocations (schema version 6)."""
    w = sim.workload
    nodes = []
    for k, (g, gs) in enumerate(zip(w.spec.node_groups, sim.state.groups, strict=True)):
        for i in range(gs.n):
            whole = int(gs.whole[i])
            share = int(gs.maxfrac[i]) if gs.maxfrac is not None else (WHOLE_GPU_MILLI if whole > 0 else 0)
            nodes.append(
                NodeState(
                    name=node_name(w, k, i),
                    group=g.name,
                    free_gpus=whole,
                    free_share_milli=share,
                    free_cpus_milli=int(gs.cpu[i]),
                    free_mem_mib=int(gs.mem[i]),
                )
            )
    jobs = w.jobs
    running = tuple(
        RunningJob(
            job_id=str(jobs.ids[j]),
            nodes=tuple(node_name(w, a.group, i) for i in a.nodes),
            gpus=int(jobs.gpus[j]),
            gpu_milli=int(jobs.gpu_milli[j]),
            start_s=sim.start[j],
            est_end_s=sim.est_end(j),
            **(allocation_fields(a) if allocations else {}),
        )
        for j, a in sim.allocs.items()
    )
    return QueueSnapshot(
        cluster=cluster or w.spec.name,
        correlation_id=correlation_id,
        time=float(now),
        sequence=sequence,
        pending=PendingJobs.of(pending_job(w, int(j), sim.estimate) for j in queued),
        running=RunningJobs.of(running),
        nodes=NodeStates.of(nodes),
    )
