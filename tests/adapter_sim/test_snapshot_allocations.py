"""The simulated cluster's snapshots carry each running job's exact allocation (schema version 6)."""

from __future__ import annotations

import numpy as np

from services.adapter_sim.snapshot import SnapshotBuilder
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import make_placer
from shared.scheduling.state import Alloc, ClusterState
from shared.schemas import QueueSnapshot, decode, encode
from shared.sim.evaluate import prepare_workload


def _workload() -> BoundWorkload:
    # the embedded cluster: 8-GPU V100 nodes (16-GPU jobs span two), shares on T4/A10 GPUs
    return prepare_workload(None, None, n_jobs=200, seed=0).bound


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _snapshot(builder: SnapshotBuilder, state: ClusterState, running: dict[int, Alloc]) -> QueueSnapshot:
    snap, _ = builder.build(state, running, np.array([], dtype=np.int64), 50.0, 1, "corr")
    return decode(QueueSnapshot, encode(snap))  # what the placer receives


def test_the_builder_fills_exact_values_from_an_alloc() -> None:
    work = _workload()
    jobs = work.jobs
    gang = _first((jobs.gpus == 4) & (jobs.gpu_milli == 1000))
    share = _first(jobs.gpu_milli < 1000)
    builder = SnapshotBuilder(work, jobs.estimate, "c")
    # a whole-GPU gang over two nodes of group 0, on GPUs 1, 4, 6 of one and 7 of the other
    gang_alloc = Alloc(0, [2, 7], [3, 1], [3000, 1000], [30000, 10000], [[1, 4, 6], [7]])
    # a fractional job on GPU 5 of node 4 (its whole entries are 0)
    share_alloc = Alloc(0, [4], [0], [500], [2048], None, 5, int(jobs.gpu_milli[share]))
    builder.started(gang, gang_alloc, 10.0)
    builder.started(share, share_alloc, 20.0)
    snap = _snapshot(builder, ClusterState(work.spec), {gang: gang_alloc, share: share_alloc})
    running = snap.running
    assert running.allocations_given()
    by_id = {r.job_id: r for r in running}
    g, s = by_id[builder.job_ids[gang]], by_id[builder.job_ids[share]]
    names = builder.names[0]
    assert g.nodes == (names[2], names[7]) and g.gpus == 4 and g.gpu_milli == 1000
    assert g.node_gpus == (3, 1) and g.node_cpus_milli == (3000, 1000) and g.node_mem_mib == (30000, 10000)
    assert g.node_gpu_mask == (0b1010010, 0b10000000) and g.share_gpu == -1
    assert s.nodes == (names[4],) and s.gpus == 1 and s.gpu_milli == int(jobs.gpu_milli[share])
    assert s.node_gpus == (0,) and s.node_cpus_milli == (500,) and s.node_mem_mib == (2048,)
    assert s.node_gpu_mask == (0,) and s.share_gpu == 5
    # flat on the wire, aligned with the nodes, in running order
    assert running.node_gpus == (3, 1, 0) and running.share_gpu == (-1, 5)
    assert running.node_index == (snap.nodes.name.index(names[2]), snap.nodes.name.index(names[7]), 4)


def test_a_group_that_does_not_track_gpus_gives_masks_of_zero() -> None:
    untracked = Alloc(1, [0, 3], [8, 8], [8000, 8000], [64, 64], None)
    assert untracked.gpu_masks() == (0, 0)
    assert Alloc(0, [1], [2], [1], [1], [[0, 63]]).gpu_masks() == ((1 << 63) | 1,)
    work = _workload()
    jobs = work.jobs
    j = _first(jobs.gpus == 16)
    builder = SnapshotBuilder(work, jobs.estimate, "c")
    builder.started(j, untracked, 0.0)
    row = next(iter(_snapshot(builder, ClusterState(work.spec), {j: untracked}).running))
    assert row.node_gpus == (8, 8) and row.node_gpu_mask == (0, 0) and row.share_gpu == -1


def test_allocations_of_the_simulators_placer_round_trip() -> None:
    """Every job the best-fit placer starts is described exactly: gangs over two nodes, shares of a
    GPU (with the GPU), CPU-only jobs."""
    work = _workload()
    jobs = work.jobs
    # every group tracks its GPUs, as the simulator does where fractional jobs may run
    state = ClusterState(work.spec, set(range(len(work.spec.node_groups))))
    placer = make_placer("best-fit")
    builder = SnapshotBuilder(work, jobs.estimate, "c")
    allocs: dict[int, Alloc] = {}
    for j in range(len(jobs.gpus)):
        a = placer.place(state, *work.request(j), None, work.node_slack)
        if a is None:
            continue
        state.take(a)
        allocs[j] = a
        builder.started(j, a, float(j))
    assert any(len(a.nodes) == 2 and sum(a.whole) == 16 for a in allocs.values())
    assert any(a.frac_gpu >= 0 for a in allocs.values())
    snap = _snapshot(builder, state, allocs)
    assert snap.running.allocations_given() and len(snap.running) == len(allocs)
    for row, (j, a) in zip(snap.running, allocs.items(), strict=True):
        assert row.job_id == builder.job_ids[j]
        assert row.node_gpus == tuple(a.whole)
        assert row.node_cpus_milli == tuple(a.cpu) and row.node_mem_mib == tuple(a.mem)
        assert row.node_gpu_mask == a.gpu_masks()
        if a.gpu_ids is not None:
            assert [m.bit_count() for m in row.node_gpu_mask] == list(a.whole)
        assert row.share_gpu == (a.frac_gpu if row.gpu_milli < 1000 else -1)
