"""QueueSnapshot + cluster spec -> a conservative ClusterState: the tests' independent reading of a snapshot.

The placer reads snapshots with ``shared.schemas.snapshot_cluster`` (the simulator's own state, exact
when the adapter reports allocations). This older reading, which the placer used before, stays
here as a checker that shares none of that code: it rebuilds the free resources from the nodes'
reports alone.

Layout: as ``shared.schemas.views`` (``node_layout``): node ``i`` of group ``g`` is the group's
``i``-th node in snapshot order; slots no reported node fills, and drained or down nodes, have
nothing free (``usable`` is False there). ``name(g, i)`` and ``locate(name)`` map between the two.

What a snapshot does not say, and what is assumed instead:

- **GPU shares.** A node reports its free whole GPUs and its largest free share on one GPU. In
  groups that track shares (``track``), a node's GPUs are rebuilt as its free whole GPUs, then one
  GPU with the reported largest share, then full ones. Shares free on other partly used GPUs are
  unknown and treated as used: a fractional job is never placed where it would not fit.
- **Where a running job's resources are.** A running job lists its nodes and GPU count, not how its
  GPUs, CPUs and memory split over the nodes. ``running`` estimates it for reservations (see
  ``RunningEntries``): a gang's GPUs evenly over its nodes (the first nodes one more when it does
  not divide), a share on its (first) node. CPUs and memory are not attributed per job; the placer's
  reservation replay returns a node's used CPUs and memory in proportion to the GPUs released, and
  all of it with the node's last known job.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.state import Alloc, ClusterState, fill_group
from shared.schemas.numbers import column_array
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.views import NodeLayout, node_layout, running_node_index

__all__ = ["RunningEntries", "SnapshotState", "snapshot_state"]


@dataclass(frozen=True, eq=False)
class RunningEntries:
    """The running jobs, one entry per (job, node), as arrays sorted by (estimated end, job).

    ``whole`` whole GPUs the job holds on the node (a gang's split is estimated), ``milli`` the share
    of a fractional job (its ``whole`` is 0), ``end`` the adapter's ``est_end_s``, ``job`` the
    position of the job in ``snapshot.running``.
    """

    end: npt.NDArray[np.float64]
    job: npt.NDArray[np.int64]
    group: npt.NDArray[np.int64]
    node: npt.NDArray[np.int64]
    #: position of the node in the per-node arrays of ``NodeLayout`` (group 0's nodes first)
    slot: npt.NDArray[np.int64]
    whole: npt.NDArray[np.int64]
    milli: npt.NDArray[np.int64]

    @property
    def weight(self) -> npt.NDArray[np.float64]:
        """GPUs held on the node (a share counts as its fraction): what CPUs and memory follow."""
        out: npt.NDArray[np.float64] = self.whole + self.milli / WHOLE_GPU_MILLI
        return out


@dataclass(eq=False)
class SnapshotState:
    """A snapshot's free resources as a ``ClusterState``, with the node names and running jobs."""

    spec: ClusterSpec
    state: ClusterState
    layout: NodeLayout
    #: per group: the node slots a reported, ``up`` node fills
    usable: list[npt.NDArray[np.bool_]]
    #: the same over all node slots (``NodeLayout``'s order)
    usable_slots: npt.NDArray[np.bool_]
    #: [3, slots]: GPUs, milli-CPUs and MiB of each node slot's group
    capacity_slots: npt.NDArray[np.int64]
    snapshot: QueueSnapshot
    _entries: RunningEntries | None = None

    @property
    def running(self) -> RunningEntries:
        """The running jobs per node (built on first use: only reservations need them)."""
        if self._entries is None:
            self._entries = _running_entries(self.snapshot, self.layout)
        return self._entries

    def name(self, group: int, index: int) -> str:
        name = self.layout.names[group][index]
        if name is None:
            raise KeyError(f"node {index} of group {self.spec.node_groups[group].name!r} was not reported")
        return name

    def names_of(self, alloc: Alloc) -> tuple[str, ...]:
        """The node names of an allocation, in its node order."""
        names = self.layout.names[alloc.group]
        out = tuple(names[i] for i in alloc.nodes)
        if None in out:
            raise KeyError(f"allocation on an unreported node of group {alloc.group}: {alloc.nodes}")
        return out  # type: ignore[return-value]

    def locate(self, name: str) -> tuple[int, int]:
        """(group, index) of a reported node."""
        return self.layout.index[name]


def _running_entries(snapshot: QueueSnapshot, layout: NodeLayout) -> RunningEntries:
    running = snapshot.running
    n = len(running)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return RunningEntries(np.zeros(0), e, e, e, e, e, e)
    # flat columns: numpy reads them much faster than lists of tuples
    end = column_array(running.est_end_s, np.float64)
    gpus = column_array(running.gpus, np.int64)
    milli = column_array(running.gpu_milli, np.int64)
    slot = layout.node_slot[running_node_index(running, layout)]
    n_flat = len(slot)
    if n_flat == n:  # every job on one node (pods): one entry per job, holding all its GPUs
        job = np.arange(n, dtype=np.int64)
        frac = milli < WHOLE_GPU_MILLI
        whole = np.where(frac, 0, gpus)
        share = np.where(frac, milli, 0)
    else:
        count = column_array(running.node_count, np.int64)
        job = np.repeat(np.arange(n, dtype=np.int64), count)
        k = np.arange(len(job), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        frac = (milli < WHOLE_GPU_MILLI)[job]
        keep = ~frac | (k == 0)  # a share sits on its (first) node
        base, extra = np.divmod(gpus, count)
        whole = np.where(frac, 0, base[job] + (k < extra[job]))
        share = np.where(frac, milli[job], 0)
        job, slot, whole, share = job[keep], slot[keep], whole[keep], share[keep]
    order = np.lexsort((job, end[job]))
    slot = slot[order]
    group = np.searchsorted(layout.offsets, slot, side="right") - 1
    return RunningEntries(
        end=end[job[order]],
        job=job[order],
        group=group,
        node=slot - layout.offsets[group],
        slot=slot,
        whole=whole[order],
        milli=share[order],
    )


def snapshot_state(
    snapshot: QueueSnapshot, spec: ClusterSpec, track: Sequence[int] | AbstractSet[int] = ()
) -> SnapshotState:
    """The ``ClusterState`` of ``snapshot``; ``track`` are the groups that keep per-GPU shares (those
    where a fractional job may be placed). Raises ValueError naming a node that contradicts the spec.
    """
    layout = node_layout(spec, snapshot.nodes)
    state = ClusterState(spec, set(track))
    usable_slots = layout.up
    usable = []
    for k, gs in enumerate(state.groups):
        lo, hi = int(layout.offsets[k]), int(layout.offsets[k + 1])
        fill_group(
            gs,
            layout.free_gpus[lo:hi],
            layout.free_cpus_milli[lo:hi],
            layout.free_mem_mib[lo:hi],
            layout.free_share_milli[lo:hi],
        )
        usable.append(usable_slots[lo:hi])
    state.busy_milli = (spec.total_gpus - int(layout.free_gpus.sum())) * WHOLE_GPU_MILLI
    count = [g.count for g in spec.node_groups]
    capacity = np.stack(
        [
            np.repeat(np.array([g.gpus for g in spec.node_groups], dtype=np.int64), count),
            np.repeat(np.array([g.cpus_milli for g in spec.node_groups], dtype=np.int64), count),
            np.repeat(np.array([g.mem_mib for g in spec.node_groups], dtype=np.int64), count),
        ]
    )
    return SnapshotState(spec, state, layout, usable, usable_slots, capacity, snapshot)
