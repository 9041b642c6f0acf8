"""Free resources of every node, kept per node group as numpy arrays.

Why this shape: a fit test over a group of 549 identical nodes is one vectorized comparison, and the
per-group buckets of nodes by free whole GPUs (``bucket``) answer "can any node host k GPUs?" in O(G)
Python steps without touching the arrays, which is what most fit tests on a busy cluster need.

Fractional GPUs (Alibaba's ``gpu_milli``) are tracked per physical GPU (``gfree``, milli-GPUs free
on each GPU), but only in groups where some fractional job may run: a Philly-style cluster pays
nothing for them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI

I64 = npt.NDArray[np.int64]


@dataclass(slots=True)
class Alloc:
    """Where one running job sits: one group, one or more nodes.

    ``whole[k]`` whole GPUs, ``cpu[k]`` milli-CPUs and ``mem[k]`` MiB on ``nodes[k]``;
    ``gpu_ids[k]`` the physical GPUs used (only in groups that track GPUs); for a fractional job
    ``frac_gpu`` is the physical GPU sharing ``milli`` milli-GPUs, else -1.
    """

    group: int
    nodes: list[int]
    whole: list[int]
    cpu: list[int]
    mem: list[int]
    gpu_ids: list[list[int]] | None = None
    frac_gpu: int = -1
    milli: int = 0

    @property
    def busy_milli(self) -> int:
        return sum(self.whole) * WHOLE_GPU_MILLI + (self.milli if self.frac_gpu >= 0 else 0)

    def gpu_masks(self) -> tuple[int, ...]:
        """Per node, the bitmask of the physical GPUs its whole GPUs use (bit k = GPU k); 0 on
        every node when the group does not track GPUs (``gpu_ids`` is None: not known). How the
        messages carry ``gpu_ids`` (``node_gpu_mask``, schema version 6)."""
        if self.gpu_ids is None:
            return (0,) * len(self.nodes)
        return tuple(sum(1 << int(g) for g in ids) for ids in self.gpu_ids)


def gpu_ids_of(mask: int) -> list[int]:
    """The physical GPUs a ``node_gpu_mask`` entry names (bit k = GPU k), lowest first: the inverse
    of ``Alloc.gpu_masks`` for one node."""
    return [k for k in range(mask.bit_length()) if mask >> k & 1]


def top_from_hist(hist: list[int], m: int) -> int:
    """Free whole GPUs on the ``m`` fullest-free nodes, given ``hist[k]`` = nodes with k GPUs free."""
    total = 0
    for k in range(len(hist) - 1, 0, -1):
        c = hist[k]
        if c:
            if c >= m:
                return total + m * k
            total += c * k
            m -= c
    return total


class GroupState:
    """Free resources of the nodes of one node group."""

    __slots__ = (
        "G",
        "bucket",
        "cpu",
        "free_whole",
        "gfree",
        "index",
        "maxfrac",
        "mem",
        "n",
        "node_partial",
        "partial",
        "whole",
    )

    def __init__(self, index: int, n: int, gpus: int, cpus_milli: int, mem_mib: int, track: bool) -> None:
        self.index = index
        self.n = n
        self.G = gpus
        self.whole: I64 = np.full(n, gpus, dtype=np.int64)
        self.cpu: I64 = np.full(n, cpus_milli, dtype=np.int64)
        self.mem: I64 = np.full(n, mem_mib, dtype=np.int64)
        self.gfree: I64 | None = (
            np.full((n, gpus), WHOLE_GPU_MILLI, dtype=np.int64) if track and gpus > 0 else None
        )
        self.maxfrac: I64 | None = (
            np.full(n, WHOLE_GPU_MILLI if gpus else 0, dtype=np.int64) if self.gfree is not None else None
        )
        # bucket[k] = the nodes with exactly k whole GPUs free, in ascending id order: its size is
        # the free-GPU histogram, and best-fit picks nodes from it instead of scanning arrays,
        # breaking ties by lowest node id exactly as an array scan (argmin) does
        self.bucket: list[list[int]] = [[] for _ in range(gpus + 1)]
        self.bucket[gpus].extend(range(n))
        self.free_whole = n * gpus
        # partly used GPUs as sorted (free milli-GPUs, node, GPU): best-fit for a share is the
        # first entry with enough free on a node with the CPUs and memory, no array scan
        self.partial: list[tuple[int, int, int]] | None = [] if self.gfree is not None else None
        self.node_partial: dict[int, list[tuple[int, int, int]]] = {}

    def max_whole(self) -> int:
        bucket = self.bucket
        for k in range(self.G, 0, -1):
            if bucket[k]:
                return k
        return 0

    def top_whole(self, m: int) -> int:
        """Free whole GPUs on the ``m`` nodes with the most free: a gang's upper bound, from the histogram."""
        return top_from_hist([len(b) for b in self.bucket], m)

    def set_free(self, i: int, whole: int, cpu: int, mem: int) -> None:
        """Set node i's free resources directly (scratch copies replaying releases)."""
        self._set_whole(i, whole)
        self.cpu[i] = cpu
        self.mem[i] = mem

    def set_shares(self, i: int, row: list[int], cpu: int, mem: int) -> None:
        """Set node i's free milli-GPUs per GPU, CPUs and memory directly (scratch copies of
        groups that track shares), keeping the whole-GPU buckets and share lists in step."""
        assert self.gfree is not None
        self.gfree[i] = row
        self.cpu[i] = cpu
        self.mem[i] = mem
        self._refresh_node(i)

    def set_gpus(self, gfree: I64, cpu: I64, mem: I64) -> None:
        """Set every node's free milli-GPUs per GPU, CPUs and memory at once (a group that tracks
        shares), with the free-GPU buckets and share lists rebuilt to what taking the same
        allocations one by one leaves: a cluster state described from outside, in one pass."""
        assert self.gfree is not None
        self.gfree = np.asarray(gfree, dtype=np.int64).copy()
        self.cpu = np.asarray(cpu, dtype=np.int64).copy()
        self.mem = np.asarray(mem, dtype=np.int64).copy()
        whole = (self.gfree == WHOLE_GPU_MILLI).sum(axis=1).astype(np.int64)
        self.whole = whole
        order = np.argsort(whole, kind="stable")  # ascending node ids within each free-GPU count
        bounds = np.searchsorted(whole[order], np.arange(self.G + 2))
        self.bucket = [order[bounds[k] : bounds[k + 1]].tolist() for k in range(self.G + 1)]
        self.free_whole = int(whole.sum())
        self.maxfrac = self.gfree.max(axis=1) if self.G else np.zeros(self.n, dtype=np.int64)
        # the partly used GPUs in (node, GPU) order, as ``np.nonzero`` gives them: each node's
        # list as it is; sorted by (free, node, GPU) with one numpy sort, not a sort of tuples
        node, gpu = np.nonzero((self.gfree > 0) & (self.gfree < WHOLE_GPU_MILLI))
        value = self.gfree[node, gpu]
        entries = list(zip(value.tolist(), node.tolist(), gpu.tolist(), strict=True))
        self.partial = [entries[k] for k in np.lexsort((gpu, node, value)).tolist()]
        self.node_partial = {}
        if entries:
            cuts = (np.flatnonzero(np.diff(node)) + 1).tolist()
            for lo, hi in zip([0, *cuts], [*cuts, len(entries)], strict=True):
                self.node_partial[entries[lo][1]] = entries[lo:hi]

    def copy(self) -> GroupState:
        other = GroupState.__new__(GroupState)
        other.index, other.n, other.G = self.index, self.n, self.G
        other.whole, other.cpu, other.mem = self.whole.copy(), self.cpu.copy(), self.mem.copy()
        other.gfree = None if self.gfree is None else self.gfree.copy()
        other.maxfrac = None if self.maxfrac is None else self.maxfrac.copy()
        other.bucket = [list(b) for b in self.bucket]
        other.free_whole = self.free_whole
        other.partial = None if self.partial is None else list(self.partial)
        other.node_partial = {i: list(v) for i, v in self.node_partial.items()}
        return other

    def free_with(self, changes: dict[int, list[int]]) -> tuple[I64, I64, I64]:
        """Copies of the free whole GPUs, milli-CPUs and MiB per node with the [whole, cpu, mem]
        of ``changes`` written in (node -> values), all at once: the arrays of an overlay, for
        callers that read them without building the group."""
        whole, cpu, mem = self.whole.copy(), self.cpu.copy(), self.mem.copy()
        if changes:
            idx = np.fromiter(changes, dtype=np.int64, count=len(changes))
            vals = np.array(list(changes.values()), dtype=np.int64)
            whole[idx] = vals[:, 0]
            cpu[idx] = vals[:, 1]
            mem[idx] = vals[:, 2]
        return whole, cpu, mem

    def overlaid(self, changes: dict[int, list[int]]) -> GroupState:
        """A copy with the free [whole GPUs, milli-CPUs, MiB] of some nodes replaced (a
        reservation's scratch state): the same as ``copy`` then ``set_free`` per node, with the
        arrays written at once and, when many nodes change, the free-GPU buckets rebuilt in one
        pass. Only for groups that do not track GPU shares."""
        if self.gfree is not None:
            raise ValueError("overlaid() is for groups without per-GPU shares")
        if len(changes) * 8 < self.n:
            other = self.copy()
            for i, (w, c, m) in changes.items():
                other.set_free(i, w, c, m)
            return other
        other = GroupState.__new__(GroupState)
        other.index, other.n, other.G = self.index, self.n, self.G
        other.whole, other.cpu, other.mem = self.free_with(changes)
        other.gfree = other.maxfrac = other.partial = None
        other.node_partial = {}
        bucket: list[list[int]] = [[] for _ in range(self.G + 1)]
        for i, w in enumerate(other.whole.tolist()):
            bucket[w].append(i)
        other.bucket = bucket
        other.free_whole = int(other.whole.sum())
        return other

    def _set_whole(self, i: int, new: int) -> None:
        old = int(self.whole[i])
        if old != new:
            b = self.bucket[old]
            del b[bisect_left(b, i)]
            insort(self.bucket[new], i)
            self.free_whole += new - old
            self.whole[i] = new

    def take(self, a: Alloc) -> None:
        """Remove an allocation's resources (the job starts)."""
        gfree = self.gfree
        for k, i in enumerate(a.nodes):
            self.cpu[i] -= a.cpu[k]
            self.mem[i] -= a.mem[k]
            if gfree is None:
                if a.whole[k]:
                    self._set_whole(i, int(self.whole[i]) - a.whole[k])
                continue
            row = gfree[i]
            if a.gpu_ids is not None and a.gpu_ids[k]:
                row[a.gpu_ids[k]] = 0
            if a.frac_gpu >= 0:
                row[a.frac_gpu] -= a.milli
            self._refresh_node(i)

    def give(self, a: Alloc) -> None:
        """Return an allocation's resources (the job ends)."""
        gfree = self.gfree
        for k, i in enumerate(a.nodes):
            self.cpu[i] += a.cpu[k]
            self.mem[i] += a.mem[k]
            if gfree is None:
                if a.whole[k]:
                    self._set_whole(i, int(self.whole[i]) + a.whole[k])
                continue
            row = gfree[i]
            if a.gpu_ids is not None and a.gpu_ids[k]:
                row[a.gpu_ids[k]] = WHOLE_GPU_MILLI
            if a.frac_gpu >= 0:
                row[a.frac_gpu] += a.milli
            self._refresh_node(i)

    def _refresh_node(self, i: int) -> None:
        assert self.gfree is not None and self.maxfrac is not None and self.partial is not None
        row = self.gfree[i].tolist()
        self._set_whole(i, row.count(WHOLE_GPU_MILLI))
        self.maxfrac[i] = max(row) if self.G else 0
        partial = self.partial
        for entry in self.node_partial.pop(i, ()):
            del partial[bisect_left(partial, entry)]
        mine = [(v, i, g) for g, v in enumerate(row) if 0 < v < WHOLE_GPU_MILLI]
        if mine:
            self.node_partial[i] = mine
            for entry in mine:
                insort(partial, entry)


