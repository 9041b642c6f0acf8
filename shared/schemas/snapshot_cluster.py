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

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.state import Alloc
from shared.schemas.numbers import column_array
from shared.schemas.snapshot import QueueSnapshot
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


def allocation_fields(alloc: Alloc) -> dict[str, tuple[int, ...] | int]:
    """A running job's exact allocation as ``RunningJob`` fields (schema version 6): what a cluster
    adapter that knows it (the simulated cluster) reports, and ``describe_cluster`` reads back."""
    return {
        "node_gpus": tuple(alloc.whole),
        "node_cpus_milli": tuple(alloc.cpu),
        "node_mem_mib": tuple(alloc.mem),
        "node_gpu_mask": alloc.gpu_masks(),
        "share_gpu": alloc.frac_gpu if alloc.milli else -1,
    }


def _ids(mask: int) -> list[int]:
    return [k for k in range(mask.bit_length()) if mask >> k & 1]


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
    used = np.zeros((3, n_slots), dtype=np.int64)
    out: list[RunningAt] = []
    slots = flat_slot.tolist()
    for k in range(len(running)):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        frac = milli[k] < WHOLE_GPU_MILLI and gpus[k] > 0
        by_group: dict[int, list[int]] = {}
        for e in range(lo, hi):
            by_group.setdefault(int(group_of_slot[slots[e]]), []).append(e)
        for g, entries in by_group.items():
            base = int(layout.offsets[g])
            ids = [_ids(masks[e]) for e in entries]
            known = all(len(x) == whole[e] for x, e in zip(ids, entries, strict=True))
            a = Alloc(
                g,
                [slots[e] - base for e in entries],
                [0 if frac else whole[e] for e in entries],
                [cpu[e] for e in entries],
                [mem[e] for e in entries],
                ids if known and any(ids) else None,
                shares[k] if frac and entries[0] == lo else -1,
                milli[k] if frac and entries[0] == lo else 0,
            )
            for e, w_, c_, m_ in zip(entries, a.whole, a.cpu, a.mem, strict=True):
                used[:, slots[e]] += (w_, c_, m_)
            out.append(RunningAt(a, float(running.start_s[k]), float(running.est_end_s[k])))
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
    return DescribedCluster(out, blocked, layout, bool(exact))


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
