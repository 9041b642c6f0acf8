"""Placement strategies: which nodes a job that may start now gets.

The simulator asks a ``Placer`` for one job at a time; first-fit (lowest group, lowest node id:
the reference code's "lexicographic" allocator) and best-fit (least leftover) are here, the CP-SAT
placer plugs in through the same interface.

Rules shared by every strategy:
- a job runs inside one node group (one GPU type); a gang of whole GPUs may span several nodes of
  that group, at most ``ceil(gpus / gpus_per_node) + node_slack`` of them;
- CPUs and memory are split over a gang's nodes in proportion to its GPUs there;
- a fractional job (``gpu_milli < 1000``) shares one physical GPU with others;
- ``caps`` (from an EASY reservation) further limit what a job may take on the nodes that the
  reserved job will need, so that a backfilled job never delays the reservation.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.state import I64, Alloc, ClusterState, GroupState

BIG = 1 << 60
_NO_NODES: set[int] = set()


@dataclass(slots=True)
class Caps:
    """Upper bounds on what a long backfill job may take per node of one group."""

    whole: I64
    cpu: I64
    mem: I64
    frac_blocked: np.ndarray  # nodes a fractional backfill job must not touch
    frac_blocked_set: set[int] = field(default_factory=set)  # the same nodes, for quick tests
    #: textbook (count-based) EASY, ``SimConfig.reservation="count"``: the GPUs of the group that
    #: jobs running past the reservation may still take (its "extra" GPUs); the per-node caps
    #: above are then not applied. None: node-pinned caps.
    count: int | None = None

    @staticmethod
    def unlimited(n: int) -> Caps:
        return Caps(
            np.full(n, BIG, dtype=np.int64),
            np.full(n, BIG, dtype=np.int64),
            np.full(n, BIG, dtype=np.int64),
            np.zeros(n, dtype=bool),
        )

    def block_shares(self, i: int) -> None:
        """Node i is needed by the reservation: no GPU share may be taken there."""
        self.frac_blocked[i] = True
        self.frac_blocked_set.add(i)

    def consume(self, a: Alloc) -> None:
        if self.count is not None:
            self.count -= count_demand(a)
            return
        for k, i in enumerate(a.nodes):
            self.whole[i] -= a.whole[k] + (1 if a.frac_gpu >= 0 else 0)
            self.cpu[i] -= a.cpu[k]
            self.mem[i] -= a.mem[k]


def count_demand(a: Alloc) -> int:
    """What an allocation takes of a count-based reservation's extra GPUs: its whole GPUs, and
    one for a share (it may take a whole free GPU)."""
    return sum(a.whole) + (1 if a.frac_gpu >= 0 else 0)


def _views(gs: GroupState, cap: Caps | None) -> tuple[I64, I64, I64]:
    if cap is None:
        return gs.whole, gs.cpu, gs.mem
    return np.minimum(gs.whole, cap.whole), np.minimum(gs.cpu, cap.cpu), np.minimum(gs.mem, cap.mem)


def _best_in_buckets(gs: GroupState, gpus: int, cpu: int, mem: int) -> tuple[int, int] | None:
    """(free GPUs, node) of the fullest node that still holds the request, via the free-GPU buckets.

    Among equally full nodes the lowest id (buckets are kept sorted) that has the CPUs
    and memory wins: a tie-break that costs O(1) instead of a scan of a 500-node group.
    """
    cpus, mems = gs.cpu, gs.mem
    for k in range(gpus, gs.G + 1):
        for i in gs.bucket[k]:
            if cpus[i] >= cpu and mems[i] >= mem:
                return k, i
    return None


#: partly used GPUs ``_tightest_share`` walks in its share list before it asks the arrays instead
SHARE_SCAN = 48


def _tightest_share(
    gs: GroupState, milli: int, cpu: int, mem: int, skip: set[int]
) -> tuple[int, int, int] | None:
    """(free, node, GPU) of the partly used GPU with the least free that still holds ``milli``, on
    a node with the CPUs and memory and not in ``skip``; ties go to the lowest node and GPU, as an
    array scan would.

    The share list is sorted that way, so the first entry that fits is the answer; on a busy
    cluster most partly used GPUs sit on nodes with no CPUs or memory left, and walking past
    thousands of them one by one cost about 0.2 ms a call. After ``SHARE_SCAN`` entries the rest
    is answered from the arrays (``_tightest_in_arrays``: the same minimum, the share list being
    exactly the partly used GPUs of ``gfree``)."""
    partial = gs.partial
    assert partial is not None
    cpus, mems = gs.cpu, gs.mem
    lo = bisect_left(partial, (milli, -1, -1))
    stop = min(len(partial), lo + SHARE_SCAN)
    for k in range(lo, stop):
        v, i, gpu = partial[k]
        if cpus[i] >= cpu and mems[i] >= mem and i not in skip:
            return v, i, gpu
    if stop == len(partial):
        return None
    return _tightest_in_arrays(gs, milli, cpu, mem, skip)


def _tightest_in_arrays(
    gs: GroupState, milli: int, cpu: int, mem: int, skip: set[int]
) -> tuple[int, int, int] | None:
    """``_tightest_share``'s answer from ``gfree``: the least free (then lowest node, then GPU) of
    the partly used GPUs (free in 1..999 milli) that hold ``milli`` on a node that qualifies."""
    assert gs.gfree is not None
    ok = (gs.cpu >= cpu) & (gs.mem >= mem)
    if skip:
        ok[np.fromiter(skip, dtype=np.int64, count=len(skip))] = False
    rows = np.flatnonzero(ok)
    sub = gs.gfree[rows]
    val = np.where((sub >= max(milli, 1)) & (sub < WHOLE_GPU_MILLI), sub, BIG)
    if not val.size:
        return None
    r, gpu = divmod(int(val.argmin()), val.shape[1])
    v = int(val[r, gpu])
    return None if v == BIG else (v, int(rows[r]), gpu)


def _lowest_with_free_gpu(gs: GroupState, cpu: int, mem: int, budget: int = 48) -> int | None:
    """The lowest node id with a whole GPU free and the CPUs and memory (-1: none), from the
    free-GPU buckets (each in ascending id order: the first fitting node of each bucket, then the
    lowest of those), or None when that would look at more than ``budget`` nodes (the caller
    then scans the arrays)."""
    cpus, mems = gs.cpu, gs.mem
    best = -1
    looked = 0
    for k in range(1, gs.G + 1):
        for i in gs.bucket[k]:
            if best >= 0 and i >= best:
                break
            looked += 1
            if looked > budget:
                return None
            if cpus[i] >= cpu and mems[i] >= mem:
                best = i
                break
    return best


def alloc_fits(st: ClusterState, a: Alloc, caps: dict[int, Caps] | None, milli: int) -> bool:
    """Whether an allocation chosen earlier (a batch placer's) still fits the free resources and
    the reservation caps now: GPUs, CPUs and memory per node, the physical GPUs it names, and, for
    a share, room on its GPU away from reserved nodes."""
    gs = st.groups[a.group]
    cap = caps.get(a.group) if caps else None
    for k, i in enumerate(a.nodes):
        need_whole = a.whole[k] + (
            1
            if a.frac_gpu >= 0 and gs.gfree is not None and gs.gfree[i, a.frac_gpu] == WHOLE_GPU_MILLI
            else 0
        )
        if gs.whole[i] < a.whole[k] or gs.cpu[i] < a.cpu[k] or gs.mem[i] < a.mem[k]:
            return False
        if cap is not None and (
            cap.whole[i] < need_whole
            or cap.cpu[i] < a.cpu[k]
            or cap.mem[i] < a.mem[k]
            or (a.frac_gpu >= 0 and cap.frac_blocked[i])
        ):
            return False
        if gs.gfree is not None:
            row = gs.gfree[i]
            if (
                a.gpu_ids is not None
                and a.gpu_ids[k]
                and any(row[g] != WHOLE_GPU_MILLI for g in a.gpu_ids[k])
            ):
                return False
            if a.frac_gpu >= 0 and row[a.frac_gpu] < milli:
                return False
    return True


def whole_gpus_fit(st: ClusterState, gpus: int, groups: tuple[int, ...], slack: int) -> bool:
    """Whether ``gpus`` whole GPUs (no CPU, memory or caps) fit in one of ``groups`` now.

    The same answer as ``FirstFit().place`` or ``BestFit().place`` with no CPUs, memory or caps
    is not None, from the free-GPU histograms alone: with nothing but GPUs asked, one node fits
    when some node has ``gpus`` free, and a gang fits when its ``max_nodes`` fullest nodes hold
    ``gpus`` (both gang walks then succeed). The simulator's per-shape pre-check asks exactly
    this question many times per cycle.
    """
    for g in groups:
        gs = st.groups[g]
        if gpus <= gs.G and gs.max_whole() >= gpus:
            return True
        if (gpus > gs.G or (slack > 0 and gpus >= 2)) and gs.free_whole >= gpus:
            need = math.ceil(gpus / gs.G) if gs.G else gs.n + 1
            max_nodes = min(need + slack, gs.n)
            if need <= max_nodes and gs.top_whole(max_nodes) >= gpus:
                return True
    return False


def share_fits(st: ClusterState, milli: int, groups: tuple[int, ...]) -> bool:
    """Whether a share of ``milli`` milli-GPUs (0 < milli < 1000; no CPU, memory or caps) fits in
    one of ``groups`` now: the same answer as ``FirstFit().place`` or ``BestFit().place`` with no
    CPUs, memory or caps is not None, in O(1) per group.

    A share fits where some GPU has ``milli`` free: a whole free GPU (``free_whole`` counts them in
    groups that track shares) or the partly used GPU with the most free, the last of the sorted
    ``partial`` list. Why: the embedded workload's fractional jobs ask for dozens of different
    shares, and the per-shape pre-check asked the placer about each of them in every cycle (numpy
    over every node of four groups): two thirds of a run without backfill.
    """
    for g in groups:
        gs = st.groups[g]
        if gs.partial is None:
            raise RuntimeError(f"group {g} does not track GPU shares but got a fractional job")
        if gs.free_whole > 0 or (gs.partial and gs.partial[-1][0] >= milli):
            return True
    return False


class Placer:
    """Chooses nodes for one job; ``None`` when it does not fit now."""

    name = "abstract"
    best = False  # best-fit (least leftover) instead of first-fit (lowest ids)

    def place(
        self,
        st: ClusterState,
        gpus: int,
        milli: int,
        cpu: int,
        mem: int,
        groups: tuple[int, ...],
        caps: dict[int, Caps] | None = None,
        node_slack: int = 0,
    ) -> Alloc | None:
        if gpus == 0:
            return self._cpu_only(st, cpu, mem, groups, caps)
        if milli < WHOLE_GPU_MILLI:
            return self._fractional(st, milli, cpu, mem, groups, caps)
        return self._whole(st, gpus, cpu, mem, groups, caps, node_slack)

    # -- whole GPUs -------------------------------------------------------------------------------
    def _whole(
        self,
        st: ClusterState,
        gpus: int,
        cpu: int,
        mem: int,
        groups: tuple[int, ...],
        caps: dict[int, Caps] | None,
        slack: int,
    ) -> Alloc | None:
        best: tuple[tuple[int, int], Alloc] | None = None
        for g in groups:
            gs = st.groups[g]
            cap = caps.get(g) if caps else None
            if gpus <= gs.G and gs.max_whole() >= gpus:
                if self.best and cap is None:
                    found = _best_in_buckets(gs, gpus, cpu, mem)
                    if found is not None:
                        score = (1, found[0] - gpus)
                        if best is None or score < best[0]:
                            best = (score, self._single(gs, found[1], gpus, cpu, mem))
                        continue
                whole, cpus, mems = _views(gs, cap)
                cand = ((whole >= gpus) & (cpus >= cpu) & (mems >= mem)).nonzero()[0]
                if len(cand):
                    if not self.best:
                        return self._single(gs, int(cand[0]), gpus, cpu, mem)
                    i = int(cand[whole[cand].argmin()])
                    score = (1, int(whole[i]) - gpus)
                    if best is None or score < best[0]:
                        best = (score, self._single(gs, i, gpus, cpu, mem))
                    continue
            if (gpus > gs.G or (slack > 0 and gpus >= 2)) and gs.free_whole >= gpus:
                alloc = self._gang(gs, gpus, cpu, mem, cap, slack)
                if alloc is not None:
                    if not self.best:
                        return alloc
                    score = (len(alloc.nodes), 0)
                    if best is None or score < best[0]:
                        best = (score, alloc)
        return None if best is None else best[1]

    @staticmethod
    def _gpu_ids(gs: GroupState, i: int, w: int) -> list[int] | None:
        if gs.gfree is None:
            return None
        return [g for g, v in enumerate(gs.gfree[i].tolist()) if v == WHOLE_GPU_MILLI][:w]

    def _single(self, gs: GroupState, i: int, gpus: int, cpu: int, mem: int) -> Alloc:
        ids = self._gpu_ids(gs, i, gpus)
        return Alloc(gs.index, [i], [gpus], [cpu], [mem], None if ids is None else [ids])

    def _gang(
        self, gs: GroupState, gpus: int, cpu: int, mem: int, cap: Caps | None, slack: int
    ) -> Alloc | None:
        need = math.ceil(gpus / gs.G) if gs.G else gs.n + 1
        max_nodes = min(need + slack, gs.n)
        if need > max_nodes or gs.top_whole(max_nodes) < gpus:
            return None
        whole, cpus, mems = _views(gs, cap)
        # w GPUs on a node take ceil(cpu x w / gpus) CPUs, which fits free F exactly when
        # w <= F x gpus / cpu (and the same for memory)
        usable = whole
        if cpu:
            usable = np.minimum(usable, cpus * gpus // cpu)
        if mem:
            usable = np.minimum(usable, mems * gpus // mem)
        order = np.argsort(-usable, kind="stable")[:max_nodes]
        if int(usable[order].sum()) < gpus:
            return None
        nodes: list[int] = []
        counts: list[int] = []
        rem = gpus
        if not self.best:
            # first-fit: lowest node ids first, as long as the gang stays within max_nodes
            for i in (usable > 0).nonzero()[0]:
                take = min(int(usable[i]), rem)
                nodes.append(int(i))
                counts.append(take)
                rem -= take
                if rem == 0 or len(nodes) == max_nodes:
                    break
            if rem:
                nodes, counts, rem = [], [], gpus
        if not nodes:
            # best-fit: fullest nodes first; the last piece goes to the tightest node that holds it
            chosen = set()
            for i in order:
                u = int(usable[i])
                if u >= rem:
                    rest = (usable >= rem).nonzero()[0]
                    rest = rest[[int(r) not in chosen for r in rest]]
                    j = int(rest[usable[rest].argmin()])
                    nodes.append(j)
                    counts.append(rem)
                    rem = 0
                    break
                nodes.append(int(i))
                counts.append(u)
                chosen.add(int(i))
                rem -= u
            if rem or len(nodes) > max_nodes:
                return None
        cpu_parts = [-(-cpu * w // gpus) for w in counts]
        mem_parts = [-(-mem * w // gpus) for w in counts]
        ids = (
            None
            if gs.gfree is None
            else [self._gpu_ids(gs, i, w) or [] for i, w in zip(nodes, counts, strict=True)]
        )
        return Alloc(gs.index, nodes, counts, cpu_parts, mem_parts, ids)

    # -- a share of one GPU -----------------------------------------------------------------------
    def _fractional(
        self,
        st: ClusterState,
        milli: int,
        cpu: int,
        mem: int,
        groups: tuple[int, ...],
        caps: dict[int, Caps] | None,
    ) -> Alloc | None:
        found: list[tuple[int, int, Alloc]] = []  # (leftover, position in groups, allocation)
        whole_later: list[tuple[int, GroupState, Caps | None]] = []
        for pos, g in enumerate(groups):
            gs = st.groups[g]
            if gs.gfree is None or gs.maxfrac is None or gs.partial is None:
                raise RuntimeError(f"group {g} does not track GPU shares but got a fractional job")
            cap = caps.get(g) if caps else None
            if self.best:
                # a reservation's caps bind only on its own nodes, where shares are not allowed
                skip = cap.frac_blocked_set if cap is not None else _NO_NODES
                hit = _tightest_share(gs, milli, cpu, mem, skip)
                if hit is None:
                    whole_later.append((pos, gs, cap))  # only a free whole GPU is left here
                else:
                    v, i, gpu = hit
                    found.append((v - milli, pos, Alloc(gs.index, [i], [0], [cpu], [mem], None, gpu, milli)))
                continue
            _, cpus, mems = _views(gs, cap)
            ok = (gs.maxfrac >= milli) & (cpus >= cpu) & (mems >= mem)
            if cap is not None:
                ok &= ~cap.frac_blocked
            cand = ok.nonzero()[0]
            if not len(cand):
                continue
            if not self.best:
                i = int(cand[0])
                gpu = int((gs.gfree[i] >= milli).nonzero()[0][0])
                return Alloc(gs.index, [i], [0], [cpu], [mem], None, gpu, milli)
            sub = gs.gfree[cand]
            val = np.where(sub >= milli, sub, BIG)
            flat = int(val.argmin())
            r, gpu = divmod(flat, sub.shape[1])
            found.append(
                (
                    int(val[r, gpu]) - milli,
                    pos,
                    Alloc(gs.index, [int(cand[r])], [0], [cpu], [mem], None, gpu, milli),
                )
            )
        if whole_later and min((f[0] for f in found), default=BIG) >= WHOLE_GPU_MILLI - milli:
            for pos, gs, cap in whole_later:
                first = _lowest_with_free_gpu(gs, cpu, mem) if cap is None else None
                if first is None:
                    ok = (gs.whole >= 1) & (gs.cpu >= cpu) & (gs.mem >= mem)
                    if cap is not None:
                        ok &= ~cap.frac_blocked
                    cand = ok.nonzero()[0]
                    first = int(cand[0]) if len(cand) else -1
                if first >= 0:
                    i = first
                    assert gs.gfree is not None
                    gpu = gs.gfree[i].tolist().index(WHOLE_GPU_MILLI)
                    found.append(
                        (
                            WHOLE_GPU_MILLI - milli,
                            pos,
                            Alloc(gs.index, [i], [0], [cpu], [mem], None, gpu, milli),
                        )
                    )
        if not found:
            return None
        return min(found, key=lambda f: (f[0], f[1]))[2]

    # -- no GPU at all ----------------------------------------------------------------------------
    def _cpu_only(
        self, st: ClusterState, cpu: int, mem: int, groups: tuple[int, ...], caps: dict[int, Caps] | None
    ) -> Alloc | None:
        if len(groups) > 1:
            return self._cpu_only_joined(st, cpu, mem, groups, caps)
        best: tuple[int, Alloc] | None = None
        for g in groups:
            gs = st.groups[g]
            _, cpus, mems = _views(gs, caps.get(g) if caps else None)
            cand = ((cpus >= cpu) & (mems >= mem)).nonzero()[0]
            if not len(cand):
                continue
            i = int(cand[0]) if not self.best else int(cand[cpus[cand].argmin()])
            alloc = Alloc(gs.index, [i], [0], [cpu], [mem])
            if not self.best:
                return alloc
            score = int(cpus[i]) - cpu
            if best is None or score < best[0]:
                best = (score, alloc)
        return None if best is None else best[1]

    def _cpu_only_joined(
        self, st: ClusterState, cpu: int, mem: int, groups: tuple[int, ...], caps: dict[int, Caps] | None
    ) -> Alloc | None:
        """``_cpu_only`` over many groups at once (a CPU-only pod may run on any of openb's 15):
        the groups' free CPUs and memory joined in ``groups`` order, so that the first fitting
        node (first-fit) or the first node with the least CPUs left (best-fit) is the one the
        per-group walk picks, earlier groups winning ties, in a few array operations."""
        views = [_views(st.groups[g], caps.get(g) if caps else None) for g in groups]
        cpus = np.concatenate([v[1] for v in views])
        mems = np.concatenate([v[2] for v in views])
        ok = (cpus >= cpu) & (mems >= mem)
        if self.best:
            vals = np.where(ok, cpus, BIG)
            p = int(vals.argmin())
            if vals[p] == BIG:
                return None
        else:
            p = int(ok.argmax())
            if not ok[p]:
                return None
        for g, v in zip(groups, views, strict=True):
            n = len(v[1])
            if p < n:
                return Alloc(st.groups[g].index, [p], [0], [cpu], [mem])
            p -= n
        raise AssertionError("unreachable: the index lies in one of the groups")


class FirstFit(Placer):
    """Lowest group, lowest node id that fits: the reference code's allocator, for the paper setting."""

    name = "first-fit"
    best = False


class BestFit(Placer):
    """The node (or GPU, for a share) that leaves the least free after placing: packs, defragments."""

    name = "best-fit"
    best = True


PLACERS: dict[str, type[Placer]] = {"first-fit": FirstFit, "best-fit": BestFit}


def make_placer(name: str) -> Placer:
    try:
        return PLACERS[name]()
    except KeyError:
        raise ValueError(f"unknown placement {name!r}; choose one of {', '.join(PLACERS)}") from None
