"""The views' validation, the simulator adapter and the sorted running-job set."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from feature_views import cluster_view, queue_view

from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.features import ClusterView, QueueView, RunningJobs, SimViewBuilder, compute_features
from shared.scheduling.binding import bind_jobs
from shared.scheduling.placement import make_placer
from shared.scheduling.state import ClusterState

GIB = 1024


def _queue_args(**over: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        gpus=[1, 2],
        gpu_milli=[1000, 1000],
        cpus_milli=[1_000, 2_000],
        mem_mib=[1_024, 2_048],
        est_runtime_s=[60.0, 120.0],
        submit_s=[0.0, 1.0],
        user=[0, 1],
        vc=[0, 0],
        eligible=[[True], [True]],
    )
    args.update(over)
    return args


def _cluster_args(**over: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(
        gpu_type=[0],
        gpus_per_node=[4],
        node_count=[2],
        cpus_per_node_milli=[8_000],
        mem_per_node_mib=[16_384],
        free_gpus=[4, 0],
        free_share_milli=[1000, 0],
        free_cpus_milli=[8_000, 0],
        free_mem_mib=[16_384, 0],
        run_group=[0],
        run_gpus=[4.0],
        run_end_s=[100.0],
    )
    args.update(over)
    return args


def test_valid_views_build() -> None:
    q = QueueView(**_queue_args())
    c = ClusterView(**_cluster_args())
    assert len(q) == 2 and c.n_groups == 1
    np.testing.assert_array_equal(c.node_offsets, [0, 2])
    np.testing.assert_array_equal(q.gpu_demand, [1.0, 2.0])


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (dict(gpu_milli=[500, 1000], gpus=[2, 2]), "fractional"),
        (dict(cpus_milli=[-1, 0]), "cpus_milli"),
        (dict(est_runtime_s=[np.nan, 1.0]), "NaN"),
        (dict(vc=[0, 1]), "vc codes"),
        (dict(eligible=[[True], [False]]), "eligible node group"),
        (dict(gpu_milli=[0, 1000]), "gpu_milli"),
    ],
)
def test_queue_value_checks(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        QueueView(**_queue_args(**over))
    QueueView(**_queue_args(**over), check_values=False)  # only shapes are checked then


@pytest.mark.parametrize(
    "over",
    [
        dict(user=[0]),
        dict(eligible=[[True, False]]),
        dict(eligible=[True, True]),
        dict(submit_s=[[0.0], [1.0]]),
    ],
)
def test_queue_shape_checks_always_run(over: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        QueueView(**_queue_args(**over), check_values=False)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (dict(free_gpus=[5, 0]), "free_gpus"),
        (dict(free_cpus_milli=[9_000, 0]), "free_cpus_milli"),
        (dict(free_share_milli=[500, 0]), "free whole GPU"),
        (dict(free_share_milli=[1000, 1001]), "free_share_milli"),
        (dict(run_group=[1]), "run_group"),
        (dict(run_end_s=[np.inf]), "infinite"),
    ],
)
def test_cluster_value_checks(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterView(**_cluster_args(**over))


@pytest.mark.parametrize(
    "over",
    [dict(free_gpus=[4]), dict(node_count=[0]), dict(run_gpus=[1.0, 2.0]), dict(gpus_per_node=[4, 4])],
)
def test_cluster_shape_checks(over: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ClusterView(**_cluster_args(**over), check_values=False)


def test_group_count_must_agree() -> None:
    cv = cluster_view(groups=[(1, 2, 1_000, GIB)], free=[(2, 1_000, GIB)])
    qv = queue_view([dict(gpus=1, cpu=0, mem=0, eligible=[0, 1])], n_groups=2)
    with pytest.raises(ValueError, match="groups"):
        compute_features(qv, cv, 0.0)


def test_sim_view_builder_reads_the_simulator_state() -> None:
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": "a", "gpu_type": "A", "count": 2, "gpus": 4, "cpus": 16, "mem_gib": 64},
                {"name": "b", "gpu_type": "B", "count": 1, "gpus": 2, "cpus": 8, "mem_gib": 32},
            ],
        },
        "test",
    )
    table = build_table(
        ids=["x", "y", "z"],
        submit=[0.0, 1.0, 2.0],
        runtime=[10.0, 10.0, 10.0],
        estimate=[50.0, 60.0, 70.0],
        gpus=[3, 1, 1],
        gpu_milli=[1000, 1000, 400],
        type_set=[1, 0, 2],
        type_sets=[(), ("A",), ("B",)],
        vcs=["default", "other"],
        vc=[0, 1, 0],
    )
    bound = bind_jobs(table, spec)
    state = ClusterState(spec, {1})
    placer = make_placer("first-fit")
    a = placer.place(state, 3, 1000, 12_000, 48 * GIB, (0,), None, 0)  # job x: 3 GPUs on node 0
    assert a is not None
    state.take(a)
    f = placer.place(state, 1, 400, 1_600, 6_554, (1,), None, 0)  # job z: a share in group b
    assert f is not None
    state.take(f)
    builder = SimViewBuilder(bound, bound.jobs.estimate, check_values=True)
    running = RunningJobs()
    running.add(2, 1, 72.0)
    running.add(0, 0, 50.0)
    qv, cv = builder.views(state, [1], running)
    # job y (1 GPU, any type, default requests 4 CPUs / 16 GiB per GPU, vc "other")
    np.testing.assert_array_equal(qv.eligible, [[True, True]])
    assert (qv.cpus_milli[0], qv.mem_mib[0], qv.vc[0], qv.n_vcs) == (4_000, 16 * GIB, 1, 2)
    assert qv.est_runtime_s[0] == 60.0
    np.testing.assert_array_equal(cv.free_gpus, [1, 4, 1])
    np.testing.assert_array_equal(cv.free_share_milli, [1000, 1000, 1000])  # node 2: GPU 1 free
    np.testing.assert_array_equal(cv.free_cpus_milli, [4_000, 16_000, 8_000 - 1_600])
    np.testing.assert_array_equal(cv.run_group, [0, 1])  # sorted by estimated end
    np.testing.assert_allclose(cv.run_gpus, [3.0, 0.4])
    np.testing.assert_array_equal(cv.gpus_per_node, [4, 2])
    assert cv.gpu_type_names == ("A", "B")


def test_sim_view_builder_rejects_missing_estimates() -> None:
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [{"name": "a", "gpu_type": "A", "count": 1, "gpus": 1, "cpus": 4, "mem_gib": 16}],
        },
        "test",
    )
    bound = bind_jobs(build_table(ids=["x"], submit=[0.0], runtime=[1.0], gpus=[1]), spec)
    with pytest.raises(ValueError, match="NaN"):
        SimViewBuilder(bound, bound.jobs.estimate)


def test_running_jobs_stay_sorted_by_end() -> None:
    running = RunningJobs(capacity=2)
    ends = {10: 5.0, 11: 1.0, 12: 5.0, 13: 3.0, 14: 9.0, 15: 5.0}
    for job, end in ends.items():
        running.add(job, job % 3, end)
    assert list(running.est_end) == sorted(ends.values())
    with pytest.raises(ValueError, match="already running"):
        running.add(10, 0, 1.0)
    running.remove(12)  # one of three jobs ending at 5.0
    running.remove(11)
    assert 12 not in running and 10 in running and len(running) == 4
    assert list(running.jobs) == [13, 10, 15, 14]
    assert list(running.group) == [13 % 3, 10 % 3, 15 % 3, 14 % 3]
    assert list(running.est_end) == [3.0, 5.0, 5.0, 9.0]
