"""The predictor-based baselines: orders on predicted runtimes, EASY still on estimates.

Expected orders are worked out by hand from the formulas (``shared/policies/predicted.py``); the
predictions here are written into the table, so each test knows what every policy sees.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import JobTable, build_table
from shared.policies import (
    MissingPredictionsError,
    PolicyContext,
    baseline_names,
    make_policy,
    needs_predictions,
)
from shared.policies.capabilities import SnapshotPolicyError
from shared.policies.predicted import SmallFirst
from shared.policies.snapshot_keys import check_policy, snapshot_policies
from shared.scheduling.binding import bind_jobs
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator

PREDICTED = ("sjf-pred", "wfp3-pred", "unicep-pred", "f1-pred", "small-first")


def cluster(gpus: int = 8) -> ClusterSpec:
    group = {"name": "g", "gpu_type": "A", "count": 1, "gpus": gpus, "cpus": 64, "mem_gib": 512}
    return parse_cluster_spec({"name": "t", "node_groups": [group]}, "test")


# job  submit  estimate  predicted  runtime  GPUs
# 0    0       100       7200       7000     1
# 1    10      7200      50         60       1
# 2    20      3600      600        500      2
# 3    30      60        4000       3000     1
def jobs(predicted: bool = True) -> JobTable:
    optional = {"predicted": [7200.0, 50.0, 600.0, 4000.0]} if predicted else None
    return build_table(
        ids=["j0", "j1", "j2", "j3"],
        submit=[0.0, 10.0, 20.0, 30.0],
        runtime=[7000.0, 60.0, 500.0, 3000.0],
        estimate=[100.0, 7200.0, 3600.0, 60.0],
        gpus=[1, 1, 2, 1],
        optional=optional,
    )


def bound_policy(name: str, table: JobTable) -> object:
    spec = cluster()
    bound = bind_jobs(table, spec)
    policy = make_policy(name)
    policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=spec.total_gpus))
    return policy


def order_of(name: str, table: JobTable, now: float = 100.0) -> list[int]:
    policy = bound_policy(name, table)
    keys = policy.keys(np.arange(len(table)), now)  # type: ignore[attr-defined]
    return np.argsort(keys, kind="stable").tolist()


def test_sjf_pred_orders_by_the_predictions_sjf_by_the_estimates() -> None:
    # predictions 7200, 50, 600, 4000 -> 1, 2, 3, 0; estimates 100, 7200, 3600, 60 -> 3, 0, 2, 1
    assert order_of("sjf-pred", jobs()) == [1, 2, 3, 0]
    assert order_of("sjf", jobs()) == [3, 0, 2, 1]


def keys_of(name: str, table: JobTable, now: float) -> np.ndarray:
    policy = bound_policy(name, table)
    keys: np.ndarray = policy.keys(np.arange(len(table)), now)  # type: ignore[attr-defined]
    return keys


def test_every_predicted_policy_reads_the_predictions() -> None:
    """Changing only the predictions changes each one's keys; changing only the estimates does
    not (the estimates stay the scheduler's, for EASY)."""
    base = jobs()
    swapped = base.with_fields(predicted=base.predicted[::-1] * 0.5)
    other_estimates = base.with_fields(estimate=base.estimate[::-1].copy())
    for name in PREDICTED:
        mine = keys_of(name, base, now=5000.0)
        np.testing.assert_array_equal(keys_of(name, other_estimates, now=5000.0), mine, err_msg=name)
        assert not np.array_equal(keys_of(name, swapped, now=5000.0), mine), name


def test_small_first_runs_predicted_small_jobs_first_each_class_by_arrival() -> None:
    # threshold 1 h: small are 1 (50 s) and 2 (600 s); large 0 (7200 s) and 3 (4000 s)
    assert order_of("small-first", jobs()) == [1, 2, 0, 3]
    policy = SmallFirst(threshold_s=5000.0)  # now 3 (4000 s) is small too
    spec = cluster()
    bound = bind_jobs(jobs(), spec)
    policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=8))
    assert np.argsort(policy.keys(np.arange(4), 0.0), kind="stable").tolist() == [1, 2, 3, 0]
    with pytest.raises(ValueError, match="threshold must be > 0"):
        SmallFirst(threshold_s=0.0)


def test_a_workload_without_predictions_is_refused_naming_the_policy() -> None:
    for name in PREDICTED:
        with pytest.raises(
            MissingPredictionsError, match=f"policy {name} orders by predicted runtimes, but 4 of 4"
        ):
            bound_policy(name, jobs(predicted=False))


def test_easy_still_plans_with_the_estimates() -> None:
    bound = bind_jobs(jobs(), cluster())
    sim = Simulator(bound, make_policy("sjf-pred"), SimConfig())
    np.testing.assert_array_equal(sim.est, bound.jobs.estimate)
    result = sim.run()
    # one 8-GPU node, all fit at once: every job starts on arrival whatever the order
    np.testing.assert_array_equal(result.start, bound.jobs.submit)


def test_names_and_the_snapshot_refusal() -> None:
    for name in PREDICTED:
        assert make_policy(name).name == name
        assert needs_predictions([name])
        assert name in baseline_names()
        assert name not in snapshot_policies()
        with pytest.raises(SnapshotPolicyError, match="predicted runtimes"):
            check_policy(name)
    assert not needs_predictions(["fcfs", "sjf", "sjf-oracle", "multifactor"])
    assert "sjf-oracle" not in baseline_names()
