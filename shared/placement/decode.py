"""From a model solution to ``Alloc`` objects, and an independent check of the result.

Decoding is deterministic: slot k of a class is the class's k-th lowest node id; on a node, fresh
GPU bins take the lowest fully free GPU indices in bin order and whole-GPU jobs the next ones in rank
order; a partially used GPU bin is the node's k-th partial GPU by (free share, index), the order in
which the class was keyed. ``check_allocs`` re-derives every node's usage from the allocations and
compares it with the free state, so a modelling or decoding bug can only ever cost a fallback to
best-fit, never an over-committed node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.aggregate import cpu_share, job_shape, mem_share
from shared.placement.assign import fresh_open, partial_gpus, usage
from shared.placement.model import PlacementModel
from shared.placement.slots import Slot
from shared.placement.types import JobRequest
from shared.scheduling.state import Alloc, ClusterState


class DecodeError(RuntimeError):
    """A solution that does not decode to valid allocations (a bug; the caller falls back)."""


def decode(model: PlacementModel, values: Sequence[int]) -> list[Alloc | None]:
    """Allocations of the batch's jobs under ``values`` (a full assignment of the model)."""
    used_by_job = usage(model, values)
    state = model.state
    taken: dict[tuple[int, int], list[int]] = {}  # (group, node) -> free whole GPU ids still unused

    def free_ids(s: Slot) -> list[int]:
        key = (s.cls.group, s.node)
        if key not in taken:
            gs = state.groups[s.cls.group]
            assert gs.gfree is not None
            ids = [int(i) for i in np.flatnonzero(gs.gfree[s.node] == WHOLE_GPU_MILLI)]
            taken[key] = ids[fresh_open(values, s) :]
        return taken[key]

    out: list[Alloc | None] = []
    for job, used in zip(model.batch, used_by_job, strict=True):
        if not used:
            out.append(None)
            continue
        groups = {s.cls.group for s, _, _ in used}
        if len(groups) != 1:
            raise DecodeError("a job spans two node groups")
        g = groups.pop()
        gs = state.groups[g]
        used = sorted(used, key=lambda t: t[0].node)
        if job.fractional:
            s, _, bin_ = used[0]
            assert bin_ is not None and gs.gfree is not None
            fresh, k = bin_
            row = gs.gfree[s.node]
            gpu = int(np.flatnonzero(row == WHOLE_GPU_MILLI)[k]) if fresh else partial_gpus(row)[k]
            out.append(Alloc(g, [s.node], [0], [job.cpus_milli], [job.mem_mib], None, gpu, job.gpu_milli))
            continue
        nodes = [s.node for s, _, _ in used]
        whole = [w for _, w, _ in used]
        if job.gpus == 0:
            out.append(Alloc(g, nodes, [0], [job.cpus_milli], [job.mem_mib]))
            continue
        ids: list[list[int]] | None = None
        if gs.gfree is not None:
            ids = []
            for s, w, _ in used:
                pool = free_ids(s)
                ids.append(pool[:w])
                del pool[:w]
        if len(used) == 1 and whole[0] == job.gpus:
            cpu, mem = [job.cpus_milli], [job.mem_mib]
        else:
            cpu = [cpu_share(job, w) for w in whole]
            mem = [mem_share(job, w) for w in whole]
        out.append(Alloc(g, nodes, whole, cpu, mem, ids))
    return out


def check_allocs(
    state: ClusterState, jobs: Sequence[JobRequest], allocs: Sequence[Alloc | None], node_slack: int
) -> None:
    """Raise ``DecodeError`` unless every allocation fits its job and all of them fit together."""
    cpu: dict[tuple[int, int], int] = defaultdict(int)
    mem: dict[tuple[int, int], int] = defaultdict(int)
    whole: dict[tuple[int, int], int] = defaultdict(int)
    milli: dict[tuple[int, int, int], int] = defaultdict(int)
    for job, a in zip(jobs, allocs, strict=True):
        if a is None:
            continue
        gs = state.groups[a.group]
        if a.group not in job.groups:
            raise DecodeError("allocation in a group the job may not use")
        if len(set(a.nodes)) != len(a.nodes):
            raise DecodeError("a node listed twice")
        if job.fractional:
            if a.frac_gpu < 0 or a.milli != job.gpu_milli or len(a.nodes) != 1:
                raise DecodeError("bad fractional allocation")
            milli[(a.group, a.nodes[0], a.frac_gpu)] += a.milli
        elif sum(a.whole) != job.gpus:
            raise DecodeError("gang does not add up to the job's GPUs")
        shape = job_shape(job, gs.G, gs.n, node_slack)
        if shape is None or len(a.nodes) > shape.max_nodes:
            raise DecodeError("too many nodes")
        for k, n in enumerate(a.nodes):
            key = (a.group, n)
            cpu[key] += a.cpu[k]
            mem[key] += a.mem[k]
            whole[key] += a.whole[k]
            if a.gpu_ids is not None:
                if len(a.gpu_ids[k]) != a.whole[k]:
                    raise DecodeError("GPU ids do not match the GPU count")
                for gpu in a.gpu_ids[k]:
                    milli[(a.group, n, gpu)] += WHOLE_GPU_MILLI
        if job.gpus and not job.fractional and sum(a.cpu) < job.cpus_milli:
            raise DecodeError("CPU split below the request")
    for (g, n), c in cpu.items():
        gs = state.groups[g]
        if c > gs.cpu[n] or mem[(g, n)] > gs.mem[n]:
            raise DecodeError(f"CPU or memory over capacity on group {g} node {n}")
        if gs.gfree is None and whole[(g, n)] > gs.whole[n]:
            raise DecodeError(f"GPUs over capacity on group {g} node {n}")
    fresh_used: dict[tuple[int, int], int] = defaultdict(int)
    for (g, n, gpu), m in milli.items():
        row = state.groups[g].gfree
        if row is None or m > row[n][gpu]:
            raise DecodeError(f"GPU {gpu} of group {g} node {n} over capacity")
        if row[n][gpu] == WHOLE_GPU_MILLI:
            fresh_used[(g, n)] += 1
    for (g, n), k in fresh_used.items():
        if k > state.groups[g].whole[n]:
            raise DecodeError("more fully free GPUs used than the node has")
