"""Can a job ever run on a cluster, and how busy would a workload keep it.

Why here: the generator promises that every job it draws for a cluster can start on an empty
cluster (otherwise a simulation waits forever on it), and the embedded preset records the offered
load of its default workload; both checks are shared by the tests and the calibration script. The
offered load is ``shared.domain.load``'s, the one definition (re-exported here).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import JobTable
from shared.domain.load import offered_load

__all__ = ["fits_cluster", "offered_load"]


def fits_cluster(table: JobTable, spec: ClusterSpec) -> npt.NDArray[np.bool_]:
    """Per job: True if some node group can host it on an otherwise empty cluster.

    A job needs one group whose GPU type is allowed by its type set, and either one node with enough
    GPUs, or, when it asks for more GPUs than a node has, ``ceil(gpus / gpus_per_node)`` nodes of
    that group. CPU and memory are split over the nodes in proportion to the GPUs each node holds,
    and a node's part must fit the node. Requests of -1 (not given) are not checked here.
    """
    n = len(table)
    ok = np.zeros(n, dtype=bool)
    gpus = table.gpus
    cpus = np.maximum(table.cpus_milli, 0)
    mem = np.maximum(table.mem_mib, 0)
    for group in spec.node_groups:
        if group.gpus == 0:
            continue
        allowed_codes = np.array([not ts or group.gpu_type in ts for ts in table.type_sets], dtype=bool)
        allowed = allowed_codes[table.type_set]
        per_node = np.minimum(gpus, group.gpus)
        nodes = -(-gpus // group.gpus)
        share = per_node / np.maximum(gpus, 1)
        fit = (
            allowed
            & (gpus >= 1)
            & (nodes <= group.count)
            & (np.ceil(cpus * share) <= group.cpus_milli)
            & (np.ceil(mem * share) <= group.mem_mib)
        )
        ok |= fit
    return ok
