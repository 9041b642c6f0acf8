"""Base-policy keys from a snapshot: hand-checked priorities and the simulator's policies' keys."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.cluster import load_cluster_spec
from shared.policies import PolicyContext, make_policy
from shared.policies.snapshot_keys import (
    SNAPSHOT_POLICIES,
    SnapshotPolicyError,
    check_policy,
    priorities_from_keys,
    snapshot_keys,
)
from shared.scheduling.binding import bind_jobs
from shared.schemas import PendingJobs
from shared.workload import generate_for_cluster
from tests.stages.simsnap import pending_job
from tests.stages.stage_helpers import pend


def test_fcfs_priorities_break_ties_by_submit_then_position() -> None:
    jobs = PendingJobs.of(
        [
            pend("a", 1, submit=5.0),
            pend("b", 1, submit=1.0),
            pend("c", 1, submit=3.0),
            pend("d", 1, submit=1.0),
        ]
    )
    keys = snapshot_keys("fcfs", jobs, now=10.0)
    submit = np.array([j.submit_s for j in jobs])
    # order b (1, first), d (1, second), c (3), a (5): Q = 4 for the first, 1 for the last
    assert priorities_from_keys(keys, submit).tolist() == [1.0, 4.0, 2.0, 3.0]


def test_sjf_and_wfp3_by_hand() -> None:
    jobs = PendingJobs.of(
        [
            pend("a", 1, est=600.0),
            pend("b", 2, est=60.0),
            pend("c", 1, est=60.0),
            pend("d", 1, est=3600.0, submit=-3600.0),
        ]
    )
    submit = np.array([j.submit_s for j in jobs])
    # SJF: 60 s jobs first, the 1-GPU one before the 2-GPU one
    assert priorities_from_keys(snapshot_keys("sjf", jobs, 0.0), submit).tolist() == [2.0, 3.0, 4.0, 1.0]
    # WFP3 at t = 600: (wait / est)^3 x GPUs = 1, 1000 x 2, 1000, (4200/3600)^3 -> b, c, d, a
    keys = snapshot_keys("wfp3", jobs, 600.0)
    assert keys.tolist() == pytest.approx([-1.0, -2000.0, -1000.0, -((4200 / 3600) ** 3)])
    assert priorities_from_keys(keys, submit).tolist() == [1.0, 4.0, 3.0, 2.0]


def test_sjf_keys_are_exact_seconds_then_gpus() -> None:
    """floor(est) x 2^20 + GPUs: a 100 s job on 1,100 GPUs before a 101 s job on 53 (the old
    floor(est) + GPUs / 1000 gave 101.1 > 101.053); equal seconds go to fewer GPUs, then to the
    earlier submit."""
    jobs = PendingJobs.of(
        [
            pend("a", 53, est=101.0, submit=0.0),
            pend("b", 1100, est=100.0, submit=1.0),
            pend("c", 4, est=100.9, submit=3.0),
            pend("d", 4, est=100.2, submit=2.0),
        ]
    )
    keys = snapshot_keys("sjf", jobs, 10.0)
    assert keys.tolist() == [101 * 2**20 + 53, 100 * 2**20 + 1100, 100 * 2**20 + 4, 100 * 2**20 + 4]
    submit = np.array([j.submit_s for j in jobs])
    # order d (100 s, 4 GPUs, submitted first), c, b, a: Q = 4 for the first, 1 for the last
    assert priorities_from_keys(keys, submit).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_keys_equal_the_simulators_policies() -> None:
    """Same jobs, same clock: every snapshot-computable policy gives the simulator policy's keys."""
    spec = load_cluster_spec("embedded")
    bound = bind_jobs(generate_for_cluster(spec, 300, seed=1), spec)
    est = np.nan_to_num(bound.jobs.estimate, nan=3600.0)
    idx = np.arange(100, 300)
    now = float(bound.jobs.submit[idx].max()) + 100.0
    pending = PendingJobs.of(pending_job(bound, int(j), est) for j in idx)
    assert SNAPSHOT_POLICIES == ("fcfs", "sjf", "wfp3", "unicep", "f1", "multifactor")
    for name in SNAPSHOT_POLICIES:
        policy = make_policy(name)
        policy.bind(PolicyContext(workload=bound, estimate=est, capacity_gpus=spec.total_gpus))
        expected = policy.keys(idx, now)
        got = snapshot_keys(name, pending, now, spec)
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9, err_msg=name)
        if name == "sjf":  # exact integers: equal, not merely close
            np.testing.assert_array_equal(got, expected)


def test_policies_a_snapshot_cannot_compute() -> None:
    with pytest.raises(SnapshotPolicyError, match="true runtimes"):
        check_policy("sjf-oracle")
    with pytest.raises(SnapshotPolicyError, match="unknown base policy 'lifo'"):
        check_policy("lifo")
    with pytest.raises(SnapshotPolicyError, match="multifactor needs the cluster spec"):
        snapshot_keys("multifactor", PendingJobs.of([pend("a", 1)]), 0.0)
