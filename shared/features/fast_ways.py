"""``ways.request_ways`` in a third of the numpy calls: the featurizer's per-decision placement counts.

Why: a decision's placement counts were ~60 numpy calls (two fit matrices, each with its own node
filtering and per-group sums, plus the gang histogram), and at a few hundred nodes the calls, not
the arithmetic, were the cost: 0.28 ms of a 0.8 ms decision on the 1,213-node Alibaba cluster.
Here the same integers come from:

- one node table per free state (``NodeTable``), in node order and so in group order: every busy
  node, and the first idle node of each group standing for all of that group's idle nodes
  (``count``), with the per-node values every request compares against;
- one fit matrix for every single-node request (whole GPUs on one node, a GPU share, CPU only):
  the GPU part of a request becomes one threshold on a node's *GPU level* (``1000 * free whole
  GPUs``, or the largest free share, at most 999, on a node without a free whole GPU), so a fit is
  three comparisons, in int32; the per-group sums of the fitting nodes' counts and partially used
  free GPUs are one ``np.add.reduceat``;
- the gang histogram of ``ways._whole_gpu_fit`` on the table's nodes with a free GPU.

The rules are ``ways.request_ways``'s (see there); ``tests/features/test_fast_ways.py`` checks
every output against it on random clusters. The level encoding relies on the view's invariant that
a node with a free whole GPU reports a free share of 1000 (``ClusterView``'s checks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.features.kernels_ways import count_kernel, kind_table_kernel, snapshot_kernel, sync_kernel
from shared.features.views import BoolArray, ClusterView, FloatArray, IntArray
from shared.features.ways import Requests

__all__ = ["NodeTable", "PlacementCounts", "RequestLevels", "node_table", "request_rows"]

I32Array = npt.NDArray[np.int32]
_I32 = np.int32
_I32_MAX = 2**31 - 1
_BIG = np.int64(1 << 40)
_NONE = np.zeros(0, dtype=np.int64)
_M_AND_M1 = np.array([0, 1], dtype=np.int64).reshape(2, 1, 1)


@dataclass(frozen=True, eq=False)
class RequestLevels:
    """Per distinct request of a workload, what the fit test compares (fixed for the run).

    level: the GPU level a node needs (``1000 * gpus`` for whole GPUs on one node, the share for a
        fractional job, 0 for a CPU-only job); cpu, mem: int32 (clipped at the int32 maximum,
        which still exceeds every node's free value); gang: the request may span several nodes of
        some group with GPUs (``ways.request_ways``'s split).
    """

    level: I32Array
    cpu: I32Array
    mem: I32Array
    gang: BoolArray

    @classmethod
    def of(cls, req: Requests, cluster: ClusterView) -> RequestLevels:
        gang = req.whole & ((req.m_nodes > 1) & (cluster.gpus_per_node > 0)[None, :]).any(axis=1)
        level = np.where(req.whole, req.gpus * WHOLE_GPU_MILLI, np.where(req.gpus == 0, 0, req.milli))
        return cls(
            level=np.minimum(level, _I32_MAX).astype(_I32),
            cpu=np.minimum(req.cpu, _I32_MAX).astype(_I32),
            mem=np.minimum(req.mem, _I32_MAX).astype(_I32),
            gang=gang,
        )


@dataclass(frozen=True, eq=False)
class NodeTable:
    """Node states of one free state, in node (so group) order; see the module docstring.

    weights: [2, n] int32: nodes each state stands for, and its free GPUs if the node is partially
    used (0 for idle states): the two sums a fit contributes to. ``gpu``: the states with a free
    whole GPU (the only ones a gang can use), as indices.
    """

    group: IntArray
    level: I32Array
    cpu: I32Array
    mem: I32Array
    whole: IntArray
    weights: I32Array
    gpu: IntArray


def node_table(cluster: ClusterView) -> NodeTable:
    """The node states of ``cluster``'s free state (all nodes must fit int32 values: < 2**31)."""
    idle = cluster.idle_node
    gon = cluster.group_of_node
    idle_at = idle.nonzero()[0]
    first = np.empty(len(idle_at), dtype=bool)
    first[:1] = True
    idle_group = gon[idle_at]
    np.not_equal(idle_group[1:], idle_group[:-1], out=first[1:])
    keep = ~idle
    keep[idle_at[first]] = True
    at = keep.nonzero()[0]
    group = gon[at]
    whole = cluster.free_gpus[at]
    is_idle = idle[at]
    weights = np.empty((2, len(at)), dtype=_I32)
    weights[0] = np.where(is_idle, cluster.idle_by_group[group], 1)
    weights[1] = np.where(is_idle, 0, whole)
    level = np.where(whole > 0, whole * WHOLE_GPU_MILLI, np.minimum(cluster.free_share_milli[at], 999))
    return NodeTable(
        group=group,
        level=level.astype(_I32),
        cpu=cluster.free_cpus_milli[at].astype(_I32),
        mem=cluster.free_mem_mib[at].astype(_I32),
        whole=whole,
        weights=weights,
        gpu=(whole > 0).nonzero()[0],
    )


def _single_counts(
    t: NodeTable, level: I32Array, cpu: I32Array, mem: I32Array, n_groups: int
) -> tuple[IntArray, IntArray]:
    """(fitting nodes, their partially used free GPUs) [R, n_groups] of single-node requests: one
    fit matrix over the states that fit at least the smallest request in every resource (the others
    add nothing to either sum), summed per group (``np.add.reduceat`` over the states' group runs)."""
    keep = (t.level >= level.min()) & (t.cpu >= cpu.min()) & (t.mem >= mem.min())
    at = keep.nonzero()[0]
    ways = np.zeros((len(level), n_groups), dtype=np.int64)
    inside = np.zeros_like(ways)
    if len(at):
        fit = t.level[at] >= level[:, None]
        fit &= t.cpu[at] >= cpu[:, None]
        fit &= t.mem[at] >= mem[:, None]
        group = t.group[at]
        change = np.empty(len(group), dtype=bool)
        change[:1] = True
        np.not_equal(group[1:], group[:-1], out=change[1:])
        starts = change.nonzero()[0]
        heads = group[starts]
        w = t.weights[:, at]
        ways[:, heads] = np.add.reduceat(fit * w[0], starts, axis=1)
        inside[:, heads] = np.add.reduceat(fit * w[1], starts, axis=1)
    return ways, inside


def _usable(
    whole: IntArray, cpu: npt.NDArray[np.integer], mem: npt.NDArray[np.integer], r: _Gangs
) -> IntArray:
    """[R, n] GPUs each node can give each gang request: ``min(w, C*g//c, Mem*g//m)`` (the placer's
    rule, as ``ways._whole_gpu_fit``; a zero CPU or memory request sets no limit)."""
    usable = np.minimum(whole[None, :], _limit(cpu, r.gpus, r.cpu))
    np.minimum(usable, _limit(mem, r.gpus, r.mem), out=usable)
    return usable


def _usable_stacked(whole: IntArray, free: IntArray, gpus: IntArray, request: IntArray) -> IntArray:
    """``_usable`` with the nodes' (CPUs, memory) as ``free`` [2, n] and the requests' as
    ``request`` [R, 2]: the same integers in fewer calls."""
    limit = free[None, :, :] * gpus[:, None, None] // np.maximum(request, 1)[:, :, None]  # [R, 2, n]
    if request.min() <= 0:
        limit = np.where(request[:, :, None] > 0, limit, _BIG)
    usable: IntArray = np.minimum(whole[None, :], np.minimum.reduce(limit, axis=1))
    return usable


def _limit(free: npt.NDArray[np.integer], gpus: IntArray, request: IntArray) -> IntArray:
    limit: IntArray = free[None, :].astype(np.int64) * gpus[:, None] // np.maximum(request, 1)[:, None]
    if request.min() > 0:
        return limit
    return np.where(request[:, None] > 0, limit, _BIG)


@dataclass(frozen=True, eq=False)
class _Gangs:
    """Gang requests' fields (a subset of ``Requests``'s rows)."""

    gpus: IntArray
    cpu: IntArray
    mem: IntArray
    m_nodes: IntArray  # [R, n_groups]
    need_ok: BoolArray  # [R, n_groups]

    @classmethod
    def of(cls, req: Requests, rows: IntArray) -> _Gangs:
        return cls(req.gpus[rows], req.cpu[rows], req.mem[rows], req.m_nodes[rows], req.need_ok[rows])


def _gang_hist(t: NodeTable, r: _Gangs, n_groups: int, n_bins: int) -> tuple[IntArray, FloatArray]:
    """Per (request, group, usable GPUs u): nodes, and their partially used free GPUs
    ([R, n_groups * n_bins] each), over the table's states with a free GPU (``_whole_gpu_fit``'s
    histogram; u <= GPUs per node < n_bins - 1, so the last bin stays empty: a sentinel)."""
    at = t.gpu
    usable = _usable(t.whole[at], t.cpu[at], t.mem[at], r)
    n = len(r.gpus)
    cell = ((np.arange(n)[:, None] * n_groups + t.group[at]) * n_bins + usable).ravel()
    size = n * n_groups * n_bins
    w = t.weights[:, at]
    weights = w[:, None, :].repeat(n, axis=1).reshape(2, -1)  # each state's weights, once per request
    hist = np.bincount(cell, weights=weights[0], minlength=size).astype(np.int64)
    partial = np.asarray(np.bincount(cell, weights=weights[1], minlength=size), dtype=np.float64)
    return hist.reshape(n, -1), partial.reshape(n, -1)


def _gang_rows(
    hist: IntArray, partial: FloatArray, r: _Gangs, n_groups: int, n_bins: int
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """(ways, stranded, feasible) [R, n_groups] of gang requests from their histograms (the bin
    u = 0 is never read: nodes there can take part in no placement, and hold no partially used free
    GPU unless they have a free GPU, whose counts ``partial`` keeps in that bin)."""
    n = len(r.gpus)
    hist = hist.reshape(n * n_groups, n_bins)
    partial_below = partial.reshape(n * n_groups, n_bins).cumsum(axis=-1)
    at_least = hist[:, ::-1].cumsum(axis=-1)[:, ::-1]  # at_least[:, v] = nodes with u >= v
    # the sum of the top M values of a group is sum over v >= 1 of min(#{u >= v}, M); M and M - 1
    m = r.m_nodes.reshape(1, -1, 1) - _M_AND_M1
    top_m, top_m1 = np.add.reduce(np.minimum(at_least[:, 1:], m), axis=-1)
    g = r.gpus.repeat(n_groups)
    feasible = top_m >= g
    # a node takes part in some feasible placement iff u >= max(1, gpus - (sum of the top M-1 others))
    thr = np.where(feasible, np.maximum(1, g - top_m1), n_bins - 1)
    cells = np.arange(n * n_groups)
    ways = at_least[cells, thr].astype(np.float64).reshape(n, n_groups)
    stranded = partial_below[cells, thr - 1].reshape(n, n_groups)
    return ways, stranded, feasible.reshape(n, n_groups) & r.need_ok


def _node_level(whole: IntArray, share: IntArray, idle: BoolArray) -> tuple[IntArray, IntArray]:
    """Per node: the GPU level single-node requests compare against (see the module docstring), and
    the free GPUs it holds if partially used (0 when idle): what stranded GPUs count."""
    level = np.where(whole > 0, whole * WHOLE_GPU_MILLI, np.minimum(share, 999))
    return level, np.where(idle, 0, whole)


def _bins(cluster: ClusterView) -> int:
    return max(int(cluster.gpus_per_node.max()), 1) + 2


def request_rows(
    req: Requests, levels: RequestLevels, rows: IntArray, cluster: ClusterView, t: NodeTable
) -> FloatArray:
    """[len(rows), n_groups, 3]: ``ways.request_ways(req, rows, cluster, nodes)``, from the table."""
    n_groups = cluster.n_groups
    out = np.empty((len(rows), n_groups, 3))
    gang = levels.gang[rows]
    single: IntArray | slice = slice(None)
    if gang.any():
        sel = gang.nonzero()[0]
        r = _Gangs.of(req, rows[sel])
        n_bins = _bins(cluster)
        hist, partial = _gang_hist(t, r, n_groups, n_bins)
        out[sel, :, 0], out[sel, :, 1], out[sel, :, 2] = _gang_rows(hist, partial, r, n_groups, n_bins)
        single = (~gang).nonzero()[0]
        rows = rows[single]
    if len(rows):
        ways, inside = _single_counts(t, levels.level[rows], levels.cpu[rows], levels.mem[rows], n_groups)
        out[single, :, 0] = ways
        out[single, :, 1] = cluster.partial_free_by_group[None, :] - inside
        out[single, :, 2] = ways > 0
    return out


class PlacementCounts:
    """``request_rows`` across a run's free states, kept up to date from the nodes that changed.

    Why: between two decisions of a simulation one job or a few started or ended, so a handful of
    nodes changed; recounting every request over every node (0.1-0.3 ms) redoes work whose
    result moved by a few units. What is kept, per request of the workload seen so far, on the
    free state of the last ``rows`` call (``_raw``: every node's free GPUs, share, CPUs and memory):

    - single-node requests: fitting nodes per group and their partially used free GPUs;
    - gangs: the histogram of ``_gang_hist`` per group and usable GPUs (nodes, partially used
      free GPUs).

    ``rows`` compares the view's node arrays with the snapshot (a few O(nodes) comparisons); for
    the changed nodes it subtracts their old contributions and adds their new ones (integers:
    exact, so the counts stay equal to a recount), then counts the requests not seen before on
    the whole state. More than ``max_changed`` changed nodes (a new episode, a big batch of
    starts), a cluster of another shape, or ``reset``, and it starts over from the state.
    ``tests/features/test_fast_ways.py`` checks the rows against ``ways.request_ways`` along
    simulated runs.
    """

    def __init__(self, req: Requests, levels: RequestLevels, max_changed: int = 64) -> None:
        self.req = req
        self.levels = levels
        self.max_changed = max_changed
        n_req = len(req.gpus)
        gang = levels.gang
        self._slot = np.cumsum(gang) - 1  # each gang request's row in the histograms
        self._n_gang = int(gang.sum())
        self._valid = np.zeros(n_req, dtype=bool)
        # what an update compares, per request: single-node requests' (level, CPUs, memory)
        # thresholds; gangs' GPUs and (CPUs, memory), by histogram row
        self._thr = np.stack((levels.level, levels.cpu, levels.mem), axis=1).astype(np.int64)
        self._gang_gpus = req.gpus[gang]
        self._gang_req = np.stack((req.cpu[gang], req.mem[gang]), axis=1)
        # the valid requests, as lists the update reads (rebuilt when requests are counted)
        self._single_rows = _NONE
        self._gang_slots = _NONE
        # the snapshot: free whole GPUs, share, CPUs, memory of every node (compared), and what
        # the counts read of each node: GPU level and partially used free GPUs
        self._raw: IntArray | None = None  # [4, nodes]
        self._derived = np.zeros((2, 0), dtype=np.int64)
        self._shape: tuple[int, int, int] = (0, 0, 0)  # nodes, groups, histogram bins
        #: single-node requests: [fitting nodes per group | their partially used free GPUs]
        self._counts = np.zeros((0, 0), dtype=np.int64)
        self._hist = np.zeros((0, 0), dtype=np.int64)
        self._phist = np.zeros((0, 0))
        self._signs: dict[int, IntArray] = {}
        self.updates = 0  # incremental updates made (for tests and benchmarks)
        #: update through ``kernels_ways.sync_kernel``, count through ``count_kernel`` and sum per
        #: job kind through ``kind_table_kernel`` (False: the numpy expressions below)
        self.compiled = True
        # the compiled kernels' per-request inputs (int64 / bool, C-contiguous)
        self._gang_c = np.ascontiguousarray(gang, dtype=np.bool_)
        self._slot_c = np.ascontiguousarray(self._slot, dtype=np.int64)
        self._gang_gpus_c = np.ascontiguousarray(self._gang_gpus, dtype=np.int64)
        self._gang_req_c = np.ascontiguousarray(self._gang_req, dtype=np.int64)
        self._m_nodes_c = np.ascontiguousarray(req.m_nodes, dtype=np.int64)
        self._need_ok_c = np.ascontiguousarray(req.need_ok, dtype=np.bool_)
        #: ``kinds``: per job kind, the call that last wrote its row (``kind_table_kernel``'s mark)
        self._mark = np.zeros(0, dtype=np.int64)
        self._stamp = 0

    def reset(self) -> None:
        """Forget the snapshot: the next ``rows`` counts everything on its state."""
        self._raw = None

    def rows(self, uniq: IntArray, cluster: ClusterView) -> FloatArray:
        """[len(uniq), n_groups, 3]: ``request_rows`` of requests ``uniq`` (sorted, distinct) on
        ``cluster``'s free state."""
        self._sync(cluster)
        new = uniq[~self._valid[uniq]]
        if len(new):
            self._count(new, cluster)
        return self._assemble(uniq, cluster)

    def kinds(
        self,
        idx: IntArray,
        job_kind: IntArray,
        kind_req: IntArray,
        kind_elig: FloatArray,
        cluster: ClusterView,
        table: FloatArray,
    ) -> None:
        """Rows ``job_kind[idx]`` of ``table`` [K, 5] (K job kinds: request ``kind_req``, eligible
        groups ``kind_elig`` 0/1): ``fast._per_kind`` of the ``rows`` of the queued jobs'
        requests on ``cluster``'s free state (ways, stranded GPUs, feasibility, the pool's free
        GPUs and idle nodes), the other rows untouched. Compiled only (``compiled``): the update,
        the new requests' counts and the per-kind sums are one kernel call each.

        Why: on the 1,213-node openb cluster the numpy assembly of a 256-job queue's rows and
        their per-kind sums took ~80 us of a 0.23 ms decision (about 30 numpy calls on small
        arrays), the kernel ~5 us. Integer-valued sums: the same numbers."""
        self._sync(cluster)
        if len(self._mark) != len(kind_req):
            self._mark = np.zeros(len(kind_req), dtype=np.int64)
            self._stamp = 0
        for _ in range(2):  # a second time after counting requests not seen before
            self._stamp += 1
            done = kind_table_kernel(
                idx,
                job_kind,
                kind_req,
                kind_elig,
                self._valid,
                self._gang_c,
                self._slot_c,
                self._counts,
                self._hist,
                self._phist,
                self._gang_gpus_c,
                self._m_nodes_c,
                self._need_ok_c,
                cluster.free_by_group,
                cluster.idle_by_group,
                cluster.partial_free_by_group,
                self._shape[2],
                self._mark,
                self._stamp,
                table,
            )
            if done >= 0:
                return
            req = np.unique(kind_req[job_kind[idx]])
            self._count(req[~self._valid[req]], cluster)
        raise AssertionError("requests counted, still not valid")  # pragma: no cover

    # -- internals --------------------------------------------------------------------------------

    def _sync(self, cluster: ClusterView) -> None:
        raw = self._raw
        if self.compiled:
            shape = (len(cluster.free_gpus), len(cluster.node_count), _bins(cluster))
            if raw is not None and shape == self._shape:
                changed = sync_kernel(
                    cluster.free_gpus,
                    cluster.free_share_milli,
                    cluster.free_cpus_milli,
                    cluster.free_mem_mib,
                    cluster.idle_node,
                    cluster.group_of_node,
                    raw,
                    self._derived,
                    self._counts,
                    self._single_rows,
                    self._thr,
                    self._hist,
                    self._phist,
                    self._gang_slots,
                    self._gang_gpus,
                    self._gang_req,
                    shape[1],
                    shape[2],
                    int(_BIG),
                    self.max_changed,
                )
                if changed > 0:
                    self.updates += 1
                if changed >= 0:
                    return
            # a first state, another shape or too many changes: a new snapshot in one call
            if raw is None or raw.shape[1] != shape[0]:
                raw = np.empty((4, shape[0]), dtype=np.int64)
                self._derived = np.empty((2, shape[0]), dtype=np.int64)
            snapshot_kernel(
                cluster.free_gpus,
                cluster.free_share_milli,
                cluster.free_cpus_milli,
                cluster.free_mem_mib,
                cluster.idle_node,
                raw,
                self._derived,
            )
            self._restart(raw, shape)
            return
        now = np.stack(
            (cluster.free_gpus, cluster.free_share_milli, cluster.free_cpus_milli, cluster.free_mem_mib)
        )
        shape = (now.shape[1], cluster.n_groups, _bins(cluster))
        if raw is None or shape != self._shape:
            self._start(now, cluster, shape)
            return
        at = np.logical_or.reduce(now != raw, axis=0).nonzero()[0]
        k = len(at)
        if not k:
            return
        if k > self.max_changed:
            self._start(now, cluster, shape)
            return
        self.updates += 1
        # the changed nodes twice: as they were (subtracted), then as they are (added)
        new = now[:, at]
        derived = np.array(_node_level(new[0], new[1], cluster.idle_node[at]))
        both = np.concatenate((raw[:, at], new), axis=1)  # [4, 2k]: whole, share, cpu, mem
        level_pf = np.concatenate((self._derived[:, at], derived), axis=1)  # [2, 2k]
        group = cluster.group_of_node[at]
        group2 = np.concatenate((group, group))
        sign = self._sign(k)
        n_groups = shape[1]
        single = self._single_rows
        if len(single):
            # (level, CPUs, memory) of each node version against each request's thresholds
            values = np.array((level_pf[0], both[2], both[3]))
            fit = np.logical_and.reduce(values >= self._thr[single, :, None], axis=1)  # [S, 2k]
            signed = np.zeros((2 * k, 2 * n_groups))  # node -> its group's two columns
            rows2 = np.arange(2 * k)
            signed[rows2, group2] = sign
            signed[rows2, group2 + n_groups] = sign * level_pf[1]
            # integer-valued float64 products of 0/1 and small integers: exact
            self._counts[single] += (fit @ signed).astype(np.int64)
        # a node without a free whole GPU before and after adds nothing to any gang histogram
        # (usable GPUs 0 and no partially used free GPU, both times)
        slots = self._gang_slots
        if len(slots) and both[0].any():
            usable = _usable_stacked(both[0], both[2:], self._gang_gpus[slots], self._gang_req[slots])
            cell = ((slots[:, None] * n_groups + group2) * shape[2] + usable).ravel()
            np.add.at(self._hist.reshape(-1), cell, np.broadcast_to(sign, usable.shape).ravel())
            np.add.at(
                self._phist.reshape(-1), cell, np.broadcast_to(sign * level_pf[1], usable.shape).ravel()
            )
        raw[:, at] = new
        self._derived[:, at] = derived

    def _sign(self, k: int) -> IntArray:
        """-1 for the k nodes as they were, +1 for them as they are."""
        sign = self._signs.get(k)
        if sign is None:
            sign = self._signs[k] = np.repeat(np.array([-1, 1], dtype=np.int64), k)
        return sign

    def _start(self, now: IntArray, cluster: ClusterView, shape: tuple[int, int, int]) -> None:
        self._derived = np.array(_node_level(now[0], now[1], cluster.idle_node))
        self._restart(now, shape)

    def _restart(self, raw: IntArray, shape: tuple[int, int, int]) -> None:
        """A new snapshot ``raw`` (``_derived`` already its own): nothing counted on it yet."""
        self._raw = raw
        if shape != self._shape:
            n_req = len(self.req.gpus)
            self._shape = shape
            self._counts = np.zeros((n_req, 2 * shape[1]), dtype=np.int64)
            self._hist = np.zeros((self._n_gang, shape[1] * shape[2]), dtype=np.int64)
            self._phist = np.zeros((self._n_gang, shape[1] * shape[2]))
        self._valid[:] = False
        self._single_rows = self._gang_slots = _NONE

    def _count(self, rows: IntArray, cluster: ClusterView) -> None:
        """Count requests ``rows`` on the whole state (the snapshot's)."""
        n_groups, n_bins = self._shape[1], self._shape[2]
        lv = self.levels
        gang = lv.gang[rows]
        if self.compiled:
            assert self._raw is not None
            count_kernel(
                np.ascontiguousarray(rows, dtype=np.int64),
                self._gang_c,
                self._slot_c,
                self._raw,
                self._derived,
                cluster.group_of_node,
                self._thr,
                self._gang_gpus_c,
                self._gang_req_c,
                self._counts,
                self._hist,
                self._phist,
                n_groups,
                n_bins,
                int(_BIG),
            )
            self._valid[rows] = True
            self._single_rows = (self._valid & ~lv.gang).nonzero()[0]
            self._gang_slots = self._slot[self._valid & lv.gang]
            return
        t = node_table(cluster)
        if gang.any():
            g_rows = rows[gang]
            hist, partial = _gang_hist(t, _Gangs.of(self.req, g_rows), n_groups, n_bins)
            slot = self._slot[g_rows]
            self._hist[slot], self._phist[slot] = hist, partial
            rows = rows[~gang]
        if len(rows):
            ways, inside = _single_counts(t, lv.level[rows], lv.cpu[rows], lv.mem[rows], n_groups)
            self._counts[rows] = np.concatenate((ways, inside), axis=1)
        self._valid[rows] = True
        if gang.any():
            self._valid[g_rows] = True
        self._single_rows = (self._valid & ~lv.gang).nonzero()[0]
        self._gang_slots = self._slot[self._valid & lv.gang]

    def _assemble(self, uniq: IntArray, cluster: ClusterView) -> FloatArray:
        n_groups, n_bins = self._shape[1], self._shape[2]
        out = np.empty((len(uniq), n_groups, 3))
        gang = self.levels.gang[uniq]
        single: IntArray | slice = slice(None)
        rows = uniq
        if gang.any():
            sel = gang.nonzero()[0]
            g_rows = uniq[sel]
            slot = self._slot[g_rows]
            r = _Gangs.of(self.req, g_rows)
            out[sel, :, 0], out[sel, :, 1], out[sel, :, 2] = _gang_rows(
                self._hist[slot], self._phist[slot], r, n_groups, n_bins
            )
            single = (~gang).nonzero()[0]
            rows = uniq[single]
        if len(rows):
            counts = self._counts[rows]
            ways = counts[:, :n_groups]
            out[single, :, 0] = ways
            out[single, :, 1] = cluster.partial_free_by_group[None, :] - counts[:, n_groups:]
            out[single, :, 2] = ways > 0
        return out
