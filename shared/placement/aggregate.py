"""Node classes: the nodes of a group that are interchangeable for the current batch.

Two nodes of one group are aggregated when their free whole GPUs, their partially used GPUs (the
sorted free shares, in groups that track shares) and their free CPUs and memory are equal, where
CPUs and memory are first *clamped* at the most that the batch could ever use on the node plus the
largest threshold any fit test compares with. Clamping is lossless: every constraint and indicator
of the model has the form ``free >= use + threshold`` with ``use`` at most that bound, so nodes
that differ only above it behave identically. On a busy 1,213-node cluster most free CPU and
memory values are above the bound, which is what turns hundreds of distinct nodes into a few
classes. A class whose CPU (memory) is at the bound is *slack* in that resource: no constraint on it
is generated at all.

Nodes the batch cannot use at all are left out. Within a class, node ids are kept ascending: the
model's k-th slot of a class decodes to the class's k-th lowest node id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.types import JobRequest
from shared.scheduling.placement import Caps
from shared.scheduling.state import I64, ClusterState, GroupState

BIG = 1 << 40
NO_CAP = BIG  # a node's cap when no reservation limits it


@dataclass(frozen=True, slots=True)
class JobShape:
    """How one job can use one group: a single node, or a gang of ``min_nodes..max_nodes`` nodes."""

    gang: bool
    min_nodes: int
    max_nodes: int


SINGLE = JobShape(False, 1, 1)


def job_shape(job: JobRequest, gpn: int, count: int, node_slack: int) -> JobShape | None:
    """The placement shape of ``job`` in a group of ``count`` nodes with ``gpn`` GPUs each.

    Mirrors ``shared.scheduling.placement.Placer``: a job of 2+ whole GPUs becomes a gang when it exceeds
    one node or when a node slack is allowed; ``None`` when the group can never hold it.
    """
    if job.gpus <= 1:
        return SINGLE if job.gpus == 0 or job.gpu_milli < WHOLE_GPU_MILLI or gpn > 0 else None
    return _whole_shape(job.gpus, gpn, count, node_slack)


@lru_cache(maxsize=4096)
def _whole_shape(gpus: int, gpn: int, count: int, node_slack: int) -> JobShape | None:
    if gpn == 0:
        return None
    need = -(-gpus // gpn)
    if need > count:
        return None
    if gpus > gpn or node_slack > 0:
        return JobShape(True, need, min(need + node_slack, count))
    return SINGLE


def cpu_share(job: JobRequest, w: int) -> int:
    """CPUs of ``w`` of a gang's GPUs on one node, as ``Placer._gang`` splits them."""
    return -(-job.cpus_milli * w // job.gpus) if job.gpus else job.cpus_milli


def mem_share(job: JobRequest, w: int) -> int:
    return -(-job.mem_mib * w // job.gpus) if job.gpus else job.mem_mib


@dataclass(slots=True)
class NodeClass:
    """``len(nodes)`` nodes of group ``group`` with the same (clamped) free state."""

    group: int
    gpn: int  # GPUs per node of the group
    whole: int  # free whole GPUs per node
    cpu: int  # free milli-CPUs, clamped
    mem: int  # free MiB, clamped
    cpu_slack: bool  # CPUs can never bind for this batch
    mem_slack: bool
    partial: tuple[int, ...]  # free milli-GPUs of the partially used GPUs, ascending
    nodes: list[int]  # node ids, ascending
    tracked: bool  # the group tracks per-GPU shares
    # reservation caps (EASY backfill) on what capped jobs together may take per node, clamped
    # like the free values; BIG where the node is not reserved
    cap_whole: int = NO_CAP
    cap_cpu: int = NO_CAP
    cap_mem: int = NO_CAP
    frac_blocked: bool = False  # a capped share job may not use the node

    @property
    def capped(self) -> bool:
        """Some cap binds on this class's nodes."""
        return self.frac_blocked or min(self.cap_whole, self.cap_cpu, self.cap_mem) < NO_CAP

    def fits_capped(self, job: JobRequest) -> bool:
        """A capped single-node job fits alone within the caps (and the free resources)."""
        if job.fractional:
            return not self.frac_blocked and self.fits(job)
        return (
            self.fits(job)
            and self.cap_whole >= job.gpus
            and self.cap_cpu >= job.cpus_milli
            and self.cap_mem >= job.mem_mib
        )

    def usable_capped(self, job: JobRequest) -> int:
        """``usable`` for a capped gang: its GPUs here within the caps too."""
        u = min(self.usable(job), self.cap_whole)
        if job.cpus_milli:
            u = min(u, self.cap_cpu * job.gpus // job.cpus_milli)
        if job.mem_mib:
            u = min(u, self.cap_mem * job.gpus // job.mem_mib)
        return u

    @property
    def count(self) -> int:
        return len(self.nodes)

    @property
    def max_share(self) -> int:
        """Largest share a fractional job can get on one node of the class."""
        if self.whole > 0:
            return WHOLE_GPU_MILLI
        return self.partial[-1] if self.partial else 0

    def fits(self, job: JobRequest) -> bool:
        """The job fits alone on one node of the class (single-node shapes)."""
        if self.cpu < job.cpus_milli or self.mem < job.mem_mib:
            return False
        if job.gpus == 0:
            return True
        if job.fractional:
            return self.max_share >= job.gpu_milli
        return self.whole >= job.gpus

    def usable(self, job: JobRequest) -> int:
        """Whole GPUs of a gang this node can hold, given the CPU/memory split per GPU."""
        u = self.whole
        if job.cpus_milli:
            u = min(u, self.cpu * job.gpus // job.cpus_milli)
        if job.mem_mib:
            u = min(u, self.mem * job.gpus // job.mem_mib)
        return min(u, job.gpus)


def _node_fit_mask(gs: GroupState, job: JobRequest, shape: JobShape) -> np.ndarray:
    ok = (gs.cpu >= (cpu_share(job, 1) if shape.gang else job.cpus_milli)) & (
        gs.mem >= (mem_share(job, 1) if shape.gang else job.mem_mib)
    )
    if job.gpus == 0:
        return ok
    if job.fractional:
        if gs.maxfrac is None:
            raise ValueError(f"group {gs.index} does not track GPU shares but got a fractional job")
        return ok & (gs.maxfrac >= job.gpu_milli)
    return ok & (gs.whole >= (1 if shape.gang else job.gpus))


def fit_count(gs: GroupState, job: JobRequest, node_slack: int) -> int:
    """Nodes of the group on which a single-node job fits now (0 for gang shapes)."""
    shape = job_shape(job, gs.G, gs.n, node_slack)
    if shape is None or shape.gang:
        return 0
    return int(np.count_nonzero(_node_fit_mask(gs, job, shape)))


class _Maxima:
    """A group's largest free GPUs, CPUs, memory and share, each computed on first use."""

    __slots__ = ("_v", "gs")

    def __init__(self, gs: GroupState) -> None:
        self.gs = gs
        self._v: dict[str, int] = {}

    def get(self, what: str) -> int:
        v = self._v.get(what)
        if v is None:
            gs = self.gs
            if what == "whole":
                v = gs.max_whole()
            elif what == "share":
                v = int(gs.maxfrac.max()) if gs.maxfrac is not None else 0
            else:
                v = int((gs.cpu if what == "cpu" else gs.mem).max())
            self._v[what] = v
        return v


def _may_fit(job: JobRequest, shape: JobShape, top: _Maxima) -> bool:
    """Cheap group-level test (maxima only) before any per-node scan; GPUs first, the cheapest."""
    if job.gpus and not job.fractional and top.get("whole") < (1 if shape.gang else job.gpus):
        return False
    if job.fractional and top.get("share") < job.gpu_milli:
        return False
    if top.get("cpu") < (cpu_share(job, 1) if shape.gang else job.cpus_milli):
        return False
    return top.get("mem") >= (mem_share(job, 1) if shape.gang else job.mem_mib)


@dataclass(slots=True)
class GroupTable:
    """The classes of one group as arrays (one entry per class), materialized on demand.

    Candidate selection works on the arrays; only the classes the model uses become ``NodeClass``
    objects (a busy group can have dozens of classes, of which a batch uses a handful).
    """

    gs: GroupState
    whole: I64
    cpu: I64
    mem: I64
    cpu_slack: np.ndarray
    mem_slack: np.ndarray
    partial: I64  # (classes, GPUs per node): free shares of partially used GPUs, ascending, BIG-padded
    members: I64  # node ids, by class then ascending id
    bounds: I64  # class c's nodes are members[bounds[c]:bounds[c + 1]]
    node_class: dict[int, int]  # node id -> class (relevant nodes only)
    cache: dict[int, NodeClass]
    _max_share: I64 | None = None
    caps: I64 | None = None  # (classes, 4): capped whole, CPUs, memory, shares blocked (0/1)

    @property
    def first(self) -> I64:
        return self.members[self.bounds[:-1]]

    @property
    def count(self) -> I64:
        return np.diff(self.bounds)

    def max_share(self) -> I64:
        """Largest share a fractional job can get on one node of each class."""
        if self._max_share is None:
            top = np.where(self.partial < BIG, self.partial, 0).max(axis=1, initial=0)
            self._max_share = np.where(self.whole > 0, WHOLE_GPU_MILLI, top).astype(np.int64)
        return self._max_share

    def fit_mask(self, job: JobRequest) -> np.ndarray:
        ok = (self.cpu >= job.cpus_milli) & (self.mem >= job.mem_mib)
        if job.gpus == 0:
            return ok
        if job.fractional:
            return ok & (self.max_share() >= job.gpu_milli)
        return ok & (self.whole >= job.gpus)

    def usable(self, job: JobRequest) -> I64:
        u = np.minimum(self.whole, job.gpus)
        if job.cpus_milli:
            u = np.minimum(u, self.cpu * job.gpus // job.cpus_milli)
        if job.mem_mib:
            u = np.minimum(u, self.mem * job.gpus // job.mem_mib)
        return u

    def fit_order(self, job: JobRequest, mask: np.ndarray, best: int) -> list[tuple[tuple[float, ...], int]]:
        """(best-fit score, class) of the ``best`` best classes in ``mask``, best first, and the loosest.

        Score: least whole GPUs (for a share: least share) left, then least CPU and memory left
        (relative), then the lowest node id.
        """
        idx = np.flatnonzero(mask)
        cpu, mem = self.cpu[idx], self.mem[idx]
        rest = (cpu - job.cpus_milli) / np.maximum(cpu, 1) + (mem - job.mem_mib) / np.maximum(mem, 1)
        if job.gpus == 0:
            primary = np.zeros(len(idx))
        elif job.fractional:
            part = self.partial[idx]
            left = np.where(part >= job.gpu_milli, part - job.gpu_milli, BIG).min(axis=1, initial=BIG)
            primary = np.where(left < BIG, left, WHOLE_GPU_MILLI - job.gpu_milli) * 16.0 + self.whole[idx]
        else:
            primary = (self.whole[idx] - job.gpus).astype(np.float64)
        first = self.first[idx]
        order = np.lexsort((first, rest, primary))
        if len(order) > best + 1:
            order = np.concatenate([order[:best], order[-1:]])
        g = self.gs.index
        return [((float(primary[k]), float(rest[k]), g, int(first[k])), int(idx[k])) for k in order]

    def get(self, c: int) -> NodeClass:
        """Class ``c`` as an object (made once)."""
        cls = self.cache.get(c)
        if cls is None:
            cls = NodeClass(
                group=self.gs.index,
                gpn=self.gs.G,
                whole=int(self.whole[c]),
                cpu=int(self.cpu[c]),
                mem=int(self.mem[c]),
                cpu_slack=bool(self.cpu_slack[c]),
                mem_slack=bool(self.mem_slack[c]),
                partial=tuple(int(v) for v in self.partial[c] if v < BIG),
                nodes=[int(i) for i in self.members[self.bounds[c] : self.bounds[c + 1]]],
                tracked=self.gs.gfree is not None,
            )
            if self.caps is not None:
                cw, cc, cm, fb = (int(v) for v in self.caps[c])
                cls.cap_whole, cls.cap_cpu, cls.cap_mem, cls.frac_blocked = cw, cc, cm, bool(fb)
            self.cache[c] = cls
        return cls


def group_table(
    gs: GroupState,
    batch: Sequence[JobRequest],
    lookahead: Sequence[JobRequest],
    node_slack: int,
    fits: list[bool] | None = None,
    caps: Caps | None = None,
) -> GroupTable | None:
    """The classes of the nodes of ``gs`` that some job of ``batch`` (all eligible here) can use.

    ``fits[i]`` is set when ``batch[i]`` has at least one node here (for a gang: one GPU). Jobs
    with identical requests are tested once.
    """
    top = _Maxima(gs)
    relevant: np.ndarray | None = None
    seen: dict[tuple[int, int, int, int], bool] = {}
    for i, job in enumerate(batch):
        key = (job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib)
        ok = seen.get(key)
        if ok is None:
            ok = False
            shape = job_shape(job, gs.G, gs.n, node_slack)
            if shape is not None and _may_fit(job, shape, top):
                mask = _node_fit_mask(gs, job, shape)
                ok = bool(mask.any())
                if ok:
                    relevant = mask if relevant is None else relevant | mask
            seen[key] = ok
        if fits is not None and ok:
            fits[i] = True
    if relevant is None:
        return None
    idx = np.flatnonzero(relevant)
    if not len(idx):
        return None
    nfrac: I64 | None = None
    fr = [j.gpu_milli for j in batch if j.fractional]
    if gs.gfree is not None and fr:
        nfrac = (gs.gfree[idx] // min(fr)).sum(axis=1).astype(np.int64)
    whole = gs.whole[idx]
    cpu_use, cpu_top = _use_bound(whole, gs.G, batch, "cpus_milli", nfrac)
    mem_use, mem_top = _use_bound(whole, gs.G, batch, "mem_mib", nfrac)
    cpu_bound = cpu_use + max([cpu_top, *(j.cpus_milli for j in lookahead)])
    mem_bound = mem_use + max([mem_top, *(j.mem_mib for j in lookahead)])
    cpu_free, mem_free = gs.cpu[idx], gs.mem[idx]
    cols = [whole, np.minimum(cpu_free, cpu_bound), np.minimum(mem_free, mem_bound)]
    n_base = len(cols)
    if caps is not None:
        # reservation caps: clamped like the free values (a cap above them never binds)
        cols.extend(
            [
                np.minimum(np.minimum(caps.whole[idx], whole), BIG),
                np.minimum(np.minimum(caps.cpu[idx], cpu_bound), BIG),
                np.minimum(np.minimum(caps.mem[idx], mem_bound), BIG),
                caps.frac_blocked[idx].astype(np.int64),
            ]
        )
    if gs.gfree is not None:
        # partially used GPUs only (free strictly between 0 and a whole GPU), sorted per node;
        # fully free ones are counted in ``whole`` and fully used ones are irrelevant
        gf = gs.gfree[idx]
        part = np.where((gf > 0) & (gf < WHOLE_GPU_MILLI), gf, BIG)
        part.sort(axis=1)
        cols.extend(part.T)
    table = np.stack(cols, axis=1)
    uniq, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")  # nodes by class, ascending id inside a class
    bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1)).astype(np.int64)
    n_caps = 4 if caps is not None else 0
    cap_cols = uniq[:, n_base : n_base + n_caps].copy() if caps is not None else None
    if cap_cols is not None:
        # a cap that equals the clamped free value binds no more than the free value itself
        for k, col in enumerate((0, 1, 2)):
            free_col = uniq[:, col]
            cap_cols[:, k] = np.where(cap_cols[:, k] >= free_col, NO_CAP, cap_cols[:, k])
    return GroupTable(
        gs=gs,
        whole=uniq[:, 0].copy(),
        cpu=uniq[:, 1].copy(),
        mem=uniq[:, 2].copy(),
        cpu_slack=cpu_free[first] >= cpu_bound[first],
        mem_slack=mem_free[first] >= mem_bound[first],
        partial=uniq[:, n_base + n_caps :].copy(),
        caps=cap_cols,
        members=idx[order].astype(np.int64),
        bounds=bounds,
        node_class=dict(zip(idx.tolist(), inverse.tolist(), strict=True)),
        cache={},
    )


def _use_bound(
    whole: I64, gpn: int, jobs: Sequence[JobRequest], attr: str, nfrac: I64 | None
) -> tuple[I64, int]:
    """Per node, the most ``attr`` (CPUs or memory) the batch can use there, and the largest request.

    Whole-GPU jobs: each of the node's free GPUs carries at most the largest per-GPU request
    (ceil(request / gpus)); fractional jobs: at most ``nfrac`` of them fit on the node; CPU-only
    jobs: all of them.
    """
    unit: list[int] = []
    frac: list[int] = []
    rest = 0
    top = 0
    for job in jobs:
        req = int(getattr(job, attr))
        top = max(top, req)
        if job.gpus == 0:
            rest += req
        elif job.fractional:
            frac.append(req)
        else:
            unit.extend([-(-req // job.gpus)] * min(job.gpus, max(gpn, 1)))
    pw = np.concatenate([[0], np.cumsum(sorted(unit, reverse=True))]).astype(np.int64)
    bound = pw[np.minimum(whole, len(unit))] + rest
    if frac and nfrac is not None:
        pf = np.concatenate([[0], np.cumsum(sorted(frac, reverse=True))]).astype(np.int64)
        bound = bound + pf[np.minimum(nfrac, len(frac))]
    return bound.astype(np.int64), top


def aggregate(
    state: ClusterState,
    batch: Sequence[JobRequest],
    lookahead: Sequence[JobRequest],
    node_slack: int,
    caps: Mapping[int, Caps] | None = None,
) -> tuple[dict[int, GroupTable], list[tuple[int, ...]]]:
    """Class tables of the groups some job of the batch fits in, and each job's such groups.

    A job's groups keep their order: best-fit over them gives the same answer as over all of the
    job's groups (a group where the job fits nowhere now never wins).
    """
    here: dict[int, list[int]] = {}
    for j, job in enumerate(batch):
        for g in job.groups:
            here.setdefault(g, []).append(j)
    tables: dict[int, GroupTable] = {}
    fit_groups: dict[int, set[int]] = {j: set() for j in range(len(batch))}
    for g in sorted(here):
        rows = here[g]
        fits = [False] * len(rows)
        ahead = [j for j in lookahead if g in j.groups]
        table = group_table(
            state.groups[g], [batch[j] for j in rows], ahead, node_slack, fits, caps.get(g) if caps else None
        )
        if table is not None:
            tables[g] = table
        for j, ok in zip(rows, fits, strict=True):
            if ok:
                fit_groups[j].add(g)
    return tables, [tuple(g for g in job.groups if g in fit_groups[j]) for j, job in enumerate(batch)]
