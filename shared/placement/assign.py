"""Assignments of the model: the warm start as a complete hint, and reading a solution back.

The hint gives every variable a value: the warm start's pairs, GPU bins and gang counts, and every
auxiliary literal set to whether its conditions hold under them. A complete, feasible hint is what
lets CP-SAT report FEASIBLE (at least as good as best-fit) even when stopped very early.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.model import PlacementModel
from shared.placement.slots import Cond, Pair, Slot
from shared.scheduling.state import Alloc

Usage = list[tuple[Slot, int, tuple[bool, int] | None]]  # (slot, whole GPUs there, share bin)


class HintError(RuntimeError):
    """The warm start cannot be expressed in the model (a bug; the caller falls back)."""


def hint_values(m: PlacementModel, hint: Sequence[Alloc | None]) -> list[int]:
    """A value for every variable of ``m`` that reproduces the warm start ``hint``."""
    h: dict[int, int] = {}
    fresh_bin: dict[tuple[int, int, int], int] = {}  # (group, node, GPU) -> fresh bin opened for it
    for j, a in enumerate(hint):
        jv = m.jobs[j]
        if a is None or jv.start < 0:
            continue
        h[jv.start] = 1
        for g, z in jv.groups.items():
            h[z] = int(g == a.group)
        for k, n in enumerate(a.nodes):
            cls = m.classes[m.node_class(a.group, n)]
            label = m.hint_labels[(a.group, n)]
            p = next((q for q in jv.pairs if q.slot.cls is cls and q.slot.label == label), None)
            if p is None:
                raise HintError("warm start outside the model")
            if p.x >= 0:
                h[p.y] = 1
                h[p.x] = a.whole[k]
                if p.cpu >= 0:
                    h[p.cpu] = a.cpu[k]
                if p.mem >= 0:
                    h[p.mem] = a.mem[k]
            elif p.bins:
                _hint_bin(m, h, p, a, n, fresh_bin)
            else:
                h[p.y] = 1
    for lit, conds in m.aux:
        h[lit] = int(all(holds(h, c) for c in conds))
    for lit, ors in m.ors:
        h[lit] = int(any(h.get(x, 0) for x in ors))
    return [h.get(v, 0) for v in range(m.b.n_vars)]


def _hint_bin(
    m: PlacementModel,
    h: dict[int, int],
    p: Pair,
    a: Alloc,
    node: int,
    fresh_bin: dict[tuple[int, int, int], int],
) -> None:
    gs = m.state.groups[a.group]
    assert gs.gfree is not None
    row = gs.gfree[node]
    if int(row[a.frac_gpu]) == WHOLE_GPU_MILLI:
        # a GPU free before the batch: a fresh bin, opened (in order) by its first share
        key = (a.group, node, a.frac_gpu)
        if key not in fresh_bin:
            s = p.slot
            opened = sum(h.get(o, 0) for o in s.fresh)
            if opened >= len(s.fresh):
                raise HintError("warm start opens more fresh GPUs than the model has")
            h[s.fresh[opened]] = 1
            fresh_bin[key] = opened
        want = (True, fresh_bin[key])
    else:
        want = (False, partial_gpus(row).index(a.frac_gpu))
    for fresh, k, f in p.bins:
        if (fresh, k) == want:
            h[f] = 1
            return
    raise HintError("warm start's GPU bin is not in the model")


def holds(h: dict[int, int] | Sequence[int], cond: Cond) -> bool:
    vs, cs, lo, hi = cond
    if isinstance(h, dict):
        total = sum(c * h.get(v, 0) for v, c in zip(vs, cs, strict=True))
    else:
        total = sum(c * h[v] for v, c in zip(vs, cs, strict=True))
    return lo <= total <= hi


def partial_gpus(row: np.ndarray) -> list[int]:
    """Physical indices of a node's partially used GPUs, in the order of the class's bins."""
    parts = sorted((int(row[k]), k) for k in range(len(row)) if 0 < int(row[k]) < WHOLE_GPU_MILLI)
    return [k for _, k in parts]


def tier_values(m: PlacementModel, values: Sequence[int]) -> dict[str, int]:
    """Each tier's (unweighted) value, and the priority checks an assignment breaks."""
    out = {tier: sum(c * values[v] for v, c in terms) for tier, terms in m.obj.items()}
    violations = 0
    for j, alts in m.checks:
        if not values[m.jobs[j].start] and not any(all(holds(values, c) for c in conds) for conds in alts):
            violations += 1
    violations += sum(1 for jv in m.jobs if jv.forced and not values[jv.start])
    out["violations"] = violations
    return out


def usage(m: PlacementModel, values: Sequence[int]) -> list[Usage]:
    """Per job, the slots it uses: (slot, whole GPUs there, GPU bin of a share or None)."""
    out: list[Usage] = []
    for j, jv in enumerate(m.jobs):
        mine: Usage = []
        if jv.start >= 0 and values[jv.start]:
            for p in jv.pairs:
                if p.x >= 0:
                    if values[p.x] > 0:
                        mine.append((p.slot, int(values[p.x]), None))
                elif p.bins:
                    mine.extend((p.slot, 0, (fresh, k)) for fresh, k, f in p.bins if values[f])
                elif values[p.y]:
                    mine.append((p.slot, m.batch[j].gpus, None))
        out.append(mine)
    return out


def fresh_open(values: Sequence[int], s: Slot) -> int:
    """Fresh GPU bins of a slot opened in ``values``."""
    return sum(int(values[o]) for o in s.fresh)
