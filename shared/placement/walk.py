"""Best-fit for a long walk of one decision: the simulator's choices, a fraction of the cost.

A placement decision walks up to 1,024 jobs in rank order and starts several hundred of them, each
on best-fit's nodes (``shared.scheduling.placement.BestFit``). On the busy openb cluster (1,213 nodes, 15
node groups) a job may run in 11 to 15 groups, and ``BestFit.place`` then costs 40 to 50 us (a numpy
view per group the reservation caps touch, numpy scalar reads per node tried), and
``ClusterState.take`` another 7 us: about 16 ms of a 1,024-job decision. ``WalkState`` keeps its own
copy of the free resources (Python lists, and cluster-wide arrays in slot order) and answers the
same question at a fraction of the cost:

- a job of whole GPUs on one node: the first node of least GPUs left, then the earliest group,
  then the lowest node id (``_whole``'s score and ``_best_in_buckets``' tie-break), with the CPUs
  and memory and not blocked: one compiled pass over the slots of the job's groups
  (``shared.placement.kernels.least_left``; the groups ascend, so slot order is that order);
- a GPU share: one sorted list of every partly used GPU of the cluster, ``(free, group, node,
  GPU)``; the first entry with room, in one of the job's groups, on a node with the CPUs and memory
  and not blocked is best-fit's tightest share over all groups (least left, then earliest group,
  as ``_fractional`` compares them). Only when no partly used GPU holds it: the lowest node with a
  whole GPU free, earliest group first (the first fitting slot, the same compiled pass);
- a CPU-only job: the least free CPUs among fitting nodes, earliest group, lowest id, in the same
  compiled pass (``_cpu_only_joined``).

Reservation caps are *blocked nodes* here (``blocked``: group -> node ids no part of the job may
touch; a mapping must not change once passed, its mask is kept), which is all the placer service's
EASY reservations are (``_blocking_caps``). What this does not reproduce falls back to
``BestFit`` itself on the ``ClusterState``, brought up to date first (``sync``): gangs (more GPUs
than a node of the group has, or any multi-GPU job with ``node_slack > 0``), groups not in
ascending order, shares in groups that do not track them.
``tests/placement/test_walk.py`` checks the choices against ``BestFit`` on random states.

The ``ClusterState`` passed in is only written by ``sync`` (each start taken once, in order); a
caller that reads it after ``take`` must call ``sync`` first.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.kernels import least_left
from shared.scheduling.placement import BestFit, Caps
from shared.scheduling.state import Alloc, ClusterState

__all__ = ["NeedsFallback", "WalkState", "blocking_caps"]

Blocked = Mapping[int, AbstractSet[int]]
I64 = npt.NDArray[np.int64]
_NOTHING_BLOCKED = np.zeros(0, dtype=bool)


class NeedsFallback(Exception):
    """``WalkState.place(..., fallback=False)`` met a request only ``BestFit`` on the state answers."""


def blocking_caps(n: int, nodes: AbstractSet[int] | Sequence[int]) -> Caps:
    """``Caps`` that forbid any use of ``nodes`` (-1: even a request of nothing fails there)."""
    cap = Caps.unlimited(n)
    for i in nodes:
        cap.whole[i] = cap.cpu[i] = cap.mem[i] = -1
        cap.block_shares(i)
    return cap


class WalkState:
    """The free resources of a ``ClusterState`` for best-fit, placing and taking one job at a time."""

    def __init__(self, st: ClusterState) -> None:
        self.st = st
        self.pending: list[Alloc] = []  # started here, not yet taken on ``st``
        self.fallback = BestFit()
        groups = st.groups
        self.G = [gs.G for gs in groups]
        self.maxG = max(self.G, default=0)
        self.n = [gs.n for gs in groups]
        off = [0]
        for gs in groups:
            off.append(off[-1] + gs.n)
        self.offsets = off
        self.whole: list[list[int]] = [gs.whole.tolist() for gs in groups]
        self.cpu: list[list[int]] = [gs.cpu.tolist() for gs in groups]
        self.mem: list[list[int]] = [gs.mem.tolist() for gs in groups]
        self.free_whole = [gs.free_whole for gs in groups]
        self.gfree: list[list[list[int]] | None] = [
            None if gs.gfree is None else gs.gfree.tolist() for gs in groups
        ]
        self.maxfrac: list[list[int] | None] = [
            None if gs.maxfrac is None else gs.maxfrac.tolist() for gs in groups
        ]
        # every partly used GPU of the tracking groups, sorted: (free milli, group, node, GPU)
        self.partial: list[tuple[int, int, int, int]] = sorted(
            (v, gs.index, i, gpu) for gs in groups if gs.partial is not None for v, i, gpu in gs.partial
        )
        self.node_partial: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        for e in self.partial:
            self.node_partial.setdefault((e[1], e[2]), []).append(e)
        # cluster-wide arrays (slot = offsets[group] + node) for the vectorized CPU-only pass
        self.cpu_n: I64 = np.concatenate([gs.cpu for gs in groups]) if groups else np.zeros(0, np.int64)
        self.mem_n: I64 = np.concatenate([gs.mem for gs in groups]) if groups else np.zeros(0, np.int64)
        self.whole_n: I64 = np.concatenate([gs.whole for gs in groups]) if groups else np.zeros(0, np.int64)
        # the largest free share per node (``_Replay``'s "now"): a whole GPU's where one is free
        self.share_n: I64 = (
            np.concatenate(
                [
                    gs.maxfrac if gs.maxfrac is not None else np.where(gs.whole > 0, WHOLE_GPU_MILLI, 0)
                    for gs in groups
                ]
            ).astype(np.int64)
            if groups
            else np.zeros(0, np.int64)
        )
        self._ascending: dict[tuple[int, ...], bool] = {}
        self._group_ranges: dict[tuple[int, ...], tuple[I64, I64]] = {}
        # blocked-node masks by the identity of their mapping (kept alive beside its mask)
        self._blocked_masks: dict[int, tuple[Blocked, npt.NDArray[np.bool_]]] = {}

    # -- the state --------------------------------------------------------------------------------

    def take(self, a: Alloc) -> None:
        """Start ``a`` (``ClusterState.take``'s effect on this copy; ``st`` gets it at ``sync``)."""
        g = a.group
        whole, cpu, mem, gfree = self.whole[g], self.cpu[g], self.mem[g], self.gfree[g]
        base = self.offsets[g]
        for k, i in enumerate(a.nodes):
            c = cpu[i] - a.cpu[k]
            m = mem[i] - a.mem[k]
            cpu[i] = c
            mem[i] = m
            self.cpu_n[base + i] = c
            self.mem_n[base + i] = m
            if gfree is None:
                if a.whole[k]:
                    self._set_whole(g, i, whole[i] - a.whole[k])
                continue
            row = gfree[i]
            ids = a.gpu_ids[k] if a.gpu_ids is not None else None
            if a.frac_gpu < 0 and ids and all(row[x] == WHOLE_GPU_MILLI for x in ids):
                # whole free GPUs taken: the node's partly used GPUs stay as they are
                for x in ids:
                    row[x] = 0
                self._set_whole(g, i, whole[i] - len(ids))
                self._set_maxfrac(g, i, row)
                continue
            if ids:
                for x in ids:
                    row[x] = 0
            if a.frac_gpu >= 0:
                row[a.frac_gpu] -= a.milli
            self._refresh(g, i, row)
        self.pending.append(a)

    def give(self, a: Alloc) -> None:
        """Undo the latest ``take`` (``a``), before any ``sync``: a trial placement taken back."""
        if not self.pending or self.pending[-1] is not a:
            raise ValueError("give() only undoes the latest take() not yet synced")
        self.pending.pop()
        g = a.group
        whole, cpu, mem, gfree = self.whole[g], self.cpu[g], self.mem[g], self.gfree[g]
        base = self.offsets[g]
        for k, i in enumerate(a.nodes):
            c = cpu[i] + a.cpu[k]
            m = mem[i] + a.mem[k]
            cpu[i] = c
            mem[i] = m
            self.cpu_n[base + i] = c
            self.mem_n[base + i] = m
            if gfree is None:
                if a.whole[k]:
                    self._set_whole(g, i, whole[i] + a.whole[k])
                continue
            row = gfree[i]
            ids = a.gpu_ids[k] if a.gpu_ids is not None else None
            if ids:
                for x in ids:
                    row[x] = WHOLE_GPU_MILLI
            if a.frac_gpu >= 0:
                row[a.frac_gpu] += a.milli
            self._refresh(g, i, row)

    def _set_whole(self, g: int, i: int, new: int) -> None:
        old = self.whole[g][i]
        if old != new:
            self.free_whole[g] += new - old
            self.whole[g][i] = new
            slot = self.offsets[g] + i
            self.whole_n[slot] = new
            if self.maxfrac[g] is None:
                self.share_n[slot] = WHOLE_GPU_MILLI if new > 0 else 0

    def _set_maxfrac(self, g: int, i: int, row: list[int]) -> None:
        frac = self.maxfrac[g]
        if frac is not None:
            frac[i] = max(row) if self.G[g] else 0
            self.share_n[self.offsets[g] + i] = frac[i]

    def _refresh(self, g: int, i: int, row: list[int]) -> None:
        """Whole-GPU count, largest share and partly used GPUs of node i from its GPU row."""
        self._set_whole(g, i, row.count(WHOLE_GPU_MILLI))
        self._set_maxfrac(g, i, row)
        partial = self.partial
        for e in self.node_partial.pop((g, i), ()):
            del partial[bisect_left(partial, e)]
        mine = [(v, g, i, gpu) for gpu, v in enumerate(row) if 0 < v < WHOLE_GPU_MILLI]
        if mine:
            self.node_partial[(g, i)] = mine
            for e in mine:
                insort(partial, e)

    def sync(self) -> ClusterState:
        """``st`` with every start so far taken (in order), for code that reads it."""
        st = self.st
        for a in self.pending:
            st.take(a)
        self.pending.clear()
        return st

    def free_arrays(self) -> tuple[I64, I64, I64, I64]:
        """Free whole GPUs, milli-CPUs, MiB and the largest free share per node, cluster-wide
        (slot order): what ``ClusterState``'s groups would show after the starts so far."""
        return self.whole_n.copy(), self.cpu_n.copy(), self.mem_n.copy(), self.share_n.copy()

    # -- the checks -------------------------------------------------------------------------------

    def fits(self, a: Alloc, blocked: Blocked | None, milli: int) -> bool:
        """``shared.scheduling.placement.alloc_fits`` for blocking caps: whether an allocation chosen
        earlier still fits the free resources now and touches no blocked node."""
        g = a.group
        whole, cpu, mem, gfree = self.whole[g], self.cpu[g], self.mem[g], self.gfree[g]
        bl = blocked.get(g) if blocked else None
        for k, i in enumerate(a.nodes):
            if whole[i] < a.whole[k] or cpu[i] < a.cpu[k] or mem[i] < a.mem[k]:
                return False
            if bl is not None and i in bl:
                return False
            if gfree is not None:
                row = gfree[i]
                ids = a.gpu_ids[k] if a.gpu_ids is not None else None
                if ids and any(row[x] != WHOLE_GPU_MILLI for x in ids):
                    return False
                if a.frac_gpu >= 0 and row[a.frac_gpu] < milli:
                    return False
        return True

    # -- best-fit ---------------------------------------------------------------------------------

    def place(
        self,
        gpus: int,
        milli: int,
        cpu: int,
        mem: int,
        groups: tuple[int, ...],
        blocked: Blocked | None = None,
        node_slack: int = 0,
        fallback: bool = True,
    ) -> Alloc | None:
        """``BestFit().place(st, gpus, milli, cpu, mem, groups, caps, node_slack)`` on the state
        after the starts so far, with ``caps`` the blocking caps of ``blocked``.

        ``fallback=False``: raise ``NeedsFallback`` instead of bringing ``st`` up to date for
        ``BestFit`` (a trial that must leave ``st`` alone)."""
        ascending = self._ascending.get(groups)
        if ascending is None:
            ascending = self._ascending[groups] = all(a < b for a, b in pairwise(groups))
        if not ascending or (node_slack > 0 and gpus >= 2 and milli >= WHOLE_GPU_MILLI):
            return self._fallback(gpus, milli, cpu, mem, groups, blocked, node_slack, fallback)
        if gpus == 0:
            return self._cpu_only(cpu, mem, groups, blocked)
        if milli < WHOLE_GPU_MILLI:
            if any(self.gfree[g] is None for g in groups):
                return self._fallback(gpus, milli, cpu, mem, groups, blocked, node_slack, fallback)
            return self._share(milli, cpu, mem, groups, blocked)
        a = self._single(gpus, cpu, mem, groups, blocked)
        if a is not None:
            return a
        # a gang (only where one node cannot hold it) scores (nodes >= 2, 0): after any single node
        if any(gpus > self.G[g] and self.free_whole[g] >= gpus for g in groups):
            return self._fallback(gpus, milli, cpu, mem, groups, blocked, node_slack, fallback)
        return None

    def _fallback(
        self,
        gpus: int,
        milli: int,
        cpu: int,
        mem: int,
        groups: tuple[int, ...],
        blocked: Blocked | None,
        node_slack: int,
        allowed: bool = True,
    ) -> Alloc | None:
        if not allowed:
            raise NeedsFallback
        st = self.sync()
        caps = None
        if blocked:
            caps = {g: blocking_caps(st.groups[g].n, nodes) for g, nodes in blocked.items()}
        return self.fallback.place(st, gpus, milli, cpu, mem, groups, caps, node_slack)

    def _single(
        self, gpus: int, cpu: int, mem: int, groups: tuple[int, ...], blocked: Blocked | None
    ) -> Alloc | None:
        """Least GPUs left, then the earliest group, then the lowest node (groups ascending: slot
        order is that order): one compiled pass over the slots of the job's groups
        (``shared.placement.kernels.least_left``)."""
        starts, ends = self._ranges(groups)
        p = least_left(
            self.whole_n, self.cpu_n, self.mem_n, starts, ends, self._blocked_mask(blocked), gpus, cpu, mem
        )
        if p < 0:
            return None
        g = bisect_right(self.offsets, p) - 1  # the group holding slot p (offsets: a list)
        return self._whole_alloc(g, p - self.offsets[g], gpus, cpu, mem)

    def _whole_alloc(self, g: int, i: int, gpus: int, cpu: int, mem: int) -> Alloc:
        rows = self.gfree[g]
        ids = None
        if rows is not None:
            ids = [[x for x, v in enumerate(rows[i]) if v == WHOLE_GPU_MILLI][:gpus]]
        return Alloc(g, [i], [gpus], [cpu], [mem], ids)

    def _share(
        self, milli: int, cpu: int, mem: int, groups: tuple[int, ...], blocked: Blocked | None
    ) -> Alloc | None:
        partial = self.partial
        allowed = set(groups)
        cpus, mems = self.cpu, self.mem
        for k in range(bisect_left(partial, (milli, -1, -1, -1)), len(partial)):
            _, g, i, gpu = partial[k]
            if g in allowed and cpus[g][i] >= cpu and mems[g][i] >= mem:
                bl = blocked.get(g) if blocked else None
                if bl is None or i not in bl:
                    return Alloc(g, [i], [0], [cpu], [mem], None, gpu, milli)
        # no partly used GPU holds it: a fresh GPU, on the lowest fitting node of the first group
        # (groups ascending: the first fitting slot)
        starts, ends = self._ranges(groups)
        p = least_left(
            self.whole_n, self.cpu_n, self.mem_n, starts, ends, self._blocked_mask(blocked), 1, cpu, mem, True
        )
        if p < 0:
            return None
        g = bisect_right(self.offsets, p) - 1
        i = p - self.offsets[g]
        rows = self.gfree[g]
        assert rows is not None
        return Alloc(g, [i], [0], [cpu], [mem], None, rows[i].index(WHOLE_GPU_MILLI), milli)

    def _cpu_only(self, cpu: int, mem: int, groups: tuple[int, ...], blocked: Blocked | None) -> Alloc | None:
        """The least free CPUs among fitting nodes, earliest group, lowest id (``least_left``)."""
        starts, ends = self._ranges(groups)
        p = least_left(
            self.whole_n, self.cpu_n, self.mem_n, starts, ends, self._blocked_mask(blocked), 0, cpu, mem
        )
        if p < 0:
            return None
        g = bisect_right(self.offsets, p) - 1  # the group holding slot p (offsets: a list)
        return Alloc(g, [p - self.offsets[g]], [0], [cpu], [mem])

    def _ranges(self, groups: tuple[int, ...]) -> tuple[I64, I64]:
        """The first and the end slot of each of ``groups``, as the compiled scan reads them."""
        found = self._group_ranges.get(groups)
        if found is None:
            off = self.offsets
            found = self._group_ranges[groups] = (
                np.array([off[g] for g in groups], dtype=np.int64),
                np.array([off[g + 1] for g in groups], dtype=np.int64),
            )
        return found

    def _blocked_mask(self, blocked: Blocked | None) -> npt.NDArray[np.bool_]:
        """``blocked`` as a mask over the cluster's slots (empty: nothing blocked); kept per mapping,
        which the placer reuses for every job with the same reservations to respect."""
        if not blocked:
            return _NOTHING_BLOCKED
        kept = self._blocked_masks.get(id(blocked))
        if kept is not None and kept[0] is blocked:
            return kept[1]
        mask = np.zeros(self.offsets[-1], dtype=bool)
        self._unblock_mask(mask, blocked)
        self._blocked_masks[id(blocked)] = (blocked, mask)
        return mask

    def _unblock_mask(self, mask: npt.NDArray[np.bool_], blocked: Blocked) -> None:
        for g, nodes in blocked.items():
            if nodes:
                mask[[self.offsets[g] + i for i in nodes]] = True
