"""Slurm's jobs and nodes -> a QueueSnapshot of the cluster spec's node groups.

Node group of a node (first rule that answers):
1. ``HYLO_SLURM_NODE_GROUPS`` (``{"gpu-a17": "p100-4gpu"}``), for sites whose names say nothing;
2. a Slurm node feature equal to a group name (``Feature=p100-4gpu`` in slurm.conf; what
   ``deploy/slurm-dev/up`` writes);
3. the one group whose GPU type equals the node's GRES type (case-insensitive: Slurm's ``p100`` is
   the spec's ``P100``) and whose GPUs per node equal the node's.
A node no rule places is left out of the snapshot with a warning (the views would reject it), and
running jobs keep only their known nodes.

Which jobs: pending jobs Hylo manages (a managed partition, a QOS not excluded, not held: giving a
held job a priority would release it), oldest first up to ``max_pending``; every running job (they
hold resources whoever manages them). GPU types are mapped to the spec's spelling the same way, so
the featurizer's eligibility rules see ``P100``; an unknown type passes through unchanged and the
views exclude the job with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.adapter_slurm.model import PENDING_STATES, RUNNING_STATES, SlurmJob, SlurmNode
from shared.domain.cluster import ClusterSpec, NodeGroup
from shared.schemas import (
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
)
from shared.schemas.snapshot import WHOLE

log = logging.getLogger(__name__)

DRAIN_STATES = frozenset({"DRAIN", "DRAINED", "DRAINING", "MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED"})
DOWN_STATES = frozenset(
    {
        "DOWN",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "INVAL",
        "UNKNOWN",
        "FUTURE",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
    }
)


class NodeGroupError(ValueError):
    """The node-group configuration contradicts the cluster spec."""


class GroupResolver:
    """Node name -> node group of the spec, by the rules of the module docstring."""

    def __init__(self, spec: ClusterSpec, explicit: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.groups = {g.name: g for g in spec.node_groups}
        self.explicit = dict(explicit or {})
        for node, group in self.explicit.items():
            if group not in self.groups:
                raise NodeGroupError(
                    f"HYLO_SLURM_NODE_GROUPS maps node {node!r} to group {group!r}, which spec "
                    f"{spec.name!r} lacks (groups: {', '.join(self.groups)})"
                )
        self._types = {g.gpu_type.lower(): g.gpu_type for g in spec.node_groups}

    def gpu_type(self, slurm_type: str) -> str:
        """The spec's spelling of a Slurm GRES type (``p100`` -> ``P100``); unknown types unchanged."""
        return self._types.get(slurm_type.lower(), slurm_type)

    def group_of(self, node: SlurmNode) -> NodeGroup | None:
        if node.name in self.explicit:
            return self.groups[self.explicit[node.name]]
        for feature in node.features:
            if feature in self.groups:
                return self.groups[feature]
        types = {t.lower() for t in node.gpu_types}
        matches = [g for g in self.spec.node_groups if g.gpu_type.lower() in types and g.gpus == node.gpus]
        return matches[0] if len(matches) == 1 else None


@dataclass(frozen=True)
class JobFilter:
    """Which pending jobs Hylo manages: partitions (empty = all) and QOS left to Slurm."""

    partitions: frozenset[str] = frozenset()
    excluded_qos: frozenset[str] = frozenset()

    def managed(self, job: SlurmJob) -> bool:
        return self.why_not(job) is None

    def why_not(self, job: SlurmJob) -> str | None:
        """None if Hylo manages the job, else the reason it is left to Slurm."""
        if self.partitions and not (set(job.partition.split(",")) & self.partitions):
            return f"partition {job.partition!r} is not managed"
        if job.qos and job.qos in self.excluded_qos:
            return f"QOS {job.qos!r} is excluded"
        return None


def _node_state(node: SlurmNode) -> str:
    flags = set(node.states)
    if flags & DOWN_STATES:
        return "down"
    if flags & DRAIN_STATES:
        return "drain"
    return "up"


