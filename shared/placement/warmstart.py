"""The greedy warm start: best-fit in rank order, each allocation taken before the next job.

This is exactly what the simulator's own best-fit placer would do for the batch, so it is both the
solver's first solution (via hints) and the fallback when the solver has no answer in time. It runs
on a copy of the groups the batch may touch; the caller's state is never modified.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

from shared.placement.types import JobRequest
from shared.scheduling.placement import BestFit, Caps
from shared.scheduling.state import Alloc, ClusterState


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
    caps: Mapping[int, Caps] | None = None,
) -> list[Alloc | None]:
    """Best-fit allocations of ``jobs`` in order, as if each started before the next is placed.

    ``groups[i]`` may narrow job i's groups to those where it fits now (same answer, fewer scans).
    Groups are copied on first write only: most of a big cluster's groups are never touched.
    ``caps`` are reservation caps; a job respects those of its ``capped`` groups and, once placed
    in one, uses them up, exactly as the simulator's EASY backfill does (the caller's caps are
    not modified).
    """
    scratch = partial_copy(state, set())
    copied: set[int] = set()
    own_caps: dict[int, Caps] = {}
    placer = BestFit()
    out: list[Alloc | None] = []
    for i, job in enumerate(jobs):
        where = job.groups if groups is None else groups[i]
        if not where:
            out.append(None)
            continue
        mine: dict[int, Caps] | None = None
        if caps and job.capped:
            mine = {}
            for g in job.capped:
                if g in caps:
                    if g not in own_caps:
                        c = caps[g]
                        own_caps[g] = Caps(
                            c.whole.copy(),
                            c.cpu.copy(),
                            c.mem.copy(),
                            c.frac_blocked.copy(),
                            set(c.frac_blocked_set),
                        )
                    mine[g] = own_caps[g]
        a = placer.place(
            scratch, job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib, where, mine or None, node_slack
        )
        if a is not None:
            if a.group not in copied:
                scratch.groups[a.group] = scratch.groups[a.group].copy()
                copied.add(a.group)
            scratch.take(a)
            if mine and a.group in mine:
                mine[a.group].consume(a)
        out.append(a)
    return out
