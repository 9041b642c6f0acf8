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
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.state import Alloc, ClusterState, fill_group, gpu_ids_of
from shared.schemas.numbers import column_array
from shared.schemas.snapshot import QueueSnapshot, RunningJobs
from shared.schemas.views import NodeLayout, node_layout, running_node_index
from shared.sim.cycle_on import RunningAt

__all__ = ["DescribedCluster", "allocation_fields", "describe_cluster"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class DescribedCluster:
    """A snapshot's cluster as ``cycle_on`` takes it, and the node names to answer with."""

    running: list[RunningAt]
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


def describe_cluster(snapshot: QueueSnapshot, spec: ClusterSpec) -> DescribedCluster:
    """The running jobs and held resources of ``snapshot`` on ``spec``; ValueError names a node or
    running job that contradicts the spec (an unknown node, more held than a node has)."""
    layout = node_layout(spec, snapshot.nodes)
    running = snapshot.running
    n_slots = int(layout.offsets[-1])
    caps = _capacity(spec)
    flat_slot = (
        layout.node_slot[running_node_index(running, layout)] if len(running) else np.zeros(0, np.int64)
    )
    group_of_slot = np.searchsorted(layout.offsets, np.arange(n_slots), side="right") - 1
    count = column_array(running.node_count, np.int64) if len(running) else np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    gpus = list(running.gpus)
    milli = list(running.gpu_milli)
    exact = running.allocations_given() if len(running) else True
    # per flat entry: whole GPUs, CPUs, memory, GPU ids (or None)
    if exact and len(running):
        whole = list(running.node_gpus)
        cpu = list(running.node_cpus_milli)
        mem = list(running.node_mem_mib)
        masks = list(running.node_gpu_mask) if running.node_gpu_mask else [0] * len(whole)
        shares = list(running.share_gpu) if running.share_gpu else [-1] * len(running)
    else:
        whole, cpu, mem = _estimated(layout, caps, flat_slot, offsets, gpus, milli)
        masks, shares = [0] * len(whole), [-1] * len(running)
    n_run = len(running)
    frac = (np.asarray(milli, dtype=np.int64) < WHOLE_GPU_MILLI) & (np.asarray(gpus, dtype=np.int64) > 0)
    job_of = np.repeat(np.arange(n_run, dtype=np.int64), count)
    whole_np = (
        np.where(frac[job_of], 0, np.asarray(whole, dtype=np.int64)) if n_run else np.zeros(0, np.int64)
    )
    entry_group = group_of_slot[flat_slot]
    used = np.zeros((3, n_slots), dtype=np.int64)
    np.add.at(used[0], flat_slot, whole_np)
    np.add.at(used[1], flat_slot, np.asarray(cpu, dtype=np.int64))
    np.add.at(used[2], flat_slot, np.asarray(mem, dtype=np.int64))
    first_group = entry_group[offsets[:-1]] if n_run else np.zeros(0, np.int64)
    one_group = np.ones(n_run, dtype=bool)
    np.logical_and.at(one_group, job_of, entry_group == first_group[job_of])
    out = _allocations(
        running,
        layout,
        flat_slot - layout.offsets[entry_group],
        offsets,
        entry_group,
        one_group,
        whole_np.tolist(),
        cpu,
        mem,
        masks,
        shares,
        frac.tolist(),
        milli,
    )
    shares_used = _share_weight(out, n_slots, layout)
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
        w_, c_, m_ = (int(v) for v in np.maximum(rest[:, s], 0))
        i = s - int(layout.offsets[g])
        if w_ and 0 < share[s] < WHOLE_GPU_MILLI:
            # the node reports a GPU with a share free that no running job explains: held in part
            blocked.append(Alloc(g, [i], [0], [0], [0], None, -1, WHOLE_GPU_MILLI - int(share[s])))
            w_ -= 1
        blocked.append(Alloc(g, [i], [w_], [c_], [m_]))
    node_of = flat_slot - layout.offsets[entry_group]
    first = offsets[:-1][frac]
    share_gpu = np.asarray(shares, dtype=np.int64)[frac] if n_run else np.zeros(0, np.int64)
    return DescribedCluster(
        out,
        blocked,
        layout,
        bool(exact),
        used,
        rest,
        (entry_group, node_of, whole_np, np.asarray(masks, dtype=np.uint64)),
        (entry_group[first], node_of[first], share_gpu, np.asarray(milli, dtype=np.int64)[frac]),
    )


def _allocations(
    running: RunningJobs,
    layout: NodeLayout,
    node: I64,
    offsets: I64,
    entry_group: I64,
    one_group: npt.NDArray[np.bool_],
    whole: list[int],
    cpu: list[int],
    mem: list[int],
    masks: list[int],
    shares: list[int],
    frac: list[bool],
    milli: list[int],
) -> list[RunningAt]:
    """One ``RunningAt`` per running job and node group it runs in (one, unless a job spans groups),
    in job order; a job's physical GPUs only where every node's mask says as many as it holds."""
    nodes, groups, off = node.tolist(), entry_group.tolist(), offsets.tolist()
    starts, ends = list(running.start_s), list(running.est_end_s)
    if len(nodes) == len(starts):  # every job on one node (pods): one pass, no per-job lists
        return [
            RunningAt(
                Alloc(
                    g,
                    [i],
                    [w],
                    [c],
                    [m],
                    None if not mask or mask.bit_count() != w else [gpu_ids_of(mask)],
                    share if f else -1,
                    ml if f else 0,
                ),
                t0,
                t1,
            )
            for g, i, w, c, m, mask, share, f, ml, t0, t1 in zip(
                groups, nodes, whole, cpu, mem, masks, shares, frac, milli, starts, ends, strict=True
            )
        ]
    out: list[RunningAt] = []
    for k, single in enumerate(one_group.tolist()):
        lo, hi = off[k], off[k + 1]
        parts = [(groups[lo], list(range(lo, hi)))]
        if not single:
            by_group: dict[int, list[int]] = {}
            for e in range(lo, hi):
                by_group.setdefault(groups[e], []).append(e)
            parts = list(by_group.items())
        for g, entries in parts:
            ids: list[list[int]] | None = None
            if any(masks[e] for e in entries):
                ids = [gpu_ids_of(masks[e]) for e in entries]
                if any(len(x) != whole[e] for x, e in zip(ids, entries, strict=True)):
                    ids = None
            first = frac[k] and entries[0] == lo
            a = Alloc(
                g,
                [nodes[e] for e in entries],
                [whole[e] for e in entries],
                [cpu[e] for e in entries],
                [mem[e] for e in entries],
                ids,
                shares[k] if first else -1,
                milli[k] if first else 0,
            )
            out.append(RunningAt(a, starts[k], ends[k]))
    return out


def _capacity(spec: ClusterSpec) -> I64:
    """[3, slots]: GPUs, milli-CPUs and MiB of every node slot."""
    count = [g.count for g in spec.node_groups]
    return np.stack(
        [
            np.repeat(np.array([getattr(g, f) for g in spec.node_groups], dtype=np.int64), count)
            for f in ("gpus", "cpus_milli", "mem_mib")
        ]
    )


def _share_weight(running: list[RunningAt], n_slots: int, layout: NodeLayout) -> I64:
    """Per node slot, the GPUs that hold shares of running jobs (packed best fit, largest first)."""
    shares: dict[int, list[int]] = {}
    known: dict[int, set[int]] = {}  # slot -> the GPUs reported to hold shares
    for r in running:
        a = r.alloc
        if a.milli:
            slot = int(layout.offsets[a.group]) + a.nodes[0]
            if a.frac_gpu >= 0:
                known.setdefault(slot, set()).add(a.frac_gpu)
            else:
                shares.setdefault(slot, []).append(a.milli)
    out = np.zeros(n_slots, dtype=np.int64)
    for slot, gpus in known.items():
        out[slot] = len(gpus)
    for slot, ms in shares.items():  # best fit from the largest, as ``cycle_on`` places them
        used: list[int] = []  # GPUs opened for the shares on no reported GPU
        for m in sorted(ms, reverse=True):
            fits = [(WHOLE_GPU_MILLI - u, k) for k, u in enumerate(used) if WHOLE_GPU_MILLI - u >= m]
            if fits:
                used[min(fits)[1]] += m
            else:
                used.append(m)
        out[slot] += len(used)
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