class ClusterState:
    """All node groups of a cluster plus the running GPU total (for utilization)."""

    def __init__(self, spec: ClusterSpec, track_groups: set[int] | None = None) -> None:
        track = track_groups or set()
        self.groups: list[GroupState] = [
            GroupState(k, g.count, g.gpus, g.cpus_milli, g.mem_mib, k in track)
            for k, g in enumerate(spec.node_groups)
        ]
        self.capacity_gpus = spec.total_gpus
        self.busy_milli = 0

    def take(self, a: Alloc) -> None:
        self.groups[a.group].take(a)
        self.busy_milli += a.busy_milli

    def give(self, a: Alloc) -> None:
        self.groups[a.group].give(a)
        self.busy_milli -= a.busy_milli

    def check_invariants(self, spec: ClusterSpec) -> None:
        """Raise if any node holds negative or more-than-capacity free resources (used by tests)."""
        for st, g in zip(self.groups, spec.node_groups, strict=True):
            if (st.whole < 0).any() or (st.whole > g.gpus).any():
                raise AssertionError(f"group {g.name}: free GPUs out of range")
            if (st.cpu < 0).any() or (st.cpu > g.cpus_milli).any():
                raise AssertionError(f"group {g.name}: free CPUs out of range")
            if (st.mem < 0).any() or (st.mem > g.mem_mib).any():
                raise AssertionError(f"group {g.name}: free memory out of range")
            if st.gfree is not None and ((st.gfree < 0).any() or (st.gfree > WHOLE_GPU_MILLI).any()):
                raise AssertionError(f"group {g.name}: per-GPU share out of range")
            if st.gfree is not None:
                expect = sorted(
                    (int(v), int(i), int(k))
                    for (i, k), v in np.ndenumerate(st.gfree)
                    if 0 < v < WHOLE_GPU_MILLI
                )
                if st.partial != expect:
                    raise AssertionError(f"group {g.name}: list of partly used GPUs out of sync")
            if any(int(st.whole[i]) != k for k, b in enumerate(st.bucket) for i in b):
                raise AssertionError(f"group {g.name}: free-GPU buckets out of sync")
            if any(b != sorted(set(b)) for b in st.bucket):
                raise AssertionError(f"group {g.name}: a free-GPU bucket is not in ascending id order")
            if sum(len(b) for b in st.bucket) != st.n or st.free_whole != int(st.whole.sum()):
                raise AssertionError(f"group {g.name}: free-GPU histogram out of sync")


