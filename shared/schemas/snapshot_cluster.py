"""QueueSnapshot + cluster spec -> the running jobs and held resources ``cycle_on`` plans with.

Why: the placer runs the simulator's own scheduling cycle (``shared.sim.cycle_on``) on the cluster
a snapshot describes, so it needs what the simulator keeps: each running job's allocation (GPUs,
CPUs and memory per node) with its start and estimated end, and what else holds resources.

- **Exact** when the adapter reports allocations (``RunningJobs.allocations_given``, schema
  version 6; the simulated cluster always does): the state is the one the cluster has.
- **Estimated** otherwise (a Slurm adapter that reports node lists only): a gang's GPUs evenly over
  its nodes (the first nodes one more when it does not divide), a share on its first node, and each
  node's used CPUs and memory split over its jobs in proportion to the GPUs they hold there.

Whatever a node holds beyond its running jobs (drained, down and unreported nodes: all of it; use
the cluster reports but attributes to no job) is ``blocked``: taken, and never released by a
reservation's plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.scheduling.state import Alloc, ClusterState, fill_group, gpu_ids_of
from shared.schemas.numbers import column_array
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.views import NodeLayout, node_layout, running_node_index
from shared.sim.cycle_on import RunningAt, RunningColumns

__all__ = ["ClusterDescriber", "DescribedCluster", "allocation_fields", "describe_cluster"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class DescribedCluster:
    """A snapshot's cluster as ``cycle_on`` takes it, and the node names to answer with."""

    running: RunningColumns
    blocked: list[Alloc]
    layout: NodeLayout
    #: True when the running jobs' allocations were reported, not estimated
    exact: bool
    #: [3, slots]: what the running jobs hold (whole GPUs, milli-CPUs, MiB) and what is blocked
    used: I64 | None = None
    rest: I64 | None = None
    #: per (job, node) entry: group, node index in the group, whole GPUs, GPU mask (0: not known)
    entries: tuple[I64, I64, I64, npt.NDArray[np.uint64]] | None = None
    #: per fractional job: group, node index, share GPU (-1: not known), milli-GPUs
    shares: tuple[I64, I64, I64, I64] | None = None

    def state(self, spec: ClusterSpec, track: set[int]) -> ClusterState | None:
        """The cluster with every running job and every blocked resource taken, built at once
        (what taking them one by one leaves, for ``Resume.state``), or None where that needs a
        choice of physical GPUs the description does not make (a group in ``track`` with a job
        whose GPUs or share GPU are not known, or a blocked partial share)."""
        if self.used is None or self.rest is None or self.entries is None or self.shares is None:
            return None
        if any(a.milli and a.group in track for a in self.blocked):
            return None
        lay = self.layout
        rest = np.maximum(self.rest, 0)
        free = _capacity(spec) - self.used - rest
        st = ClusterState(spec, track)
        e_group, e_node, e_whole, e_mask = self.entries
        s_group, s_node, s_gpu, s_milli = self.shares
        for g, gs in enumerate(st.groups):
            lo, hi = int(lay.offsets[g]), int(lay.offsets[g + 1])
            if gs.gfree is None:
                fill_group(gs, free[0, lo:hi], free[1, lo:hi], free[2, lo:hi])
                continue
            gfree = np.full((gs.n, gs.G), WHOLE_GPU_MILLI, dtype=np.int64)
            mine = (e_group == g) & (e_whole > 0)
            if (np.bitwise_count(e_mask[mine]).astype(np.int64) != e_whole[mine]).any():
                return None  # some job's GPUs are not known
            bits = (e_mask[mine, None] >> np.arange(gs.G, dtype=np.uint64)) & np.uint64(1)
            rows, cols = np.nonzero(bits)
            gfree[e_node[mine][rows], cols] = 0
            here = s_group == g
            if (s_gpu[here] < 0).any():
                return None  # some share's GPU is not known
            np.subtract.at(gfree, (s_node[here], s_gpu[here]), s_milli[here])
            # blocked whole GPUs: the lowest GPUs no job holds, as ``cycle_on`` assigns them
            full = gfree == WHOLE_GPU_MILLI
            gfree[full & (np.cumsum(full, axis=1) <= rest[0, lo:hi, None])] = 0
            gs.set_gpus(gfree, free[1, lo:hi], free[2, lo:hi])
        st.busy_milli = int(self.used[0].sum() + rest[0].sum()) * WHOLE_GPU_MILLI + int(s_milli.sum())
        return st

    @property
    def all_up(self) -> bool:
        """Every node of the spec is reported and ``up`` (else some are ``blocked`` whole)."""
        return bool(self.layout.up.all())

    def names_of(self, alloc: Alloc) -> tuple[str, ...]:
        """The node names of an allocation, in its node order."""
        names = self.layout.names[alloc.group]
        out = tuple(names[i] for i in alloc.nodes)
        if None in out:
            raise KeyError(f"allocation on an unreported node of group {alloc.group}: {alloc.nodes}")
        return out  # type: ignore[return-value]


