"""Binding a workload to a cluster: default requests, eligible node groups, and exclusions.

A job that can never run on the chosen cluster (0 GPUs on a GPU-only cluster, more GPUs than any
eligible node group holds, an unknown GPU type, a CPU or memory request no node can satisfy) would
make a simulator wait forever or drain the cluster before dropping it (the reference code did the
latter and hid the drops from its metrics). Hylo decides this once, before simulating, and reports
every excluded job with its reason and count.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from shared.domain.cluster import ClusterSpec, NodeGroup
from shared.domain.exclusions import Exclusion
from shared.domain.jobs import WHOLE_GPU_MILLI, IntArray, JobTable

__all__ = ["BoundWorkload", "Exclusion", "bind_jobs", "fits_empty_group", "nodes_needed"]


@dataclass
class BoundWorkload:
    """Jobs ready for the simulator on one cluster.

    ``job_class[i]`` indexes ``class_groups``: the node groups job i may run on. ``shape[i]``
    identifies jobs with the same GPU request (count, share) and eligible groups; the scheduler
    uses it to skip re-checking requests that cannot fit in the current cycle.
    """

    spec: ClusterSpec
    jobs: JobTable
    job_class: IntArray
    class_groups: list[tuple[int, ...]]
    shape: IntArray
    exclusions: list[Exclusion] = field(default_factory=list)
    node_slack: int = 0

    @property
    def excluded_count(self) -> int:
        return sum(e.count for e in self.exclusions)

    def request(self, j: int) -> tuple[int, int, int, int, tuple[int, ...]]:
        """Job ``j``'s placement request as the placers take it: GPUs, milli-GPU share, milli-CPUs,
        MiB and eligible node groups (for code outside the simulator's hot loop)."""
        jobs = self.jobs
        return (
            int(jobs.gpus[j]),
            int(jobs.gpu_milli[j]),
            int(jobs.cpus_milli[j]),
            int(jobs.mem_mib[j]),
            self.class_groups[int(self.job_class[j])],
        )


def nodes_needed(gpus: int, gpus_per_node: int) -> int:
    """Fewest nodes of a group that can hold a gang of ``gpus`` whole GPUs."""
    if gpus <= 0:
        return 1
    return math.ceil(gpus / gpus_per_node) if gpus_per_node > 0 else 10**9


def _fill_requests(jobs: JobTable, spec: ClusterSpec) -> tuple[IntArray, IntArray]:
    d = spec.defaults
    demand = jobs.gpu_demand
    cpu_only = jobs.gpus == 0
    cpu_default = np.where(cpu_only, d.cpus_cpu_only * 1000, np.ceil(demand * d.cpus_per_gpu * 1000)).astype(
        np.int64
    )
    mem_default = np.where(
        cpu_only, d.mem_gib_cpu_only * 1024, np.ceil(demand * d.mem_gib_per_gpu * 1024)
    ).astype(np.int64)
    cpus = np.where(jobs.cpus_milli < 0, cpu_default, jobs.cpus_milli)
    mem = np.where(jobs.mem_mib < 0, mem_default, jobs.mem_mib)
    return cpus, mem


def fits_empty_group(g: NodeGroup, gpus: int, milli: int, cpus: int, mem: int, node_slack: int) -> bool:
    if gpus == 0:
        return cpus <= g.cpus_milli and mem <= g.mem_mib
    if g.gpus == 0:
        return False
    if milli < WHOLE_GPU_MILLI or gpus <= g.gpus:
        if cpus <= g.cpus_milli and mem <= g.mem_mib:
            return True
        if milli < WHOLE_GPU_MILLI:
            return False
    # a gang over several nodes: each node carries its share of the CPU and memory request
    need = nodes_needed(gpus, g.gpus)
    if need > g.count:
        return False
    max_nodes = min(need + node_slack, g.count)
    per_node_gpus = math.ceil(gpus / max_nodes)
    cpu_share = math.ceil(cpus * per_node_gpus / gpus)
    mem_share = math.ceil(mem * per_node_gpus / gpus)
    return per_node_gpus <= g.gpus and cpu_share <= g.cpus_milli and mem_share <= g.mem_mib


def _classify(
    spec: ClusterSpec, jobs: JobTable, i: int, gpus: int, milli: int, cpus: int, mem: int, slack: int
) -> tuple[tuple[int, ...], str]:
    """Eligible groups of one job, or the reason why there are none."""
    if gpus == 0 and spec.cpu_only_jobs == "exclude":
        return (), "requests 0 GPUs (this cluster spec runs GPU jobs only: cpu_only_jobs = 'exclude')"
    allowed = jobs.type_sets[int(jobs.type_set[i])]
    vc = jobs.vcs[int(jobs.vc[i])]
    typed = [k for k, g in enumerate(spec.node_groups) if gpus == 0 or not allowed or g.gpu_type in allowed]
    if not typed:
        return (), f"allowed GPU types {'|'.join(allowed)} not in cluster ({', '.join(spec.gpu_types)})"
    in_vc = [k for k in typed if not spec.node_groups[k].partitions or vc in spec.node_groups[k].partitions]
    if not in_vc:
        return (), f"partition/VC {vc!r} has no node of an allowed GPU type"
    fitting = tuple(k for k in in_vc if fits_empty_group(spec.node_groups[k], gpus, milli, cpus, mem, slack))
    if fitting:
        return fitting, ""
    biggest = max(spec.node_groups[k].count * spec.node_groups[k].gpus for k in in_vc)
    if gpus > biggest:
        return (), "requests more GPUs than any eligible node group holds"
    return (), "CPU/memory request or gang size does not fit any eligible node group"


def bind_jobs(jobs: JobTable, spec: ClusterSpec, node_slack: int = 0) -> BoundWorkload:
    """Fill default CPU/memory requests, find each job's node groups, exclude what cannot run."""
    if node_slack < 0:
        raise ValueError("node_slack must be >= 0")
    cpus, mem = _fill_requests(jobs, spec)
    # jobs with identical requests and constraints share one classification
    keys = np.stack([jobs.gpus, jobs.gpu_milli, cpus, mem, jobs.type_set, jobs.vc], axis=1)
    uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    class_of_key: list[int] = []
    class_groups: list[tuple[int, ...]] = []
    class_index: dict[tuple[int, ...], int] = {}
    reason_of_key: list[str] = []
    for k, row in enumerate(uniq):
        groups, reason = _classify(
            spec, jobs, int(first[k]), int(row[0]), int(row[1]), int(row[2]), int(row[3]), node_slack
        )
        reason_of_key.append(reason)
        if not groups:
            class_of_key.append(-1)
            continue
        if groups not in class_index:
            class_index[groups] = len(class_groups)
            class_groups.append(groups)
        class_of_key.append(class_index[groups])
    key_class = np.asarray(class_of_key, dtype=np.int64)
    job_class = key_class[inverse]
    keep = job_class >= 0

    exclusions: list[Exclusion] = []
    by_reason: dict[str, list[int]] = defaultdict(list)
    for i in np.flatnonzero(~keep):
        by_reason[reason_of_key[inverse[i]]].append(int(i))
    for reason, rows in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        exclusions.append(
            Exclusion(
                reason=reason,
                count=len(rows),
                example_ids=[str(jobs.ids[r]) for r in rows[:3]],
                submit_s=tuple(jobs.submit[rows].tolist()),  # so a window can count its own
            )
        )

    kept = jobs.with_fields(cpus_milli=cpus, mem_mib=mem).take(np.flatnonzero(keep))
    kept_class = job_class[keep]
    shape_keys = np.stack([kept.gpus, kept.gpu_milli, kept_class], axis=1)
    _, shape = np.unique(shape_keys, axis=0, return_inverse=True)
    shape = shape.reshape(-1).astype(np.int64)
    return BoundWorkload(
        spec=spec,
        jobs=kept,
        job_class=kept_class,
        class_groups=class_groups,
        shape=shape,
        exclusions=exclusions,
        node_slack=node_slack,
    )
