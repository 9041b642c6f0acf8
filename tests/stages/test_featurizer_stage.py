"""FeaturizerStage: hand-checked values, errors as StageError, and the same numbers as training."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from shared.domain.cluster import load_cluster_spec
from shared.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    FeatureSchema,
    RunningJobs,
    SimViewBuilder,
    compute_features,
)
from shared.scheduling.binding import bind_jobs
from shared.schemas import FeatureMatrix, Limits, PendingJobs, QueueSnapshot, decode, encode
from shared.schemas.stage_error import StageError
from shared.schemas.views import MATRIX_COLUMNS
from shared.workload import generate_for_cluster
from tests.stages.simsnap import fill_cluster, snapshot_of
from tests.stages.stage_helpers import node, pend, run, snap, two_group_spec


def L(seconds: float) -> float:
    """The features' log time scale (7-day horizon, 60 s unit)."""
    return min(1.0, math.log1p(seconds / 60) / math.log1p(7 * 86400 / 60))


def small() -> FeatureMatrix:
    s = snap(
        [
            pend("j1", 8, gpu_types=("B",)),
            pend("j2", 6, gpu_types=("A",)),
            pend("j3", 1),
            pend("big", 64),  # no group can ever hold it
        ],
        [node("a-0", "a"), node("a-1", "a", gpus=2, cpus=16000, mem=65536), node("b-0", "b")],
        [run("r1", ["a-1"], 2, end=1000.0)],
    )
    return FeaturizerStage({"two": two_group_spec()}).handle(s)


def test_hand_checked_features_of_a_small_snapshot() -> None:
    m = small()
    assert m.columns == MATRIX_COLUMNS and m.cluster_columns == CLUSTER_FEATURES
    assert m.job_ids == ("j1", "j2", "j3")
    assert [(e.job_id, "more GPUs" in e.reason or "does not fit" in e.reason) for e in m.excluded] == [
        ("big", True)
    ]
    assert m.feature_schema_hash == FeatureSchema.current().hash
    assert set(m.latencies_ms) == {"featurize"} and m.latencies_ms["featurize"] > 0
    f = {j: dict(zip(m.columns, row, strict=True)) for j, row in zip(m.job_ids, m.values, strict=True)}
    # j1: 8 B GPUs, its pool is the one 8-GPU node: log1p(8) / log1p(8)
    assert f["j1"]["gpus"] == pytest.approx(1.0)
    assert f["j1"]["gpu_type"] == pytest.approx(8 / 16)  # pool capacity / cluster capacity
    assert f["j1"]["cpus"] == pytest.approx(32 / 64)  # 4 CPUs per GPU by default, one 64-CPU node
    assert f["j1"]["free_nodes"] == 1.0 and f["j1"]["can_schedule_now"] == 1.0 and f["j1"]["ways"] == 1
    # j2: a gang of 6 over the two 4-GPU nodes (4 + 2 free): both nodes take part
    assert f["j2"]["gpus"] == pytest.approx(math.log1p(6) / math.log1p(8))
    assert f["j2"]["cpus"] == pytest.approx(24 / (2 * 32))
    assert f["j2"]["free_nodes"] == 0.5 and f["j2"]["ways"] == 2 and f["j2"]["can_schedule_now"] == 1.0
    # j3: one GPU of any type: pool of 16 GPUs, 3 nodes could host it
    assert f["j3"]["gpus"] == pytest.approx(math.log1p(1) / math.log1p(16))
    assert f["j3"]["cpus"] == pytest.approx(4 / 64) and f["j3"]["ways"] == 3
    for j in ("j1", "j2", "j3"):  # everyone submitted at 0, decided at 100, 600 s requested
        assert f[j]["wait"] == pytest.approx(L(100)) and f[j]["requested_time"] == pytest.approx(L(600))
        assert f[j]["urgency"] == pytest.approx(100 / 700)
    c = dict(zip(m.cluster_columns, m.cluster_values, strict=True))
    assert c["free_gpus"] == pytest.approx(14 / 16)
    assert c["fragmentation"] == pytest.approx(2 / 14)  # a-1's two free GPUs are on a used node
    assert c["runnable"] == 1.0


def test_matrix_survives_the_wire() -> None:
    m = small()
    assert decode(FeatureMatrix, encode(m)) == m


