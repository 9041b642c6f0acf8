"""Which nodes an EASY reservation pins: the ones that only become free by its time, where it can.

Why: a reservation pins specific nodes (as Slurm's backfill plans specific nodes), and a job that
runs past the reservation's time may take on those nodes only what leaves the plan room. The
placer plans the reserved job on the cluster as it will be at the reservation time, where a node
that is free now and a node that a running job frees by then look alike; pinning the first would
refuse a long backfill job that the textbook's spare-processor count admits. So the plan is
re-pinned: each plan node whose take overlaps resources free *now* is exchanged, where possible,
for a node outside the plan that holds the same take at the reservation time with less overlap.

The rule (the compiled core's ``_repin`` repeats it exactly):
- the overlap of a take (w GPUs, c CPUs) on node i is ``max(0, w - released_gpus[i])``, or
  ``max(0, c - released_cpus[i])`` for a take without GPUs, where ``released`` is what running
  jobs free on i by the reservation time (free then minus free now);
- plan nodes are visited by overlap, largest first, then by node id, highest first; a node with
  no overlap is kept; otherwise the candidate outside the (current) plan with the least overlap,
  then the lowest id, replaces it when its overlap is strictly smaller;
- highest ids are given up first because first-fit and best-fit place jobs on the lowest ids
  first: the pinned nodes that stay free now are then the ones a short backfill job (one that ends
  by the reservation time, so may use them) takes first, which keeps the unpinned free nodes for
  jobs that run past it. On a flat pool of single-slot nodes this admits exactly the backfill of
  textbook EASY (Mu'alem and Feitelson 2001).

Plans of GPU shares, and groups that track shares, keep the placer's nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.scheduling.state import I64

_BIG = 1 << 60


def repin(
    nodes: Sequence[int],
    take_w: Sequence[int],
    take_c: Sequence[int],
    take_m: Sequence[int],
    now_w: I64,
    now_c: I64,
    at_w: I64,
    at_c: I64,
    at_m: I64,
) -> list[int]:
    """The plan's nodes after re-pinning (same positions as ``nodes``; takes unchanged).

    ``now_*``: free GPUs and CPUs per node of the group now; ``at_*``: free GPUs, CPUs and memory
    per node at the reservation time (every node of ``nodes`` holds its take there)."""
    out = [int(i) for i in nodes]
    rel_w = at_w - now_w
    rel_c = at_c - now_c

    def overlap(i: int, z: int) -> int:
        if take_w[z]:
            return max(0, int(take_w[z]) - int(rel_w[i]))
        return max(0, int(take_c[z]) - int(rel_c[i]))

    visit = sorted(range(len(out)), key=lambda z: (-overlap(out[z], z), -out[z]))
    in_plan: I64 | None = None
    for z in visit:
        ov = overlap(out[z], z)
        if ov == 0:
            break  # the rest have none either
        if in_plan is None:
            in_plan = np.zeros(len(at_w), dtype=np.int64)
            in_plan[out] = 1
        w, c, m = int(take_w[z]), int(take_c[z]), int(take_m[z])
        cand_ov = np.maximum(w - rel_w, 0) if w else np.maximum(c - rel_c, 0)
        ok = (at_w >= w) & (at_c >= c) & (at_m >= m) & (in_plan == 0)
        vals = np.where(ok, cand_ov, _BIG)
        i = int(vals.argmin())  # the first minimum: the lowest id among the least overlapping
        if vals[i] < ov:
            in_plan[out[z]] = 0
            in_plan[i] = 1
            out[z] = i
    return out