def allocation_fields(alloc: Alloc) -> dict[str, Any]:
    """A running job's exact allocation as ``RunningJob`` fields (schema version 6): what a cluster
    adapter that knows it (the simulated cluster) reports, and ``describe_cluster`` reads back."""
    return {  # plain ints: the messages are strict, and placers may hold numpy integers
        "node_gpus": tuple(int(w) for w in alloc.whole),
        "node_cpus_milli": tuple(int(c) for c in alloc.cpu),
        "node_mem_mib": tuple(int(m) for m in alloc.mem),
        "node_gpu_mask": alloc.gpu_masks(),
        "share_gpu": int(alloc.frac_gpu) if alloc.milli else -1,
    }


@dataclass(frozen=True, eq=False)
class _Memo:
    """What ``describe_cluster`` keeps of a description for the next one on the same spec: each
    running job's id, the values its ``RunningAt`` objects were built from, and those objects."""

    spec: ClusterSpec
    index: dict[str, int]  # job id -> its position
    count: I64  # per job: its entries (nodes)
    offsets: I64  # per job: its first entry
    #: per job: share GPU, milli-GPUs (0 unless a share), start and estimated end (as int64 bits)
    per_job: npt.NDArray[np.int64]
    #: per entry: group, node in the group, whole GPUs, milli-CPUs, MiB, GPU mask (as int64 bits)
    per_entry: npt.NDArray[np.int64]
    parts: list[RunningAt]
    part_lo: I64  # per job: its first object in ``parts`` (and one past the last job's)


class ClusterDescriber:
    """``describe_cluster`` for one cluster, snapshot after snapshot, reusing what did not change.

    Why: a 10,000-node cluster runs about 68,000 pods; building their ``RunningAt`` objects took
    most of the 180-220 ms of each description, while between two snapshots a few hundred jobs
    start or end. Each description keeps, per running job, the values its objects were built from;
    the next one compares them (numpy, on the values it derives anyway) and builds objects only for
    jobs that are new or differ in any of them, reusing the others. A reused object is therefore
    one the full build would make equal, field for field: the description is the full rebuild's
    (``tests/schemas/test_snapshot_cluster.py`` checks it on random snapshot sequences). Anything
    else (another spec, a duplicate job id) describes from scratch. Not thread-safe: one per
    cluster and task.
    """

    def __init__(self) -> None:
        self._memo: _Memo | None = None
        #: jobs whose objects the last description built, and those it reused (for tests, benches)
        self.built = 0
        self.reused = 0

    def describe(self, snapshot: QueueSnapshot, spec: ClusterSpec) -> DescribedCluster:
        """``describe_cluster(snapshot, spec)``, reusing the last description's unchanged jobs."""
        memo = self._memo if self._memo is not None and self._memo.spec is spec else None
        self._memo = None  # on an error the next description starts from scratch
        described, self._memo, self.built = _describe(snapshot, spec, memo)
        self.reused = len(snapshot.running) - self.built
        return described

    def forget(self) -> None:
        """Describe the next snapshot from scratch."""
        self._memo = None


