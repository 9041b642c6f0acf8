"""Every feature stays in [0, 1] and finite on arbitrary (valid) views, including awkward ones.

The views are drawn directly (not through the simulator's binding), as the production featurizer
may build them: eligibility that includes groups a job does not fit, CPU-only jobs, fractional
shares, groups without GPUs, running jobs past their estimated end, zero estimates.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    ClusterView,
    FeatureSampler,
    QueueView,
    compute_features,
)


@st.composite
def views(draw: st.DrawFn) -> tuple[QueueView, ClusterView, float]:
    n_groups = draw(st.integers(1, 4))
    gpn = [draw(st.sampled_from([0, 1, 2, 4, 8])) for _ in range(n_groups)]
    count = [draw(st.integers(1, 5)) for _ in range(n_groups)]
    cap_cpu = [draw(st.sampled_from([1_000, 8_000, 64_000])) for _ in range(n_groups)]
    cap_mem = [draw(st.sampled_from([1_024, 65_536])) for _ in range(n_groups)]
    free, share, cpu, mem = [], [], [], []
    for k in range(n_groups):
        for _ in range(count[k]):
            f = draw(st.integers(0, gpn[k]))
            free.append(f)
            share.append(1000 if f > 0 else (draw(st.integers(0, 1000)) if gpn[k] else 0))
            cpu.append(draw(st.integers(0, cap_cpu[k])))
            mem.append(draw(st.integers(0, cap_mem[k])))
    now = draw(st.floats(0, 1e6))
    n_run = draw(st.integers(0, 12))
    cluster = ClusterView(
        gpu_type=list(range(n_groups)),
        gpus_per_node=gpn,
        node_count=count,
        cpus_per_node_milli=cap_cpu,
        mem_per_node_mib=cap_mem,
        free_gpus=free,
        free_share_milli=share,
        free_cpus_milli=cpu,
        free_mem_mib=mem,
        run_group=[draw(st.integers(0, n_groups - 1)) for _ in range(n_run)],
        run_gpus=[draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 8.0])) for _ in range(n_run)],
        run_end_s=[now + draw(st.floats(-1e4, 1e6)) for _ in range(n_run)],
        node_slack=draw(st.integers(0, 2)),
    )
    q = draw(st.integers(0, 16))
    gpus = [draw(st.sampled_from([0, 1, 1, 2, 3, 8, 16, 40])) for _ in range(q)]
    milli = [draw(st.sampled_from([1000, 1000, 100, 999])) if g == 1 else 1000 for g in gpus]
    elig = np.zeros((q, n_groups), dtype=bool)
    for j in range(q):
        elig[j, draw(st.integers(0, n_groups - 1))] = True
        elig[j] |= np.asarray([draw(st.booleans()) for _ in range(n_groups)])
    n_vcs = draw(st.integers(1, 3))
    queue = QueueView(
        gpus=gpus,
        gpu_milli=milli,
        cpus_milli=[draw(st.sampled_from([0, 500, 8_000, 200_000])) for _ in range(q)],
        mem_mib=[draw(st.sampled_from([0, 512, 100_000])) for _ in range(q)],
        est_runtime_s=[draw(st.sampled_from([0.0, 1.0, 60.0, 3_600.0, 1e7])) for _ in range(q)],
        submit_s=[now - draw(st.floats(-10.0, 1e7)) for _ in range(q)],
        user=[draw(st.integers(0, 3)) for _ in range(q)],
        vc=[draw(st.integers(0, n_vcs - 1)) for _ in range(q)],
        eligible=elig,
        n_vcs=n_vcs,
    )
    return queue, cluster, now


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(views())
def test_features_in_unit_interval(case: tuple[QueueView, ClusterView, float]) -> None:
    queue, cluster, now = case
    values = compute_features(queue, cluster, now)
    assert values.job.shape == (len(queue), len(JOB_FEATURES))
    assert values.cluster.shape == (len(CLUSTER_FEATURES),)
    for block in (values.job, values.cluster):
        assert np.isfinite(block).all()
        assert (block >= 0).all() and (block <= 1).all(), block
    can = values.column("can_schedule_now")
    assert set(np.unique(can)) <= {0.0, 1.0}
    # a job that cannot start anywhere has no placement
    assert (values.column("num_ways")[can == 0] == 0).all()
    sel = FeatureSampler().select(values)
    obs, critic = sel.apply(values)
    assert obs.shape == (len(queue), 8) and critic.shape == (5,)
