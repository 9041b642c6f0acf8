"""Small cluster specs the simulator tests build again and again."""

from __future__ import annotations

import numpy as np

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import JobTable
from shared.scheduling.state import ClusterState


def one_group_spec(count: int, gpus: int, cpus: int = 64, mem_gib: int = 512) -> ClusterSpec:
    """A cluster ``t`` of ``count`` identical nodes (group ``g``, GPU type ``A``)."""
    return parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": "g", "gpu_type": "A", "count": count, "gpus": gpus, "cpus": cpus, "mem_gib": mem_gib}
            ],
        },
        "t",
    )


def predictable(jobs: JobTable, seed: int = 0) -> JobTable:
    """``jobs`` with runtime predictions (``predicted`` and its band) that are off from the true
    runtime by a seeded factor between 1/2.8 and 2.8 (some under, some over), so that tests that
    sample every registered policy also run the predictor-based ones (``sjf-pred``, ...), whose
    orders differ from both the estimate-based and the clairvoyant ones."""
    rng = np.random.default_rng(seed + len(jobs))
    factor = 2.0 ** rng.uniform(-1.5, 1.5, len(jobs))
    predicted = np.maximum(np.round(jobs.runtime * factor), 1.0)
    return jobs.with_fields(predicted=predicted, predicted_lo=predicted / 3.0, predicted_hi=predicted * 3.0)


def one_type_state(
    groups: list[tuple[int, int]],
) -> tuple[ClusterSpec, ClusterState, tuple[int, ...]]:
    """An empty cluster of one GPU type with a node group per (count, gpus), 64 CPUs and 512 GiB
    per node (its spec, its state, and every group's index): the random clusters of the share-list property tests."""
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": f"g{k}", "gpu_type": "A", "count": c, "gpus": g, "cpus": 64, "mem_gib": 512}
                for k, (c, g) in enumerate(groups)
            ],
        },
        "t",
    )
    return spec, ClusterState(spec, set(range(len(groups)))), tuple(range(len(groups)))