def describe_cluster(snapshot: QueueSnapshot, spec: ClusterSpec) -> DescribedCluster:
    """The running jobs and held resources of ``snapshot`` on ``spec``; ValueError names a node or
    running job that contradicts the spec (an unknown node, more held than a node has)."""
    return _describe(snapshot, spec, None)[0]


def _describe(
    snapshot: QueueSnapshot, spec: ClusterSpec, memo: _Memo | None
) -> tuple[DescribedCluster, _Memo | None, int]:
    """``describe_cluster``, reusing ``memo``'s objects for unchanged jobs; also returns the memo
    for the next description (None: none can be kept) and how many jobs' objects were built."""
    layout = node_layout(spec, snapshot.nodes)
    running = snapshot.running
    n_slots = int(layout.offsets[-1])
    caps = _capacity(spec)
    n_run = len(running)
    flat_slot = layout.node_slot[running_node_index(running, layout)] if n_run else np.zeros(0, np.int64)
    group_of_slot = np.searchsorted(layout.offsets, np.arange(n_slots), side="right") - 1
    count = column_array(running.node_count, np.int64) if n_run else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    gpus_np = column_array(running.gpus, np.int64) if n_run else np.zeros(0, np.int64)
    milli_np = column_array(running.gpu_milli, np.int64) if n_run else np.zeros(0, np.int64)
    exact = running.allocations_given() if n_run else True
    # per flat entry: whole GPUs, CPUs, memory, GPU ids (or 0: not known); per job: share GPU
    if exact and n_run:
        whole_in = column_array(running.node_gpus, np.int64)
        cpu_np = column_array(running.node_cpus_milli, np.int64)
        mem_np = column_array(running.node_mem_mib, np.int64)
        masks_np = (
            np.asarray(running.node_gpu_mask, dtype=np.uint64).reshape(-1)
            if running.node_gpu_mask
            else np.zeros(len(whole_in), dtype=np.uint64)
        )
        shares_np = (
            column_array(running.share_gpu, np.int64) if running.share_gpu else np.full(n_run, -1, np.int64)
        )
    else:
        w_, c_, m_ = _estimated(layout, caps, flat_slot, offsets, gpus_np.tolist(), milli_np.tolist())
        whole_in = np.asarray(w_, dtype=np.int64).reshape(-1)
        cpu_np = np.asarray(c_, dtype=np.int64).reshape(-1)
        mem_np = np.asarray(m_, dtype=np.int64).reshape(-1)
        masks_np = np.zeros(len(whole_in), dtype=np.uint64)
        shares_np = np.full(n_run, -1, dtype=np.int64)
    frac = (milli_np < WHOLE_GPU_MILLI) & (gpus_np > 0)
    job_of = np.repeat(np.arange(n_run, dtype=np.int64), count)
    whole_np = np.where(frac[job_of], 0, whole_in) if n_run else np.zeros(0, np.int64)
    entry_group = group_of_slot[flat_slot]
    node_of = flat_slot - layout.offsets[entry_group]
    used = np.zeros((3, n_slots), dtype=np.int64)
    np.add.at(used[0], flat_slot, whole_np)
    np.add.at(used[1], flat_slot, cpu_np)
    np.add.at(used[2], flat_slot, mem_np)
    starts = column_array(running.start_s, np.float64) if n_run else np.zeros(0)
    ends = column_array(running.est_end_s, np.float64) if n_run else np.zeros(0)
    job_milli = np.where(frac, milli_np, 0)
    per_job = np.stack([np.where(frac, shares_np, -1), job_milli, starts.view(np.int64), ends.view(np.int64)])
    per_entry = np.stack([entry_group, node_of, whole_np, cpu_np, mem_np, masks_np.view(np.int64)])
    ids = tuple(running.job_id) if n_run else ()
    index = {job_id: k for k, job_id in enumerate(ids)}
    same, prev = _unchanged(memo, ids, index, count, offsets, job_of, per_job, per_entry)
    changed = np.flatnonzero(~same)
    new_parts, new_count = _allocations(
        changed,
        offsets,
        entry_group,
        node_of,
        whole_np,
        cpu_np,
        mem_np,
        masks_np,
        shares_np,
        frac,
        milli_np,
        starts,
        ends,
    )
    if memo is None or not same.any():
        parts, n_parts = new_parts, new_count
    else:
        parts, n_parts = _merge(memo, same, prev, changed, new_parts, new_count)
    part_lo = np.concatenate([[0], np.cumsum(n_parts)]).astype(np.int64)
    if len(parts) == n_run:  # one object per job: its columns are the jobs'
        columns = RunningColumns(parts, starts, ends, entry_group[offsets[:-1]], job_milli)
    else:
        columns = RunningColumns.of(parts)
    # the GPUs holding shares (a job with a share names it in ``milli``), on each job's first node
    sharing = frac & (milli_np != 0)
    shares_used = _share_weight(
        flat_slot[offsets[:-1]][sharing], shares_np[sharing], milli_np[sharing], n_slots
    )
    free = np.stack([layout.free_gpus, layout.free_cpus_milli, layout.free_mem_mib])
    # a GPU holding shares is neither whole-free nor held whole: it is not counted as blocked
    rest = caps - used - free
    rest[0] -= shares_used
    over = np.flatnonzero((caps[0] - used[0] - shares_used < 0) | (caps[1:] - used[1:] < 0).any(axis=0))
    if len(over):
        name = layout.node_names[int(np.flatnonzero(layout.node_slot == over[0])[0])]
        raise ValueError(f"node {name!r}: its running jobs hold more than the node has")
    blocked: list[Alloc] = []
    share = layout.free_share_milli
    for s in np.flatnonzero((rest > 0).any(axis=0)).tolist():
        g = int(group_of_slot[s])
        w_b, c_b, m_b = (int(v) for v in np.maximum(rest[:, s], 0))
        i = s - int(layout.offsets[g])
        if w_b and 0 < share[s] < WHOLE_GPU_MILLI:
            # the node reports a GPU with a share free that no running job explains: held in part
            blocked.append(Alloc(g, [i], [0], [0], [0], None, -1, WHOLE_GPU_MILLI - int(share[s])))
            w_b -= 1
        blocked.append(Alloc(g, [i], [w_b], [c_b], [m_b]))
    first = offsets[:-1][frac]
    described = DescribedCluster(
        columns,
        blocked,
        layout,
        bool(exact),
        used,
        rest,
        (entry_group, node_of, whole_np, masks_np),
        (entry_group[first], node_of[first], shares_np[frac], milli_np[frac]),
    )
    # duplicate job ids: nothing to match the next description's jobs to
    kept = (
        _Memo(spec, index, count, offsets, per_job, per_entry, parts, part_lo)
        if len(index) == n_run
        else None
    )
    return described, kept, len(changed)


