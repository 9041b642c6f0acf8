"""Symmetry breaks of the placement model, and the warm start put in the form they require.

Two breaks, both valid together because both hold in the lexicographically smallest of all
equivalent solutions:

1. slot labels: the n-th job (in rank order) that may use a class may only use the class's first
   ``sum(max nodes of those jobs up to n)`` slots (posted in ``PlacementModel._add_job``); the
   warm start satisfies it once each class's nodes are labelled in order of first use;
2. identical jobs: two identical whole-GPU jobs that start, with every job ranked between them
   started, sit in rank order of (class, slot label) (``order_identical``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.placement.slots import Slot
from shared.placement.types import JobRequest
from shared.scheduling.state import Alloc

if TYPE_CHECKING:
    from shared.placement.model import PlacementModel


def request_key(job: JobRequest) -> tuple[object, ...]:
    return (job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib, job.groups, job.capped)


def _slot_key(s: Slot) -> tuple[int, int, int]:
    return (s.group, s.cls.nodes[0], s.label)


def first_use_labels(
    allocs: Sequence[Alloc | None], node_class: Callable[[int, int], int]
) -> dict[tuple[int, int], int]:
    """Label each used node k when it is the k-th node of its class used, in rank order."""
    labels: dict[tuple[int, int], int] = {}
    used: dict[int, int] = {}
    for a in allocs:
        if a is None:
            continue
        for n in a.nodes:
            key = (a.group, n)
            if key not in labels:
                ci = node_class(a.group, n)
                labels[key] = used.get(ci, 0)
                used[ci] = labels[key] + 1
    return labels


def order_identical(m: PlacementModel) -> None:
    """Identical whole-GPU jobs that start, with every job ranked between them started, sit in
    rank order of (class, slot label).

    Swapping two identical jobs changes no capacity, no tier, and no priority check either: a check
    of a job ranked after both sees the same sum, and every job ranked between them started, so its
    check is off. Without this, a batch of 1-GPU jobs is a pigeonhole that CP-SAT cannot close in
    seconds.
    """
    order = {id(s): k for k, s in enumerate(sorted(m.slots.values(), key=_slot_key))}
    last: dict[tuple[object, ...], int] = {}
    for j in range(len(m.batch)):
        if m.jobs[j].start < 0 or not m.orderable(j):
            continue
        key = request_key(m.batch[j])
        i = last.get(key)
        last[key] = j
        if i is None:
            continue
        between = [m.jobs[k].start for k in range(i + 1, j) if m.jobs[k].start >= 0]
        pv, pc = _position(m, i, order)
        v, c = _position(m, j, order)
        enforce = (m.jobs[i].start, m.jobs[j].start, *between)
        m.b.linear([*pv, *v], [*pc, *(-x for x in c)], hi=0, enforce=enforce)


def _position(m: PlacementModel, j: int, order: dict[int, int]) -> tuple[list[int], list[int]]:
    vs: list[int] = []
    cs: list[int] = []
    for p in m.jobs[j].pairs:
        k = order[id(p.slot)]
        for lit in [p.y] if p.y >= 0 else [f for _, _, f in p.bins]:
            vs.append(lit)
            cs.append(k)
    return vs, cs


def canonical_hint(m: PlacementModel, hint: Sequence[Alloc | None]) -> list[Alloc | None]:
    """The warm start, relabelled and reordered to satisfy both symmetry breaks.

    Alternately relabel each class's nodes by first use (``m.hint_labels``) and sort identical
    jobs' allocations inside runs of started jobs; each step only lowers the solution's
    lexicographic order, so this stops, at a point that satisfies both.
    """
    out = list(hint)
    while True:
        m.hint_labels = first_use_labels(out, m.node_class)
        new = list(out)
        start = 0
        for j in range(len(new) + 1):
            if j == len(new) or (new[j] is None and m.jobs[j].start >= 0):
                _sort_run(m, new, start, j)
                start = j + 1
        if new == out:
            return out
        out = new


def _sort_run(m: PlacementModel, allocs: list[Alloc | None], lo: int, hi: int) -> None:
    by_key: dict[tuple[object, ...], list[int]] = {}
    for j in range(lo, hi):
        if allocs[j] is not None and m.orderable(j):
            by_key.setdefault(request_key(m.batch[j]), []).append(j)
    for idx in by_key.values():
        got = sorted((a for a in (allocs[j] for j in idx) if a is not None), key=lambda a: _alloc_key(m, a))
        for j, a in zip(idx, got, strict=True):
            allocs[j] = a


def _alloc_key(m: PlacementModel, a: Alloc) -> tuple[int, int, int]:
    n = a.nodes[0]
    return (a.group, m.classes[m.node_class(a.group, n)].nodes[0], m.hint_labels[(a.group, n)])
