"""``describe_cluster`` and ``DescribedCluster.state``: a snapshot's cluster as the simulator keeps it.

The state built at once from the description must be the state that taking every running job and
every blocked resource one by one leaves (free GPUs per node and per physical GPU, CPUs, memory,
the free-GPU buckets and share lists), and a cycle on either must decide the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.scheduling.state import ClusterState
from shared.schemas.snapshot_cluster import describe_cluster
from shared.sim.config import SimConfig
from shared.sim.cycle_on import PendingRequest, _with_gpu_ids, cycle_on
from tests.stages.test_placer_stage import sim_cluster


def _taken(spec, cluster, track):  # type: ignore[no-untyped-def]
    st = ClusterState(spec, track)
    for a in _with_gpu_ids(spec, [r.alloc for r in cluster.running] + list(cluster.blocked), track):
        st.take(a)
    return st


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_state_built_at_once_is_the_state_taken_job_by_job(seed: int) -> None:
    snap, spec, sim = sim_cluster(seed)
    cluster = describe_cluster(snap, spec)
    assert cluster.exact and len(cluster.running) > 100
    track = {g for g, gs in enumerate(sim.state.groups) if gs.gfree is not None}
    assert track, "the embedded cluster has fractional jobs: some group tracks shares"
    built, taken = cluster.state(spec, track), _taken(spec, cluster, track)
    assert built is not None
    built.check_invariants(spec)
    for a, b, true in zip(built.groups, taken.groups, sim.state.groups, strict=True):
        for field in ("whole", "cpu", "mem"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
            np.testing.assert_array_equal(getattr(a, field), getattr(true, field))
        assert a.bucket == b.bucket and a.free_whole == b.free_whole
        if a.gfree is not None:
            assert b.gfree is not None and true.gfree is not None
            np.testing.assert_array_equal(a.gfree, b.gfree)
            np.testing.assert_array_equal(a.gfree, true.gfree)
            assert a.partial == b.partial and a.node_partial == b.node_partial
    assert built.busy_milli == taken.busy_milli == sim.state.busy_milli


def test_a_cycle_decides_the_same_on_either_state() -> None:
    snap, spec, _ = sim_cluster(0)
    cluster = describe_cluster(snap, spec)
    from shared.schemas.views import bind_pending

    binding = bind_pending(snap.pending, spec)
    pending = [
        PendingRequest(
            snap.pending.gpus[row],
            snap.pending.gpu_milli[row],
            binding.cpus_milli[k],
            binding.mem_mib[k],
            binding.groups[k],
            snap.pending.est_runtime_s[row],
        )
        for k, row in enumerate(binding.kept)
    ]
    args = (spec, snap.time, cluster.running, pending, SimConfig())
    fast = cycle_on(*args, blocked=cluster.blocked, state_of=lambda track: cluster.state(spec, track))
    slow = cycle_on(*args, blocked=cluster.blocked)
    assert fast.starts and fast.reserved
    assert {k: (a.group, a.nodes, a.whole, a.gpu_ids, a.frac_gpu) for k, a in fast.starts.items()} == {
        k: (a.group, a.nodes, a.whole, a.gpu_ids, a.frac_gpu) for k, a in slow.starts.items()
    }
    assert fast.reserved == slow.reserved


def test_no_state_is_built_where_a_tracked_job_does_not_name_its_gpus() -> None:
    snap, spec, sim = sim_cluster(0)
    plain = snap.model_copy(
        update={
            "running": snap.running.model_copy(update={"node_gpu_mask": (0,) * len(snap.running.node_gpus)})
        }
    )
    cluster = describe_cluster(plain, spec)
    track = {g for g, gs in enumerate(sim.state.groups) if gs.gfree is not None}
    assert cluster.state(spec, track) is None  # the cycle then takes them one by one