def _unchanged(
    memo: _Memo | None,
    ids: tuple[str, ...],
    index: dict[str, int],
    count: I64,
    offsets: I64,
    job_of: I64,
    per_job: npt.NDArray[np.int64],
    per_entry: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.bool_], I64]:
    """Per running job: True where ``memo`` holds a job with its id whose objects were built from
    exactly its values (the same entries, share, start and estimated end, bit for bit); and each
    job's position in the memo (-1: none)."""
    n = len(ids)
    if memo is None or not memo.index or len(index) != n:
        return np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64)
    prev = np.fromiter(map(memo.index.get, ids, repeat(-1)), dtype=np.int64, count=n)
    known = prev >= 0
    p = np.where(known, prev, 0)
    same = known & (memo.count[p] == count)
    same &= (memo.per_job[:, p] == per_job).all(axis=0)
    # entry by entry, where the counts agree: the job's k-th entry against the memo's k-th
    sel = np.flatnonzero(same[job_of])
    owner = job_of[sel]
    at = memo.offsets[p[owner]] + sel - offsets[owner]
    differs = (memo.per_entry[:, at] != per_entry[:, sel]).any(axis=0)
    same[owner[differs]] = False
    return same, prev


def _merge(
    memo: _Memo,
    same: npt.NDArray[np.bool_],
    prev: I64,
    changed: I64,
    new_parts: list[RunningAt],
    new_count: I64,
) -> tuple[list[RunningAt], I64]:
    """The objects of every job in job order: the memo's for unchanged jobs (``prev``: their
    positions in the memo), the new ones (built for ``changed``, in that order) for the rest; and
    each job's number of objects."""
    n = len(same)
    n_parts = np.zeros(n, dtype=np.int64)
    n_parts[same] = memo.part_lo[prev[same] + 1] - memo.part_lo[prev[same]]
    n_parts[changed] = new_count
    source = np.zeros(n, dtype=np.int64)  # each job's first object in ``memo.parts + new_parts``
    source[same] = memo.part_lo[prev[same]]
    source[changed] = len(memo.parts) + np.concatenate([[0], np.cumsum(new_count)[:-1]]).astype(np.int64)
    lo = np.concatenate([[0], np.cumsum(n_parts)[:-1]]).astype(np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), n_parts)
    pick_at = source[owner] + np.arange(len(owner), dtype=np.int64) - lo[owner]
    combined = memo.parts + new_parts
    return [combined[k] for k in pick_at.tolist()], n_parts