def test_unusable_snapshots_raise_stage_errors() -> None:
    stage = FeaturizerStage({"two": two_group_spec()})
    good = [node("a-0", "a"), node("b-0", "b")]
    with pytest.raises(StageError, match=r"unknown cluster 'elsewhere'.*known: two"):
        stage.handle(snap([pend("j", 1)], good, cluster="elsewhere"))
    with pytest.raises(StageError, match="node 'x' is in group 'zz', which the cluster spec lacks"):
        stage.handle(snap([pend("j", 1)], [*good, node("x", "a").model_copy(update={"group": "zz"})]))
    with pytest.raises(StageError, match="free_gpus 9 exceeds its group's capacity 8"):
        stage.handle(snap([pend("j", 1)], [node("a-0", "a"), node("b-0", "b", gpus=9)]))
    with pytest.raises(StageError, match="3 nodes in group 'a'"):
        stage.handle(snap([pend("j", 1)], [node(f"a-{i}", "a") for i in range(3)]))


def test_empty_queue_and_an_all_excluded_queue() -> None:
    stage = FeaturizerStage({"two": two_group_spec()})
    nodes = [node("a-0", "a"), node("b-0", "b")]
    m = stage.handle(snap([], nodes))
    assert m.job_ids == () and m.values == () and len(m.cluster_values) == len(CLUSTER_FEATURES)
    m = stage.handle(snap([pend("cpu", 0)], nodes))  # a GPU-only spec excludes CPU-only jobs
    assert m.job_ids == () and "0 GPUs" in m.excluded[0].reason


def test_larger_limits_reach_the_matrix() -> None:
    nodes = [node("a-0", "a"), node("b-0", "b")]
    jobs = [pend(f"j{i}", 1, submit=float(i)) for i in range(5000)]
    small_snap = snap(jobs[:1], nodes)
    big = QueueSnapshot.model_validate(  # a snapshot decoded under raised limits
        {**dict(small_snap), "pending": PendingJobs.of(jobs)}, context=Limits(max_jobs=8192).context()
    )
    with pytest.raises(
        StageError, match=r"more than the limit of 4096 \(max_jobs; raise it with HYLO_MAX_JOBS\)"
    ):
        FeaturizerStage({"two": two_group_spec()}, limits=Limits(max_jobs=4096)).handle(big)
    limits = Limits(max_jobs=8192, max_message_bytes=1 << 24)
    m = FeaturizerStage({"two": two_group_spec()}, limits=limits).handle(big)
    assert len(m.job_ids) == 5000
    # without limits, the configured ones (HYLO_MAX_JOBS, 100,000 by default; issue 22)
    assert len(FeaturizerStage({"two": two_group_spec()}).handle(big).job_ids) == 5000


def test_production_features_equal_the_simulators() -> None:
    """The featurizer on a snapshot of a simulated cluster gives the simulator's features exactly.

    Embedded cluster, generated workload (whole and fractional jobs, GPU-type constraints, gangs):
    200 jobs started with the simulator's best-fit, the next 150 queued. The VC feature's codes are
    only comparable with one VC (the simulator codes VCs by the trace's table, production by the
    spec's partitions), so the workload uses one.
    """
    spec = load_cluster_spec("embedded")
    table = generate_for_cluster(spec, 400, seed=3)
    table = table.with_fields(vc=np.zeros(len(table), dtype=np.int64))
    table.vcs = ["default"]
    bound = bind_jobs(table, spec)
    jobs = bound.jobs
    est = np.nan_to_num(jobs.estimate, nan=3600.0)
    running = list(range(200))
    sim = fill_cluster(bound, running, start={j: float(jobs.submit[j]) for j in running}, estimate=est)
    assert len(sim.allocs) > 50 and (jobs.gpu_milli[list(sim.allocs)] < 1000).any()
    queued = np.arange(200, 350)
    now = float(jobs.submit[queued].max()) + 30.0
    snapshot = snapshot_of(sim, queued.tolist(), now, cluster="embedded")
    m = FeaturizerStage({"embedded": spec}).handle(snapshot)

    builder = SimViewBuilder(bound, est, check_values=True)
    run_jobs = RunningJobs()
    for j, a in sim.allocs.items():
        run_jobs.add(j, a.group, sim.est_end(j))
    qv, cv = builder.views(sim.state, queued, run_jobs)
    expected = compute_features(qv, cv, now)

    assert m.job_ids == tuple(str(i) for i in jobs.ids[queued])
    got = np.asarray(m.values)
    np.testing.assert_allclose(got[:, : len(JOB_FEATURES)], expected.job, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got[:, len(JOB_FEATURES)], expected.ways)
    np.testing.assert_allclose(np.asarray(m.cluster_values), expected.cluster, rtol=0, atol=1e-12)
    # a non-trivial state: some jobs fit now, some do not, fragmentation is not zero
    col = m.columns.index("can_schedule_now")
    assert 0 < got[:, col].sum() < len(queued)
