"""Small cluster specs the simulator tests build again and again."""

from __future__ import annotations

from shared.domain.cluster import ClusterSpec, parse_cluster_spec


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
