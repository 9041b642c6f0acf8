"""Hand-made clusters and snapshots for the stage tests, and a validity check for placements."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.placement import alloc_fits
from shared.scheduling.state import Alloc, ClusterState
from shared.schemas import (
    FeatureMatrix,
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    PriorityVector,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
)
from tests.stages.snapshot_state import snapshot_state


def two_group_spec(cpu_only: str = "exclude", partitions_a: Sequence[str] = ()) -> ClusterSpec:
    """Group ``a``: 2 nodes x 4 A GPUs, 32 CPUs, 128 GiB; group ``b``: 1 node x 8 B GPUs, 64 CPUs, 256 GiB."""
    return parse_cluster_spec(
        {
            "name": "two",
            "cpu_only_jobs": cpu_only,
            "node_groups": [
                {
                    "name": "a",
                    "gpu_type": "A",
                    "count": 2,
                    "gpus": 4,
                    "cpus": 32,
                    "mem_gib": 128,
                    "partitions": list(partitions_a),
                },
                {"name": "b", "gpu_type": "B", "count": 1, "gpus": 8, "cpus": 64, "mem_gib": 256},
            ],
        },
        "tests",
    )


FULL = {"a": (4, 32000, 131072), "b": (8, 64000, 262144)}


def node(
    name: str,
    group: str,
    gpus: int | None = None,
    cpus: int | None = None,
    mem: int | None = None,
    share: int | None = None,
    state: str = "up",
) -> NodeState:
    """A node of ``two_group_spec``; omitted free resources default to the whole node."""
    g, c, m = FULL[group]
    gpus = g if gpus is None else gpus
    return NodeState(
        name=name,
        group=group,
        free_gpus=gpus,
        free_share_milli=share if share is not None else (1000 if gpus else 0),
        free_cpus_milli=c if cpus is None else cpus,
        free_mem_mib=m if mem is None else mem,
        state=state,  # type: ignore[arg-type]
    )


def pend(job_id: str, gpus: int, submit: float = 0.0, est: float = 600.0, **kw: Any) -> PendingJob:
    values: dict[str, Any] = {"job_id": job_id, "submit_s": submit, "gpus": gpus, "est_runtime_s": est}
    values.update(kw)
    return PendingJob.model_validate(values)


def run(
    job_id: str, nodes: Sequence[str], gpus: int, end: float, start: float = 0.0, milli: int = 1000
) -> RunningJob:
    return RunningJob(
        job_id=job_id, nodes=tuple(nodes), gpus=gpus, gpu_milli=milli, start_s=start, est_end_s=end
    )


def snap(
    pending: Sequence[PendingJob],
    nodes: Sequence[NodeState],
    running: Sequence[RunningJob] = (),
    time: float = 100.0,
    cluster: str = "two",
    correlation_id: str = "c1",
) -> QueueSnapshot:
    return QueueSnapshot(
        cluster=cluster,
        correlation_id=correlation_id,
        time=time,
        sequence=7,
        pending=PendingJobs.of(pending),
        running=RunningJobs.of(running),
        nodes=NodeStates.of(nodes),
    )


def vector(matrix: FeatureMatrix, priorities: Sequence[float], policy: str = "fcfs") -> PriorityVector:
    return PriorityVector(
        cluster=matrix.cluster,
        correlation_id=matrix.correlation_id,
        matrix=matrix,
        priorities=tuple(float(p) for p in priorities),
        policy=policy,
        latencies_ms=dict(matrix.latencies_ms),
    )


def on_these_gpus(st: ClusterState, a: Alloc) -> Alloc:
    """``a`` on the physical GPUs of ``st`` (which GPU of a node is which is the state's own
    numbering): its whole GPUs on the node's lowest free ones, a share on the fullest GPU that holds
    it (or on GPU 0 when none does, so that the fit test fails)."""
    gs = st.groups[a.group]
    if gs.gfree is None:
        return a
    if a.milli:
        row = gs.gfree[a.nodes[0]].tolist()
        room = [(v, k) for k, v in enumerate(row) if v >= a.milli]
        frac = min(room)[1] if room else 0
        return Alloc(a.group, list(a.nodes), list(a.whole), list(a.cpu), list(a.mem), None, frac, a.milli)
    ids = [
        [k for k, v in enumerate(gs.gfree[i].tolist()) if v == WHOLE_GPU_MILLI][:w]
        for i, w in zip(a.nodes, a.whole, strict=True)
    ]
    return Alloc(a.group, list(a.nodes), list(a.whole), list(a.cpu), list(a.mem), ids)


def check_allocations(
    snapshot: QueueSnapshot,
    spec: ClusterSpec,
    allocs: Sequence[tuple[PendingJob, Alloc]],
    node_slack: int = 0,
    state: ClusterState | None = None,
) -> None:
    """Every allocation fits the snapshot's free resources given the earlier ones, and has its job's shape.

    Replays the allocations (in order) on a fresh state of the snapshot, or on a copy of ``state``
    (the cluster's true state, where the snapshot came from a simulated one); raises AssertionError.
    """
    from shared.schemas.views import bind_pending

    track = set(range(len(spec.node_groups)))
    ss = snapshot_state(snapshot, spec, track)
    st = ss.state
    if state is not None:
        st = copy.deepcopy(state)
    jobs = PendingJobs.of(j for j, _ in allocs)
    binding = bind_pending(jobs, spec, node_slack)
    groups = dict(zip(binding.kept, binding.groups, strict=True))
    cpus = dict(zip(binding.kept, binding.cpus_milli, strict=True))
    mems = dict(zip(binding.kept, binding.mem_mib, strict=True))
    for k, (job, a) in enumerate(allocs):
        assert k in groups, f"{job.job_id} is not placeable on this spec"
        assert a.group in groups[k], f"{job.job_id} placed in group {a.group}, not one of {groups[k]}"
        assert all(ss.usable[a.group][i] for i in a.nodes), f"{job.job_id} on an unusable node"
        assert sum(a.cpu) == cpus[k] and sum(a.mem) == mems[k], f"{job.job_id}: CPU/memory not its request"
        g = spec.node_groups[a.group]
        if job.gpu_milli < 1000:
            assert a.frac_gpu >= 0 and a.milli == job.gpu_milli and len(a.nodes) == 1
        elif job.gpus:
            assert sum(a.whole) == job.gpus, f"{job.job_id}: {sum(a.whole)} GPUs, asked {job.gpus}"
            need = -(-job.gpus // g.gpus)
            assert len(a.nodes) <= need + node_slack, f"{job.job_id}: on {len(a.nodes)} nodes"
        a = on_these_gpus(st, a)
        assert alloc_fits(st, a, None, job.gpu_milli), f"{job.job_id}: does not fit what is left"
        st.take(a)
    st.check_invariants(spec)