def node_state(node: SlurmNode, group: NodeGroup) -> NodeState:
    """Free resources of a node, capped at its group's capacity (the spec is the truth for that)."""
    free_gpus = min(max(0, node.gpus - node.gpus_used), group.gpus)
    return NodeState(
        name=node.name,
        group=group.name,
        free_gpus=free_gpus,
        free_share_milli=WHOLE if free_gpus > 0 else 0,
        free_cpus_milli=min(max(0, node.cpus - node.alloc_cpus) * 1000, group.cpus_milli),
        free_mem_mib=min(max(0, node.mem_mib - node.alloc_mem_mib), group.mem_mib),
        state=_node_state(node),  # type: ignore[arg-type]
    )


def pending_job(job: SlurmJob, resolver: GroupResolver, default_runtime_s: float) -> PendingJob:
    return PendingJob(
        job_id=job.job_id,
        submit_s=job.submit_s,
        gpus=job.gpus,
        gpu_types=tuple(sorted({resolver.gpu_type(t) for t in job.gpu_types})),
        cpus_milli=job.cpus * 1000 if job.cpus else -1,
        mem_mib=job.mem_mib if job.mem_mib else -1,
        est_runtime_s=job.time_limit_s if job.time_limit_s else default_runtime_s,
        user=job.user or "unknown",
        partition=job.partition.split(",")[0] or "default",
        qos=job.qos or "normal",
    )


def running_job(job: SlurmJob, known: set[str], now: float, default_runtime_s: float) -> RunningJob | None:
    nodes = tuple(n for n in job.nodes if n in known)
    if not nodes:
        return None
    start = job.start_s if job.start_s is not None else now
    limit = job.time_limit_s if job.time_limit_s else default_runtime_s
    end = job.end_s if job.end_s is not None and job.end_s >= start else start + limit
    return RunningJob(job_id=job.job_id, nodes=nodes, gpus=job.gpus, start_s=start, est_end_s=end)


def build_snapshot(
    *,
    cluster: str,
    correlation_id: str,
    now: float,
    sequence: int,
    jobs: Iterable[SlurmJob],
    nodes: Iterable[SlurmNode],
    resolver: GroupResolver,
    jobs_filter: JobFilter,
    default_runtime_s: float,
    max_pending: int,
) -> QueueSnapshot:
    """The snapshot of one poll (see the module docstring for which jobs and nodes it holds)."""
    states: list[NodeState] = []
    for node in nodes:
        group = resolver.group_of(node)
        if group is None:
            log.warning(
                "node %r (GRES %s x%d, features %s) matches no node group of spec %r: left out",
                node.name,
                ",".join(node.gpu_types) or "-",
                node.gpus,
                ",".join(node.features) or "-",
                resolver.spec.name,
            )
            continue
        states.append(node_state(node, group))
    if not states:
        raise ValueError(
            f"no node of the cluster matches a node group of spec {resolver.spec.name!r}: "
            "a snapshot needs at least one of its nodes"
        )
    known = {s.name for s in states}
    job_list = list(jobs)
    waiting = sorted(
        (j for j in job_list if j.state in PENDING_STATES and not j.held and jobs_filter.managed(j)),
        key=lambda j: (j.submit_s, j.job_id),
    )
    if len(waiting) > max_pending:
        log.warning("%d pending jobs, snapshot holds the oldest %d", len(waiting), max_pending)
        waiting = waiting[:max_pending]
    pending = [pending_job(j, resolver, default_runtime_s) for j in waiting]
    running = []
    for j in job_list:
        if j.state in RUNNING_STATES and j.nodes:
            r = running_job(j, known, now, default_runtime_s)
            if r is not None:
                running.append(r)
    return QueueSnapshot(
        cluster=cluster,
        correlation_id=correlation_id,
        time=now,
        sequence=sequence,
        pending=PendingJobs.of(pending),
        running=RunningJobs.of(running),
        nodes=NodeStates.of(states),
    )