def _allocations(
    jobs: I64,
    offsets: I64,
    entry_group: I64,
    node: I64,
    whole: I64,
    cpu: I64,
    mem: I64,
    masks: npt.NDArray[np.uint64],
    shares: I64,
    frac: npt.NDArray[np.bool_],
    milli: I64,
    starts: FloatArray,
    ends: FloatArray,
) -> tuple[list[RunningAt], I64]:
    """The ``RunningAt`` objects of running ``jobs`` (positions, ascending): one per job and node
    group it runs in (one, unless a job spans groups), in job order; a job's physical GPUs only
    where every node's mask says as many as it holds. Also each job's number of objects."""
    count = offsets[jobs + 1] - offsets[jobs]
    if not len(jobs):
        return [], count
    if (count == 1).all():  # every job on one node (pods): one pass, no per-job lists
        at = offsets[jobs]
        f = frac[jobs]
        return [
            RunningAt(
                Alloc(
                    g,
                    [i],
                    [w],
                    [c],
                    [m],
                    None if not mask or mask.bit_count() != w else [gpu_ids_of(mask)],
                    share if f_ else -1,
                    ml if f_ else 0,
                ),
                t0,
                t1,
            )
            for g, i, w, c, m, mask, share, f_, ml, t0, t1 in zip(
                entry_group[at].tolist(),
                node[at].tolist(),
                whole[at].tolist(),
                cpu[at].tolist(),
                mem[at].tolist(),
                masks[at].tolist(),
                shares[jobs].tolist(),
                f.tolist(),
                milli[jobs].tolist(),
                starts[jobs].tolist(),
                ends[jobs].tolist(),
                strict=True,
            )
        ], count
    out: list[RunningAt] = []
    made = np.zeros(len(jobs), dtype=np.int64)
    groups, nodes, whole_l = entry_group.tolist(), node.tolist(), whole.tolist()
    cpu_l, mem_l, masks_l = cpu.tolist(), mem.tolist(), masks.tolist()
    for q, k in enumerate(jobs.tolist()):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        by_group: dict[int, list[int]] = {}
        for e in range(lo, hi):
            by_group.setdefault(groups[e], []).append(e)
        for g, entries in by_group.items():
            ids: list[list[int]] | None = None
            if any(masks_l[e] for e in entries):
                ids = [gpu_ids_of(masks_l[e]) for e in entries]
                if any(len(x) != whole_l[e] for x, e in zip(ids, entries, strict=True)):
                    ids = None
            first = bool(frac[k]) and entries[0] == lo
            a = Alloc(
                g,
                [nodes[e] for e in entries],
                [whole_l[e] for e in entries],
                [cpu_l[e] for e in entries],
                [mem_l[e] for e in entries],
                ids,
                int(shares[k]) if first else -1,
                int(milli[k]) if first else 0,
            )
            out.append(RunningAt(a, float(starts[k]), float(ends[k])))
        made[q] = len(by_group)
    return out, made


