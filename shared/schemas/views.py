"""QueueSnapshot -> the featurizer's QueueView and ClusterView, given the cluster spec.

Why here and pure: the production featurizer must feed ``compute_features`` numbers defined exactly as
the simulator's (``docs/features.md``, "In production"), so the rules of ``shared.sim.binding`` are
reused: default CPU/memory requests from the spec, eligible node groups = allowed GPU type, partition,
and a fit on an empty node of the group. A job no group can ever hold is excluded with its reason
(the simulator excludes it before simulating). No I/O, no clock: the same snapshot always gives the
same arrays.

Nodes: the spec's groups are the truth for capacities. A snapshot may omit nodes of a group (not yet
reported); those count as having nothing free. A node of an unknown group, more nodes than the spec
lists, or free resources above capacity are errors naming the node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shared.domain.cluster import ClusterSpec, NodeGroup
from shared.features.views import ClusterView, QueueView
from shared.schemas.messages import ExcludedJob
from shared.schemas.snapshot import WHOLE, NodeState, PendingJob, QueueSnapshot
from shared.sim.binding import fits_empty_group

__all__ = ["SnapshotViews", "snapshot_views"]


@dataclass(frozen=True)
class SnapshotViews:
    """The arrays of one snapshot: ``queue`` rows follow ``job_ids``; ``excluded`` jobs are left out."""

    queue: QueueView
    cluster: ClusterView
    now: float
    job_ids: tuple[str, ...]
    excluded: tuple[ExcludedJob, ...]
    vc_names: tuple[str, ...]
    user_names: tuple[str, ...]


def _requests(job: PendingJob, spec: ClusterSpec) -> tuple[int, int]:
    d = spec.defaults
    demand = job.gpus * job.gpu_milli / WHOLE
    if job.gpus == 0:
        cpu_default, mem_default = round(d.cpus_cpu_only * 1000), round(d.mem_gib_cpu_only * 1024)
    else:
        cpu_default = math.ceil(demand * d.cpus_per_gpu * 1000)
        mem_default = math.ceil(demand * d.mem_gib_per_gpu * 1024)
    cpus = cpu_default if job.cpus_milli < 0 else job.cpus_milli
    mem = mem_default if job.mem_mib < 0 else job.mem_mib
    return cpus, mem


def _eligible(
    spec: ClusterSpec, job: PendingJob, cpus: int, mem: int, node_slack: int
) -> tuple[tuple[int, ...], str]:
    """Node groups the job may run on, or the reason there are none (binding's rules)."""
    if job.gpus == 0 and spec.cpu_only_jobs == "exclude":
        return (), "requests 0 GPUs (this cluster spec runs GPU jobs only: cpu_only_jobs = 'exclude')"
    groups = spec.node_groups
    allowed = set(job.gpu_types)
    typed = [k for k, g in enumerate(groups) if job.gpus == 0 or not allowed or g.gpu_type in allowed]
    if not typed:
        return (
            (),
            f"allowed GPU types {'|'.join(sorted(allowed))} not in cluster ({', '.join(spec.gpu_types)})",
        )
    in_vc = [k for k in typed if not groups[k].partitions or job.partition in groups[k].partitions]
    if not in_vc:
        return (), f"partition/VC {job.partition!r} has no node of an allowed GPU type"
    fitting = tuple(
        k for k in in_vc if fits_empty_group(groups[k], job.gpus, job.gpu_milli, cpus, mem, node_slack)
    )
    if fitting:
        return fitting, ""
    return (), "CPU/memory request or gang size does not fit any eligible node group"


def _node_arrays(spec: ClusterSpec, nodes: tuple[NodeState, ...]) -> tuple[dict[str, int], list[list[int]]]:
    """Per-node free arrays (group 0's nodes first) and each reported node's group index."""
    index = {g.name: k for k, g in enumerate(spec.node_groups)}
    by_group: list[list[NodeState]] = [[] for _ in spec.node_groups]
    for node in nodes:
        k = index.get(node.group)
        if k is None:
            raise ValueError(f"node {node.name!r} is in group {node.group!r}, which the cluster spec lacks")
        by_group[k].append(node)
    group_of: dict[str, int] = {}
    free: list[list[int]] = [[], [], [], []]  # gpus, share, cpus, mem
    for k, (g, members) in enumerate(zip(spec.node_groups, by_group, strict=True)):
        if len(members) > g.count:
            raise ValueError(
                f"snapshot reports {len(members)} nodes in group {g.name!r}, the spec has {g.count}"
            )
        for node in members:
            group_of[node.name] = k
            _check_capacity(node, g)
            up = node.state == "up"
            free[0].append(node.free_gpus if up else 0)
            free[1].append(node.free_share_milli if up else 0)
            free[2].append(node.free_cpus_milli if up else 0)
            free[3].append(node.free_mem_mib if up else 0)
        for col in free:  # nodes not reported: nothing free
            col.extend([0] * (g.count - len(members)))
    return group_of, free


def _check_capacity(node: NodeState, g: NodeGroup) -> None:
    for name, value, cap in (
        ("free_gpus", node.free_gpus, g.gpus),
        ("free_cpus_milli", node.free_cpus_milli, g.cpus_milli),
        ("free_mem_mib", node.free_mem_mib, g.mem_mib),
        ("free_share_milli", node.free_share_milli, WHOLE if g.gpus else 0),
    ):
        if value > cap:
            raise ValueError(f"node {node.name!r}: {name} {value} exceeds its group's capacity {cap}")
    if node.free_gpus > 0 and node.free_share_milli != WHOLE:
        raise ValueError(
            f"node {node.name!r}: a node with a free whole GPU must report free_share_milli 1000"
        )


def _codes(names: list[str], seed: list[str]) -> tuple[list[int], tuple[str, ...]]:
    table = {n: i for i, n in enumerate(seed)}
    for n in names:
        table.setdefault(n, len(table))
    return [table[n] for n in names], tuple(table)


def snapshot_views(snapshot: QueueSnapshot, spec: ClusterSpec, node_slack: int = 0) -> SnapshotViews:
    """Build the featurizer's views of ``snapshot`` on ``spec``; raises ValueError naming what is wrong."""
    if node_slack < 0:
        raise ValueError("node_slack must be >= 0")
    group_of, free = _node_arrays(spec, snapshot.nodes)
    kept: list[PendingJob] = []
    rows: list[tuple[int, int, tuple[int, ...]]] = []
    excluded: list[ExcludedJob] = []
    cache: dict[tuple[object, ...], tuple[tuple[int, ...], str]] = {}
    for job in snapshot.pending:
        cpus, mem = _requests(job, spec)
        key = (job.gpus, job.gpu_milli, cpus, mem, frozenset(job.gpu_types), job.partition)
        found = cache.get(key)
        if found is None:
            found = cache[key] = _eligible(spec, job, cpus, mem, node_slack)
        groups, reason = found
        if not groups:
            excluded.append(ExcludedJob(job_id=job.job_id, reason=reason))
            continue
        kept.append(job)
        rows.append((cpus, mem, groups))

    n_groups = len(spec.node_groups)
    eligible = np.zeros((len(kept), n_groups), dtype=bool)
    for i, (_, _, groups) in enumerate(rows):
        eligible[i, list(groups)] = True
    spec_vcs = sorted({p for g in spec.node_groups for p in g.partitions} | set(spec.partitions))
    vc, vc_names = _codes([j.partition for j in kept], spec_vcs)
    user, user_names = _codes([j.user for j in kept], [])
    queue = QueueView(
        gpus=np.array([j.gpus for j in kept], dtype=np.int64),
        gpu_milli=np.array([j.gpu_milli for j in kept], dtype=np.int64),
        cpus_milli=np.array([r[0] for r in rows], dtype=np.int64),
        mem_mib=np.array([r[1] for r in rows], dtype=np.int64),
        est_runtime_s=np.array([j.est_runtime_s for j in kept], dtype=np.float64),
        submit_s=np.array([j.submit_s for j in kept], dtype=np.float64),
        user=np.array(user, dtype=np.int64),
        vc=np.array(vc, dtype=np.int64),
        eligible=eligible.reshape(len(kept), n_groups),
        n_vcs=max(1, len(vc_names)),
    )
    running = snapshot.running
    cluster = ClusterView(
        gpu_type=np.array([spec.gpu_types.index(g.gpu_type) for g in spec.node_groups], dtype=np.int64),
        gpus_per_node=np.array([g.gpus for g in spec.node_groups], dtype=np.int64),
        node_count=np.array([g.count for g in spec.node_groups], dtype=np.int64),
        cpus_per_node_milli=np.array([g.cpus_milli for g in spec.node_groups], dtype=np.int64),
        mem_per_node_mib=np.array([g.mem_mib for g in spec.node_groups], dtype=np.int64),
        free_gpus=np.array(free[0], dtype=np.int64),
        free_share_milli=np.array(free[1], dtype=np.int64),
        free_cpus_milli=np.array(free[2], dtype=np.int64),
        free_mem_mib=np.array(free[3], dtype=np.int64),
        run_group=np.array([group_of[r.nodes[0]] for r in running], dtype=np.int64),
        run_gpus=np.array([r.gpus * r.gpu_milli / WHOLE for r in running], dtype=np.float64),
        run_end_s=np.array([r.est_end_s for r in running], dtype=np.float64),
        node_slack=node_slack,
        gpu_type_names=spec.gpu_types,
    )
    return SnapshotViews(
        queue=queue,
        cluster=cluster,
        now=snapshot.time,
        job_ids=tuple(j.job_id for j in kept),
        excluded=tuple(excluded),
        vc_names=vc_names,
        user_names=user_names,
    )