def fill_group(
    gs: GroupState,
    whole: npt.ArrayLike,
    cpu: npt.ArrayLike,
    mem: npt.ArrayLike,
    share: npt.ArrayLike | None = None,
) -> None:
    """Overwrite a group's free resources (and its free-GPU buckets and share bookkeeping).

    ``share`` is each node's largest free share on one GPU; it matters only in a group that tracks
    shares (``gs.gfree``), where each node becomes ``whole`` full GPUs, then one GPU with ``share``
    free when it is a partial share and a GPU is left, then used GPUs.
    """
    w = np.asarray(whole, dtype=np.int64)
    gs.whole = w.copy()
    gs.cpu = np.asarray(cpu, dtype=np.int64).copy()
    gs.mem = np.asarray(mem, dtype=np.int64).copy()
    order = np.argsort(w, kind="stable")  # ascending node ids within each free-GPU count
    bounds = np.searchsorted(w[order], np.arange(gs.G + 2))
    gs.bucket = [order[bounds[k] : bounds[k + 1]].tolist() for k in range(gs.G + 1)]
    gs.free_whole = int(w.sum())
    if gs.gfree is None:
        return
    n, g = gs.n, gs.G
    gfree = np.where(np.arange(g)[None, :] < w[:, None], WHOLE_GPU_MILLI, 0).astype(np.int64)
    s = np.zeros(n, dtype=np.int64) if share is None else np.asarray(share, dtype=np.int64)
    part = np.flatnonzero((s > 0) & (s < WHOLE_GPU_MILLI) & (w < g))
    gfree[part, w[part]] = s[part]
    gs.gfree = gfree
    gs.maxfrac = gfree.max(axis=1) if g else np.zeros(n, dtype=np.int64)
    entries = [(int(s[i]), int(i), int(w[i])) for i in part.tolist()]
    gs.partial = sorted(entries)
    gs.node_partial = {i: [(v, i, k)] for v, i, k in entries}
