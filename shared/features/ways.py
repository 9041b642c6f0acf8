"""Where each queued job could start now: nodes usable, feasibility, stranded GPUs.

The rules are the simulator's (``shared/scheduling/placement.py``), so ``can_schedule_now`` agrees with
what the placer would do on the same free state (reservations aside):

- a job runs inside one node group;
- whole GPUs: on one node when ``gpus <= gpus_per_node``, else a gang over at most
  ``M = ceil(gpus / gpus_per_node) + node_slack`` nodes (``node_slack > 0`` also lets 2+ GPU jobs
  split), CPU and memory split in proportion to the GPUs on each node, so a node with ``w`` free
  GPUs, ``C`` free CPUs and ``Mem`` free memory can give ``u = min(w, C*gpus//cpus, Mem*gpus//mem)``
  GPUs to the job;
- a fractional job needs one GPU with at least its share free, plus its CPUs and memory, on one node;
- a CPU-only job needs its CPUs and memory on one node.

How it stays vectorized: jobs with the same request share one computation (``Requests``), and
the idle nodes of a group are one node state. Whole-GPU requests: the usable GPUs ``u`` of every
(request, node with a free GPU) come from one array expression and are histogrammed per
(request, group, u); since ``u <= gpus_per_node <= 64``, the sum of the top M values of a group is
``sum_v min(#{u >= v}, M)`` and "how many nodes could take part in a placement" is a lookup in that
histogram. Single-node requests (shares, CPU-only): one boolean fit matrix summed per group
(``np.add.reduceat``). No loop over jobs or nodes; the only sort is over the queue's request keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.features.views import BoolArray, ClusterView, FloatArray, IntArray, QueueView

__all__ = ["Requests", "Ways", "distinct_requests", "placement_ways", "request_ways", "ways_on_empty"]

_BIG = np.int64(1 << 40)
_I32_MAX = 2**31 - 1
_NARROW_FROM = 4096  # fit-matrix cells from which the int32 comparison pays for its casts


@dataclass(frozen=True, eq=False)
class Ways:
    """Per queued job, summed over its eligible node groups.

    ways: nodes that could be part of a placement of the job now (for a single-node job: the
        nodes that can host it; for a gang: the nodes that belong to at least one feasible gang).
    ways_empty: the same count on the empty cluster (the normalizer of ``num_ways``).
    can_now: the job fits somewhere now (resources only, no reservation).
    stranded_gpus: free whole GPUs on partially used nodes of its pool that it cannot use.
    """

    ways: FloatArray
    ways_empty: FloatArray
    can_now: BoolArray
    stranded_gpus: FloatArray


@dataclass(frozen=True, eq=False)
class Requests:
    """The distinct resource requests of a queue, and their node limits in every group.

    inverse: [Q] the request of each queued job.
    gpus, milli, cpu, mem: [R] the requests; ``whole`` marks whole-GPU ones.
    need: [R, n_groups] fewest nodes that can hold the request (1 for shares and CPU-only jobs;
        huge in a group without GPUs); ``m_nodes`` the most a placement may use
        (``need + node_slack`` for 2+ GPU jobs, capped by the group's nodes); ``need_ok`` whether
        the group has ``need`` nodes at all.
    """

    inverse: IntArray
    gpus: IntArray
    milli: IntArray
    cpu: IntArray
    mem: IntArray
    whole: BoolArray
    need: IntArray
    m_nodes: IntArray
    need_ok: BoolArray


def _unique_inverse(key: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(key, return_inverse=True)`` in a few C calls (np.unique's Python layers cost
    more than the sort itself on a few hundred keys)."""
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    new = np.empty(len(key), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inverse = np.empty(len(key), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def distinct_requests(queue: QueueView, cluster: ClusterView) -> Requests:
    """Deduplicate the queue's requests (one ``np.unique`` over a packed key)."""
    cols = np.stack((queue.gpus, queue.gpu_milli, queue.cpus_milli, queue.mem_mib))  # [4, Q]
    if len(queue) == 0:
        rows = np.zeros((4, 0), dtype=np.int64)
        inverse = np.zeros(0, dtype=np.int64)
    else:
        widths = [max(int(m).bit_length(), 1) for m in cols.max(axis=1)]
        if sum(widths) <= 62:
            shifts = np.asarray([sum(widths[k + 1 :]) for k in range(4)], dtype=np.int64)[:, None]
            masks = (np.int64(1) << np.asarray(widths, dtype=np.int64))[:, None] - 1
            uniq, inverse = _unique_inverse(np.bitwise_or.reduce(cols << shifts, axis=0))
            rows = (uniq[None, :] >> shifts) & masks
        else:
            unique_rows, inverse = np.unique(cols.T, axis=0, return_inverse=True)
            rows = unique_rows.T
    g, milli, cpu, mem = rows
    whole = (milli == WHOLE_GPU_MILLI) & (g > 0)
    gpn = cluster.gpus_per_node
    count = cluster.node_count
    need_whole = np.where(gpn[None, :] > 0, -(-g[:, None] // np.maximum(gpn, 1)[None, :]), _BIG)
    need = np.where(whole[:, None], need_whole, 1)
    slack = np.where(whole & (g >= 2), cluster.node_slack, 0)
    return Requests(
        inverse=inverse.reshape(-1),
        gpus=g,
        milli=milli,
        cpu=cpu,
        mem=mem,
        whole=whole,
        need=need,
        m_nodes=np.minimum(need + slack[:, None], count[None, :]),
        need_ok=need <= count[None, :],
    )


def _gpu_limit(free: IntArray, gpus: IntArray, request: IntArray) -> IntArray:
    """GPUs a node with ``free`` CPUs (or memory) can give a job asking ``request`` for ``gpus`` GPUs.

    ``w`` GPUs take ``ceil(request * w / gpus)``, which fits ``free`` exactly when
    ``w <= free * gpus // request`` (the placer's rule); a zero request sets no limit.
    """
    safe = np.maximum(request, 1)[:, None]
    limit: IntArray = free[None, :] * gpus[:, None] // safe
    return np.where(request[:, None] > 0, limit, _BIG)


@dataclass(frozen=True, eq=False)
class _Nodes:
    """Node states (group, free GPUs, free share, free CPUs, free memory), with multiplicity.

    The first ``n_busy`` are the busy (not idle) nodes one by one, in group order; then one state
    per group that has idle nodes, ``count`` of them. ``partial_free`` is the free GPUs of a busy
    node (0 for idle states): the GPUs that fragmentation is about.
    """

    group: IntArray
    whole: IntArray
    share: IntArray
    cpu: IntArray
    mem: IntArray
    count: IntArray
    partial_free: IntArray
    n_busy: int

    def subset(self, keep: BoolArray) -> _Nodes:
        arrays = (self.group, self.whole, self.share, self.cpu, self.mem, self.count, self.partial_free)
        group, whole, share, cpu, mem, count, partial_free = (a[keep] for a in arrays)
        n_busy = int(np.count_nonzero(keep[: self.n_busy]))
        return _Nodes(group, whole, share, cpu, mem, count, partial_free, n_busy)


def _node_states(cluster: ClusterView) -> _Nodes:
    """Idle nodes of a group are identical, so each group's idle nodes become one state.

    Cheaper than a full deduplication (no sort), and it is what shrinks a lightly loaded cluster
    (Alibaba: 1,213 nodes, 15 idle states); busy nodes are kept one by one.
    """
    busy = np.flatnonzero(~cluster.idle_node)
    idle_count = cluster.idle_by_group
    with_idle = np.flatnonzero(idle_count)
    gpn = cluster.gpus_per_node[with_idle]
    free = cluster.free_gpus[busy]
    return _Nodes(
        group=np.concatenate((cluster.group_of_node[busy], with_idle)),
        whole=np.concatenate((free, gpn)),
        share=np.concatenate((cluster.free_share_milli[busy], np.where(gpn > 0, WHOLE_GPU_MILLI, 0))),
        cpu=np.concatenate((cluster.free_cpus_milli[busy], cluster.cpus_per_node_milli[with_idle])),
        mem=np.concatenate((cluster.free_mem_mib[busy], cluster.mem_per_node_mib[with_idle])),
        count=np.concatenate((np.ones(len(busy), dtype=np.int64), idle_count[with_idle])),
        partial_free=np.concatenate((free, np.zeros(len(with_idle), dtype=np.int64))),
        n_busy=len(busy),
    )


def _segment_starts(group: IntArray) -> IntArray:
    """Start of each run of equal values in ``group`` (sorted by group)."""
    change = np.empty(len(group), dtype=bool)
    change[:1] = True
    np.not_equal(group[1:], group[:-1], out=change[1:])
    return np.flatnonzero(change)


def _group_sums(values: npt.NDArray[np.generic], group: IntArray, n_groups: int) -> IntArray:
    """[R, n_groups]: sums of the columns of ``values`` [R, U] per group; columns sorted by group.

    ``np.add.reduceat`` over the group segments. (Not a matrix product: a product this size goes
    to a multithreaded BLAS, which on a busy 2-core machine was 100 times slower.)
    """
    out = np.zeros((values.shape[0], n_groups), dtype=np.int64)
    if values.shape[1]:
        starts = _segment_starts(group)
        out[:, group[starts]] = np.add.reduceat(values, starts, axis=1, dtype=np.int64)
    return out


def _single_node_fit(
    nodes: _Nodes, partial_g: IntArray, share: IntArray, cpu: IntArray, mem: IntArray, whole: IntArray
) -> tuple[IntArray, IntArray]:
    """(ways, stranded) [R, n_groups] of requests that need one node: ``whole`` free whole GPUs (a
    whole-GPU job that fits one node), a GPU share, and/or CPUs and memory.

    One boolean fit matrix; busy nodes are summed per group, idle states weighted by their count.
    Nodes short of the smallest request in some resource fit none and are dropped first (exactly:
    they add nothing to the ways or to the GPUs inside a fit); on a busy cluster most are.

    A whole-GPU job on one node is the gang rule with M = 1: a node takes part iff its usable GPUs
    ``u = min(w, C*g//c, Mem*g//m) >= g``, i.e. iff ``w >= g``, ``C >= c`` and ``Mem >= m`` (for
    c > 0, ``C*g//c >= g`` iff ``C >= c``); the stranded GPUs are then those of the other partially
    used nodes, as in ``_whole_gpu_fit``.
    """
    if len(share) and len(nodes.group):
        keep = (
            (nodes.whole >= whole.min())
            & (nodes.share >= share.min())
            & (nodes.cpu >= cpu.min())
            & (nodes.mem >= mem.min())
        )
        nodes = nodes.subset(keep)
    pairs = [(nodes.whole, whole), (nodes.share, share), (nodes.cpu, cpu), (nodes.mem, mem)]
    if len(share) * len(nodes.group) >= _NARROW_FROM:
        # large matrices: compare in int32 (twice the SIMD width). Lossless for the nodes' free
        # resources (bounded by capacities < 2**31, checked); a request above the bound is
        # clipped to it and still exceeds every node's value, so every comparison is unchanged
        top = max(int(a.max()) for a, _ in pairs) if len(nodes.group) else 0
        if top < _I32_MAX:
            pairs = [(a.astype(np.int32), np.minimum(b, _I32_MAX).astype(np.int32)) for a, b in pairs]
    fit = np.ones((len(share), len(nodes.group)), dtype=bool)
    for free, need in pairs:
        fit &= free[None, :] >= need[:, None]
    n_groups = len(partial_g)
    nb = nodes.n_busy
    busy_group = nodes.group[:nb]
    ways = _group_sums(fit[:, :nb], busy_group, n_groups)
    ways[:, nodes.group[nb:]] += fit[:, nb:] * nodes.count[nb:]
    # only busy nodes with a free GPU hold partially used free GPUs
    cols = np.flatnonzero(nodes.partial_free[:nb])
    inside = _group_sums(fit[:, cols] * nodes.partial_free[cols], busy_group[cols], n_groups)
    return ways, partial_g[None, :] - inside


def _whole_gpu_fit(
    nodes: _Nodes, cluster: ClusterView, gpus: IntArray, cpu: IntArray, mem: IntArray, m_nodes: IntArray
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """(ways, stranded, feasible) [R, n_groups] of whole-GPU requests, single node or gang.

    Only nodes with a free GPU can give any, so the others are dropped first (exactly: they hold
    no free GPU to strand either). ``m_nodes`` [R, n_groups] is the most nodes a placement may use.
    """
    n_groups = cluster.n_groups
    r = len(gpus)
    nodes = nodes.subset(nodes.whole > 0)
    usable = np.minimum(
        np.minimum(nodes.whole[None, :], _gpu_limit(nodes.cpu, gpus, cpu)), _gpu_limit(nodes.mem, gpus, mem)
    )
    # histogram per (request, group, usable value); the last bin stays empty (a sentinel). Node
    # counts and partially-used free GPUs go through one bincount, as two halves.
    n_bins = max(int(cluster.gpus_per_node.max()), 1) + 2
    cell = (
        (np.arange(r, dtype=np.int64)[:, None] * n_groups + nodes.group[None, :]) * n_bins + usable
    ).ravel()
    size = r * n_groups * n_bins
    weights = np.stack((nodes.count, nodes.partial_free))[:, None, :].repeat(r, axis=1).astype(np.float64)
    both = np.bincount(np.concatenate((cell, cell + size)), weights=weights.ravel(), minlength=2 * size)
    hist = both[:size].astype(np.int64).reshape(r, n_groups, n_bins)  # integer-valued weights: exact
    partial_below = both[size:].reshape(r * n_groups, n_bins).cumsum(axis=-1)
    at_least = hist[..., ::-1].cumsum(axis=-1)[..., ::-1]  # at_least[..., v] = nodes with u >= v
    # the sum of the top M values of a group is sum over v >= 1 of min(#{u >= v}, M)
    top_m = np.minimum(at_least[..., 1:], m_nodes[..., None]).sum(axis=-1)
    top_m1 = np.minimum(at_least[..., 1:], (m_nodes - 1)[..., None]).sum(axis=-1)
    feasible = top_m >= gpus[:, None]
    # a node takes part in some feasible placement iff u >= max(1, gpus - (sum of the top M-1 others))
    thr = np.where(feasible, np.maximum(1, gpus[:, None] - top_m1), n_bins - 1).ravel()
    cells = np.arange(r * n_groups)
    ways = at_least.reshape(r * n_groups, n_bins)[cells, thr].reshape(r, n_groups).astype(np.float64)
    stranded = partial_below[cells, thr - 1].reshape(r, n_groups)
    return ways, stranded, feasible


def request_ways(req: Requests, rows: IntArray, cluster: ClusterView, nodes: _Nodes) -> FloatArray:
    """[len(rows), n_groups, 3]: nodes that could take part in a placement now, stranded free GPUs,
    and feasibility (0/1) of requests ``req[rows]`` in every group (all integer-valued).

    Gangs (a whole-GPU request that needs or may use several nodes of some group with GPUs) go
    through the histogram of ``_whole_gpu_fit``; every single-node request (a share, CPU only, or
    whole GPUs that one node of every GPU group holds, with no slack to spread) through one fit
    matrix (``_single_node_fit``). Each row depends on its request only.
    """
    g, cpu, mem, whole = req.gpus[rows], req.cpu[rows], req.mem[rows], req.whole[rows]
    m_nodes = req.m_nodes[rows]
    gang = whole & ((m_nodes > 1) & (cluster.gpus_per_node > 0)[None, :]).any(axis=1)
    out = np.zeros((len(rows), cluster.n_groups, 3))
    sel = np.flatnonzero(gang)
    if len(sel):
        r = rows[sel]
        w, s, f = _whole_gpu_fit(nodes, cluster, g[sel], cpu[sel], mem[sel], m_nodes[sel])
        out[sel, :, 0], out[sel, :, 1], out[sel, :, 2] = w, s, f & req.need_ok[r]
    # single-node requests in two fit matrices: whole GPUs (only nodes with a free GPU can fit, a
    # few on a busy cluster) and the rest (shares, CPU only)
    for sel in (np.flatnonzero(whole & ~gang), np.flatnonzero(~whole)):
        if len(sel):
            gs, ws = g[sel], whole[sel]
            share = np.where(ws | (gs == 0), 0, req.milli[rows[sel]])
            wi, si = _single_node_fit(
                nodes, cluster.partial_free_by_group, share, cpu[sel], mem[sel], np.where(ws, gs, 0)
            )
            out[sel, :, 0], out[sel, :, 1], out[sel, :, 2] = wi, si, wi > 0
    return out


def ways_on_empty(req: Requests, cluster: ClusterView) -> FloatArray:
    """[R, n_groups]: nodes of each group that request r could use on the empty cluster (the
    normalizer of ``num_ways``). Depends only on the cluster's shape, not its free state."""
    g, cpu, mem, whole = req.gpus, req.cpu, req.mem, req.whole
    gpn = cluster.gpus_per_node
    cap_cpu = cluster.cpus_per_node_milli
    cap_mem = cluster.mem_per_node_mib
    u_empty_whole = np.minimum(
        np.minimum(gpn[None, :], _gpu_limit(cap_cpu, g, cpu)), _gpu_limit(cap_mem, g, mem)
    )
    u_empty_other = (
        ((g[:, None] == 0) | (gpn[None, :] > 0))
        & (cap_cpu[None, :] >= cpu[:, None])
        & (cap_mem[None, :] >= mem[:, None])
    )
    u_empty = np.where(whole[:, None], u_empty_whole, u_empty_other)
    fits_empty = req.need_ok & (req.m_nodes * u_empty >= np.where(whole, g, 1)[:, None])
    ways_empty_rg: FloatArray = np.where(fits_empty, cluster.node_count[None, :], 0).astype(np.float64)
    return ways_empty_rg


def placement_ways(queue: QueueView, cluster: ClusterView, requests: Requests | None = None) -> Ways:
    """Placement counts of every queued job on the cluster's current free state."""
    n_groups = cluster.n_groups
    if queue.eligible.shape[1] != n_groups:
        raise ValueError(f"queue.eligible has {queue.eligible.shape[1]} groups, the cluster {n_groups}")
    req = requests if requests is not None else distinct_requests(queue, cluster)
    per_req = request_ways(req, np.arange(len(req.gpus)), cluster, _node_states(cluster))
    ways_rg, stranded_rg, feasible = per_req[:, :, 0], per_req[:, :, 1], per_req[:, :, 2] > 0
    ways_empty_rg = ways_on_empty(req, cluster)

    elig = queue.eligible
    inv = req.inverse
    return Ways(
        ways=(ways_rg[inv] * elig).sum(axis=1),
        ways_empty=(ways_empty_rg[inv] * elig).sum(axis=1),
        can_now=np.asarray((feasible[inv] & elig).any(axis=1)),
        stranded_gpus=(stranded_rg[inv] * elig).sum(axis=1),
    )
