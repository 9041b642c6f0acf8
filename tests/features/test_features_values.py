"""Every feature against values computed by hand on a tiny cluster and queue.

The cluster (GiB written as 1024 MiB):

    group 0: 2 nodes x 4 GPUs, 32 CPUs, 128 GiB   capacity 8 GPUs
    group 1: 1 node  x 8 GPUs, 128 CPUs, 256 GiB  capacity 8 GPUs   (cluster: 16 GPUs)

    node 0 (group 0): 4 GPUs, 32 CPUs, 128 GiB free   -> idle
    node 1 (group 0): 1 GPU,   8 CPUs,  32 GiB free   -> partially used
    node 2 (group 1): 6 GPUs, 112 CPUs, 192 GiB free  -> partially used
    running: 3 GPUs in group 0 ending at 10,100; 2 GPUs in group 1 ending at 15,000

The queue at now = 10,000 (two VCs):

    j0: 2 GPUs,  8 CPUs,  32 GiB, est   600 s, submitted  9,400, user 0, vc 0, groups {0}
    j1: 8 GPUs, 32 CPUs, 128 GiB, est 3,600 s, submitted 10,000, user 1, vc 1, groups {0, 1}
    j2: 0.5 GPU (share 500), 2 CPUs, 8 GiB, est 60 s, submitted 7,000, user 0, vc 0, groups {1}

Pools: j0 {0}: 8 GPUs, 5 free, 2 nodes, 1 idle; j1 {0,1}: 16, 11 free, 3 nodes, 1 idle;
j2 {1}: 8, 6 free, 1 node, 0 idle. Each expected number below is written as the formula it
comes from, with the numbers of this setting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from feature_views import cluster_view, queue_view

from shared.features import CLUSTER_FEATURES, JOB_FEATURES, FeatureConfig, FeatureValues, compute_features

GIB = 1024
NOW = 10_000.0
LOG_H = math.log1p(7 * 86400 / 60)  # log1p(horizon / time unit) with the default constants


def _setting() -> FeatureValues:
    cv = cluster_view(
        groups=[(2, 4, 32_000, 128 * GIB), (1, 8, 128_000, 256 * GIB)],
        free=[(4, 32_000, 128 * GIB), (1, 8_000, 32 * GIB), (6, 112_000, 192 * GIB)],
        running=[(0, 3.0, 10_100.0), (1, 2.0, 15_000.0)],
    )
    qv = queue_view(
        [
            dict(gpus=2, cpu=8_000, mem=32 * GIB, est=600, submit=9_400, user=0, vc=0, eligible=[0]),
            dict(gpus=8, cpu=32_000, mem=128 * GIB, est=3_600, submit=10_000, user=1, vc=1, eligible=[0, 1]),
            dict(gpus=1, milli=500, cpu=2_000, mem=8 * GIB, est=60, submit=7_000, user=0, vc=0, eligible=[1]),
        ],
        n_groups=2,
        n_vcs=2,
    )
    return compute_features(qv, cv, NOW)


EXPECTED_JOB = {
    # log1p(GPUs) / log1p(pool GPUs)
    "gpus": [math.log(3) / math.log(9), math.log(9) / math.log(17), math.log(1.5) / math.log(9)],
    # pool GPUs / cluster GPUs
    "gpu_type": [8 / 16, 16 / 16, 8 / 16],
    # vc / (n_vcs - 1)
    "vc": [0.0, 1.0, 0.0],
    # log1p(t / 60) / log1p(horizon / 60)
    "requested_time": [math.log(11) / LOG_H, math.log(61) / LOG_H, math.log(2) / LOG_H],
    # (submit - oldest) / (now - oldest), oldest = 7,000
    "submit_time": [2_400 / 3_000, 3_000 / 3_000, 0.0],
    # waits 600, 0, 3,000 s on the same log scale
    "wait": [math.log(11) / LOG_H, 0.0, math.log(51) / LOG_H],
    # CPUs / (fewest nodes x CPUs per node), best eligible group:
    # j0 8/32; j1 min(32/(2x32), 32/128); j2 2/128
    "cpus": [0.25, 0.25, 2 / 128],
    # j0 32/128; j1 min(128/(2x128), 128/256); j2 8/256
    "mem": [0.25, 0.5, 8 / 256],
    # idle nodes / nodes of the pool
    "free_nodes": [1 / 2, 1 / 3, 0.0],
    # j0 fits node 0; j1 needs 2 nodes x 4 GPUs in group 0 (top two give 4 + 1) or 8 on node 2
    # (6 free): no; j2 fits node 2's free GPUs
    "can_schedule_now": [1.0, 0.0, 1.0],
    # log1p(usable nodes) / log1p(nodes usable when empty): j0 1 of 2; j1 0 of 3; j2 1 of 1
    "num_ways": [math.log(2) / math.log(3), 0.0, 1.0],
    # demand spread by capacity: group 0 gets 2 + 8/2 = 6, group 1 gets 8/2 + 0.5 = 4.5;
    # D / (D + free GPUs of the pool)
    "demand_supply": [6 / (6 + 5), 10.5 / (10.5 + 11), 4.5 / (4.5 + 6)],
    # log1p(GPUs x t / 60) / log1p(pool GPUs x horizon / 60)
    "job_size": [
        math.log1p(2 * 600 / 60) / math.log1p(8 * 10_080),
        math.log1p(8 * 3_600 / 60) / math.log1p(16 * 10_080),
        math.log1p(0.5 * 60 / 60) / math.log1p(8 * 10_080),
    ],
    # wait / (wait + max(t, 10))
    "urgency": [600 / 1_200, 0.0, 3_000 / 3_060],
    # GPUs ending within t in the pool / pool GPUs: j0 3 (ends in 100 s) of 8; j1 3 of 16 (the
    # group-1 job ends in 5,000 s > 3,600); j2 nothing within 60 s
    "future_availability": [3 / 8, 3 / 16, 0.0],
    # free GPUs on partially used nodes the job cannot use / free GPUs of the pool:
    # j0 node 1 (1 GPU) of 5; j1 node 1 and node 2 (1 + 6) of 11; j2 uses node 2: 0 of 6
    "fragmentation": [1 / 5, 7 / 11, 0.0],
    # queued GPU demand of the job's user / all queued demand (user 0: 2 + 0.5, user 1: 8)
    "user_share": [2.5 / 10.5, 8 / 10.5, 2.5 / 10.5],
}

EXPECTED_CLUSTER = {
    "free_gpus": 11 / 16,
    "fragmentation": 7 / 11,  # free GPUs on partially used nodes (1 + 6) / free GPUs
    "queue_demand": 10.5 / (10.5 + 16),
    "queue_length": math.log(4) / math.log(1025),
    "mean_urgency": (0.5 + 0.0 + 3_000 / 3_060) / 3,
    "runnable": 2 / 3,
    "future_availability": 3 / 16,  # GPUs ending within the next hour / cluster GPUs
}


def test_every_feature_has_a_hand_computed_value() -> None:
    assert set(EXPECTED_JOB) == set(JOB_FEATURES)
    assert set(EXPECTED_CLUSTER) == set(CLUSTER_FEATURES)


@pytest.mark.parametrize("name", JOB_FEATURES)
def test_job_feature(name: str) -> None:
    values = _setting()
    np.testing.assert_allclose(values.column(name), EXPECTED_JOB[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CLUSTER_FEATURES)
def test_cluster_feature(name: str) -> None:
    values = _setting()
    assert values.cluster_value(name) == pytest.approx(EXPECTED_CLUSTER[name], rel=1e-12, abs=1e-12)


def test_raw_ways_counts() -> None:
    np.testing.assert_array_equal(_setting().ways, [1, 0, 1])


def test_times_saturate_at_the_horizon() -> None:
    # a 2-hour horizon: the 3,600 s request is halfway in log terms, longer waits saturate at 1
    cfg = FeatureConfig(horizon_s=7_200.0)
    cv = cluster_view(groups=[(1, 1, 1_000, GIB)], free=[(1, 1_000, GIB)])
    qv = queue_view(
        [dict(gpus=1, cpu=0, mem=0, est=3_600, submit=0.0, eligible=[0])],
        n_groups=1,
    )
    v = compute_features(qv, cv, 100_000.0, cfg)
    assert v.column("requested_time")[0] == pytest.approx(math.log(61) / math.log(121))
    assert v.column("wait")[0] == 1.0


def test_empty_queue() -> None:
    cv = cluster_view(groups=[(1, 2, 1_000, GIB)], free=[(1, 1_000, GIB)], running=[(0, 1.0, 50.0)])
    qv = queue_view([], n_groups=1)
    v = compute_features(qv, cv, 0.0)
    assert v.job.shape == (0, len(JOB_FEATURES))
    assert v.cluster_value("free_gpus") == 0.5
    assert v.cluster_value("fragmentation") == 1.0  # the only free GPU is on a busy node
    assert v.cluster_value("future_availability") == 0.5  # 1 GPU ends within the hour
    assert v.cluster_value("mean_urgency") == 0.0
    assert v.cluster_value("runnable") == 0.0


def test_cpu_only_job_on_a_full_cluster() -> None:
    # a CPU-only job counts no GPU demand; the pool has no free GPU: ratios read 0, not NaN
    cv = cluster_view(groups=[(1, 2, 4_000, 8 * GIB)], free=[(0, 3_000, 4 * GIB)])
    qv = queue_view([dict(gpus=0, cpu=2_000, mem=GIB, eligible=[0])], n_groups=1)
    v = compute_features(qv, cv, 0.0)
    assert v.column("gpus")[0] == 0.0
    assert v.column("demand_supply")[0] == 0.0
    assert v.column("fragmentation")[0] == 0.0
    assert v.column("can_schedule_now")[0] == 1.0  # 2 of 3 free CPUs, 1 of 4 free GiB
    assert v.column("cpus")[0] == 0.5
    assert v.column("user_share")[0] == 0.0


@pytest.mark.parametrize("order", [[2, 0, 1, 3], [3, 1, 0, 2]])  # sorted by end, and not
def test_future_availability_counts_ends_within_the_request_inclusive(order: list[int]) -> None:
    # one group of 16 GPUs; running jobs end exactly at now + 600, at now + 601, already past
    # their estimate (now - 5) and at now + 3,600
    running = [(0, 1.0, NOW + 600), (0, 2.0, NOW + 601), (0, 4.0, NOW - 5), (0, 8.0, NOW + 3_600)]
    cv = cluster_view(
        groups=[(2, 8, 64_000, 256 * GIB)],
        free=[(1, 64_000, 256 * GIB), (0, 64_000, 256 * GIB)],
        running=[running[k] for k in order],
    )
    qv = queue_view(
        [
            dict(gpus=1, cpu=0, mem=0, est=600, submit=NOW, eligible=[0]),
            dict(gpus=1, cpu=0, mem=0, est=0, submit=NOW, eligible=[0]),
            dict(gpus=1, cpu=0, mem=0, est=3_599, submit=NOW, eligible=[0]),
        ],
        n_groups=1,
    )
    v = compute_features(qv, cv, NOW)
    # t = 600: the job ending at now + 600 and the overdue one (1 + 4); t = 0: the overdue one;
    # t = 3,599: all but the last (1 + 2 + 4)
    np.testing.assert_allclose(v.column("future_availability"), [5 / 16, 4 / 16, 7 / 16])
    # within the next hour (inclusive): all four
    assert v.cluster_value("future_availability") == 15 / 16
