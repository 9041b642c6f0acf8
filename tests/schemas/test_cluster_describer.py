"""``ClusterDescriber``: describing snapshot after snapshot, reusing the running jobs that did not
change, gives exactly what describing each snapshot from scratch (``describe_cluster``) gives.

Sequences are random: running jobs end, new ones start (best-fit on the simulated cluster), some
change their estimated end or their allocation under the same id, the running list is reordered,
nodes are drained, allocations are left out (estimated descriptions) or the spec changes; and the
placer stage decides on each snapshot what a fresh stage decides.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from services.placer.stage import PlacerStage
from shared.domain.cluster import ClusterSpec
from shared.scheduling.placement import make_placer
from shared.schemas import NodeStates, QueueSnapshot
from shared.schemas.snapshot_cluster import ClusterDescriber, DescribedCluster, describe_cluster
from tests.stages.simsnap import SimCluster, snapshot_of
from tests.stages.stage_helpers import vector
from tests.stages.test_placer_stage import sim_cluster


def assert_same_description(got: DescribedCluster, want: DescribedCluster) -> None:
    """Field for field, the objects' types included (a reused object is one a rebuild makes)."""
    assert list(got.running) == list(want.running)
    assert [type(r.start_s) for r in got.running] == [type(r.start_s) for r in want.running]
    for name in ("start_s", "est_end_s", "group", "milli"):
        np.testing.assert_array_equal(getattr(got.running, name), getattr(want.running, name))
    assert got.blocked == want.blocked
    assert got.exact == want.exact
    assert got.layout.names == want.layout.names
    np.testing.assert_array_equal(np.asarray(got.used), np.asarray(want.used))
    np.testing.assert_array_equal(np.asarray(got.rest), np.asarray(want.rest))
    assert got.entries is not None and want.entries is not None
    assert got.shares is not None and want.shares is not None
    for a, b in zip((*got.entries, *got.shares), (*want.entries, *want.shares), strict=True):
        np.testing.assert_array_equal(a, b)


def _churn(sim: SimCluster, rng: np.random.Generator, now: float, queued: list[int]) -> None:
    """End some running jobs, start some queued ones where best-fit finds room, move some ends."""
    running = list(sim.allocs)
    for j in rng.choice(running, size=min(len(running), int(rng.integers(0, 12))), replace=False).tolist():
        sim.state.give(sim.allocs.pop(j))
        sim.start.pop(j)
    placer = make_placer("best-fit")
    w = sim.workload
    for j in rng.permutation(queued)[: int(rng.integers(0, 12))].tolist():
        if j in sim.allocs:
            continue
        a = placer.place(sim.state, *w.request(j), None, w.node_slack)
        if a is not None:
            sim.state.take(a)
            sim.allocs[j] = a
            sim.start[j] = now
    for j in rng.choice(list(sim.allocs), size=int(rng.integers(0, 3))).tolist():
        sim.start[j] += float(rng.choice([1.0, -0.5, 0.0]))  # a new start (and so end) under its id
    if rng.random() < 0.3:  # the adapter lists its running jobs in another order
        order = rng.permutation(list(sim.allocs)).tolist()
        sim.allocs = {j: sim.allocs[j] for j in order}


def _drained(snap: QueueSnapshot, rng: np.random.Generator) -> QueueSnapshot:
    """``snap`` with a few nodes drained."""
    nodes = list(snap.nodes)
    for k in rng.choice(len(nodes), size=3, replace=False).tolist():
        nodes[k] = nodes[k].model_copy(update={"state": "drain"})
    return snap.model_copy(update={"nodes": NodeStates.of(nodes)})


def _moved(snap: QueueSnapshot, rng: np.random.Generator) -> QueueSnapshot:
    """``snap`` with one running job's allocation changed under its id (its CPUs on its first node)."""
    running = list(snap.running)
    k = int(rng.integers(len(running)))
    job = running[k]
    cpus = list(job.node_cpus_milli)
    cpus[0] = max(0, cpus[0] - 1)
    running[k] = job.model_copy(update={"node_cpus_milli": tuple(cpus)})
    return snap.model_copy(update={"running": type(snap.running).of(running)})


def _sequence(seed: int, steps: int) -> tuple[ClusterSpec, list[QueueSnapshot]]:
    snap, spec, sim = sim_cluster(seed)
    rng = np.random.default_rng(seed)
    queued = list(range(250, 600))
    out = [snap]
    now = snap.time
    for step in range(steps):
        now += 10.0
        _churn(sim, rng, now, queued)
        waiting = [j for j in queued if j not in sim.allocs]
        s = snapshot_of(
            sim, waiting[:200], now, cluster="embedded", sequence=step + 2, allocations=rng.random() > 0.15
        )
        if rng.random() < 0.2:
            s = _drained(s, rng)
        if s.running.allocations_given() and rng.random() < 0.3:
            s = _moved(s, rng)
        out.append(s)
    return spec, out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_an_incremental_description_is_the_full_rebuild(seed: int) -> None:
    spec, snaps = _sequence(seed, 12)
    describer = ClusterDescriber()
    reused = 0
    for snap in snaps:
        got = describer.describe(snap, spec)
        assert_same_description(got, describe_cluster(snap, spec))
        assert describer.built + describer.reused == len(snap.running)
        reused += describer.reused
    assert reused > len(snaps[0].running)  # it did reuse


def test_the_same_snapshot_again_builds_nothing_and_another_spec_everything() -> None:
    snap, spec, _ = sim_cluster(0)
    describer = ClusterDescriber()
    describer.describe(snap, spec)
    assert describer.built == len(snap.running)
    assert_same_description(describer.describe(snap, spec), describe_cluster(snap, spec))
    assert describer.built == 0
    other = spec.model_copy()
    assert_same_description(describer.describe(snap, other), describe_cluster(snap, other))
    assert describer.built == len(snap.running)


def test_a_failed_description_forgets_the_last_one() -> None:
    snap, spec, _ = sim_cluster(0)
    describer = ClusterDescriber()
    describer.describe(snap, spec)
    running = list(snap.running)
    running[0] = running[0].model_copy(update={"node_cpus_milli": (10**9,)})
    bad = snap.model_copy(update={"running": type(snap.running).of(running)})
    with pytest.raises(ValueError, match="hold more than the node has"):
        describer.describe(bad, spec)
    describer.describe(snap, spec)
    assert describer.built == len(snap.running)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_placer_decides_on_a_sequence_what_a_fresh_placer_decides(seed: int) -> None:
    spec, snaps = _sequence(seed, 6)
    specs = {"embedded": spec}
    featurizer = FeaturizerStage(specs)
    kept = PlacerStage(specs, placement="best-fit")
    rng = np.random.default_rng(seed)
    for snap in snaps:
        m = featurizer.handle(snap)
        v = vector(m, (rng.permutation(len(m.job_ids)) + 1.0).tolist())
        prepared = kept.prepare(snap)
        got = kept.handle(v, snap, None, prepared)
        want = PlacerStage(specs, placement="best-fit").handle(v, snap)
        assert got.placements == want.placements
