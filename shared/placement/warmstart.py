"""The greedy warm start: best-fit in rank order, each allocation taken before the next job.

This is exactly what the simulator's own best-fit placer would do for the batch, so it is both the
solver's first solution (via hints) and the fallback when the solver has no answer in time. It runs
on a copy of the groups the batch may touch; the caller's state is never modified.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from shared.placement.types import JobRequest
from shared.sim.placement import BestFit
from shared.sim.state import Alloc, ClusterState


def partial_copy(state: ClusterState, groups: set[int]) -> ClusterState:
    """A shallow copy of ``state`` whose ``groups`` are deep-copied; every other group is shared."""
    other = copy.copy(state)
    other.groups = [gs.copy() if gs.index in groups else gs for gs in state.groups]
    return other


def best_fit_batch(
    state: ClusterState,
    jobs: Sequence[JobRequest],
    node_slack: int,
    groups: Sequence[tuple[int, ...]] | None = None,
) -> list[Alloc | None]:
    """Best-fit allocations of ``jobs`` in order, as if each started before the next is placed.

    ``groups[i]`` may narrow job i's groups to those where it fits now (same answer, fewer scans).
    Groups are copied on first write only: most of a big cluster's groups are never touched.
    """
    scratch = partial_copy(state, set())
    copied: set[int] = set()
    placer = BestFit()
    out: list[Alloc | None] = []
    for i, job in enumerate(jobs):
        where = job.groups if groups is None else groups[i]
        if not where:
            out.append(None)
            continue
        a = placer.place(
            scratch, job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib, where, None, node_slack
        )
        if a is not None:
            if a.group not in copied:
                scratch.groups[a.group] = scratch.groups[a.group].copy()
                copied.add(a.group)
            scratch.take(a)
        out.append(a)
    return out
