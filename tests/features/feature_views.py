"""Builders of small hand-made views for the feature tests (imported by the test modules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.features import ClusterView, QueueView


def cluster_view(
    groups: Sequence[tuple[int, int, int, int]],
    free: Sequence[tuple[int, int, int]],
    running: Sequence[tuple[int, float, float]] = (),
    share: Sequence[int] | None = None,
    node_slack: int = 0,
) -> ClusterView:
    """groups: (nodes, GPUs per node, milli-CPUs per node, MiB per node), in order;
    free: (free GPUs, free milli-CPUs, free MiB) of every node, group by group;
    running: (group, GPUs, estimated end); share defaults to 1000 where a GPU is free."""
    count = [g[0] for g in groups]
    free_gpus = [f[0] for f in free]
    return ClusterView(
        gpu_type=np.arange(len(groups)),
        gpus_per_node=[g[1] for g in groups],
        node_count=count,
        cpus_per_node_milli=[g[2] for g in groups],
        mem_per_node_mib=[g[3] for g in groups],
        free_gpus=free_gpus,
        free_share_milli=share if share is not None else [1000 if f > 0 else 0 for f in free_gpus],
        free_cpus_milli=[f[1] for f in free],
        free_mem_mib=[f[2] for f in free],
        run_group=[r[0] for r in running],
        run_gpus=[r[1] for r in running],
        run_end_s=[r[2] for r in running],
        node_slack=node_slack,
    )


def queue_view(jobs: Sequence[dict[str, Any]], n_groups: int, n_vcs: int = 1) -> QueueView:
    """jobs: dicts with gpus, cpu, mem, eligible (group indices) and optional milli, est, submit,
    user, vc."""
    elig = np.zeros((len(jobs), n_groups), dtype=bool)
    for k, j in enumerate(jobs):
        elig[k, list(j["eligible"])] = True
    return QueueView(
        gpus=[j["gpus"] for j in jobs],
        gpu_milli=[j.get("milli", 1000) for j in jobs],
        cpus_milli=[j["cpu"] for j in jobs],
        mem_mib=[j["mem"] for j in jobs],
        est_runtime_s=[j.get("est", 60.0) for j in jobs],
        submit_s=[j.get("submit", 0.0) for j in jobs],
        user=[j.get("user", 0) for j in jobs],
        vc=[j.get("vc", 0) for j in jobs],
        eligible=elig,
        n_vcs=n_vcs,
    )