def _capacity(spec: ClusterSpec) -> I64:
    """[3, slots]: GPUs, milli-CPUs and MiB of every node slot."""
    count = [g.count for g in spec.node_groups]
    return np.stack(
        [
            np.repeat(np.array([getattr(g, f) for g in spec.node_groups], dtype=np.int64), count)
            for f in ("gpus", "cpus_milli", "mem_mib")
        ]
    )


def _share_weight(slot: I64, gpu: I64, milli: I64, n_slots: int) -> I64:
    """Per node slot, the GPUs that hold shares of running jobs: the distinct GPUs reported for
    them, and for shares on no reported GPU (``gpu`` -1) as many as best fit from the largest
    opens, as ``cycle_on`` places them. ``slot``, ``gpu``, ``milli``: one entry per share."""
    out = np.zeros(n_slots, dtype=np.int64)
    known = gpu >= 0
    if known.any():
        pairs = np.unique(slot[known] * (int(gpu.max()) + 1) + gpu[known])
        np.add.at(out, pairs // (int(gpu.max()) + 1), 1)
    shares: dict[int, list[int]] = {}
    for s_, m_ in zip(slot[~known].tolist(), milli[~known].tolist(), strict=True):
        shares.setdefault(s_, []).append(m_)
    for s_, ms in shares.items():  # best fit from the largest, as ``cycle_on`` places them
        used: list[int] = []  # GPUs opened for the shares on no reported GPU
        for m in sorted(ms, reverse=True):
            fits = [(WHOLE_GPU_MILLI - u, k) for k, u in enumerate(used) if WHOLE_GPU_MILLI - u >= m]
            if fits:
                used[min(fits)[1]] += m
            else:
                used.append(m)
        out[s_] += len(used)
    return out


def _estimated(
    layout: NodeLayout, caps: I64, slots: I64, offsets: I64, gpus: list[int], milli: list[int]
) -> tuple[list[int], list[int], list[int]]:
    """Per flat entry: whole GPUs (a gang's split evenly, first nodes one more), and the node's
    used CPUs and memory split over its jobs in proportion to the GPUs they hold there."""
    n_entries = len(slots)
    whole = np.zeros(n_entries, dtype=np.int64)
    weight = np.zeros(n_entries, dtype=np.float64)
    # whole GPUs in use per node (not free, not holding shares): what the gangs' splits may take
    budget = (caps[0] - layout.free_gpus).tolist()
    for k in range(len(gpus)):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        if milli[k] < WHOLE_GPU_MILLI and gpus[k] > 0:
            weight[lo] = milli[k] / WHOLE_GPU_MILLI
            s = int(slots[lo])
            budget[s] -= 1 if budget[s] > 0 else 0
    for k in range(len(gpus)):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        if milli[k] < WHOLE_GPU_MILLI and gpus[k] > 0:
            continue
        base, extra = divmod(gpus[k], hi - lo)
        want = [base + (e < extra) for e in range(hi - lo)]
        got = [min(w, max(budget[int(slots[lo + e])], 0)) for e, w in enumerate(want)]
        left = gpus[k] - sum(got)
        for e in range(hi - lo):  # what a full node could not take goes where the budget allows
            if left <= 0:
                break
            more = min(left, budget[int(slots[lo + e])] - got[e])
            if more > 0:
                got[e] += more
                left -= more
        if left > 0:  # the nodes show fewer GPUs in use than the job holds: trust the job
            got = want
        for e, g_ in enumerate(got):
            budget[int(slots[lo + e])] -= g_
        whole[lo:hi] = got
        weight[lo:hi] = np.maximum(whole[lo:hi], 0)
    free = np.stack([layout.free_cpus_milli, layout.free_mem_mib])
    used = np.maximum(caps[1:] - free, 0)[:, slots]  # [2, entries]: the node's used CPUs, memory
    total = np.bincount(slots, weights=weight, minlength=caps.shape[1])[slots]
    jobs_on = np.bincount(slots, minlength=caps.shape[1])[slots]
    part = np.where(total > 0, weight / np.where(total > 0, total, 1), 1.0 / np.maximum(jobs_on, 1))
    share = np.floor(used * part).astype(np.int64)
    return whole.tolist(), share[0].tolist(), share[1].tolist()
