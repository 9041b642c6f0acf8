"""The weighted orders ``bench/order_headroom.py`` searches (``bench/support/order_family.py``).

The bench's conclusion rests on two facts checked here by hand-worked orders: the all-zero member
is ``sjf-pred``'s order (so a gain over it is the weights' doing), and each weight moves jobs the
way its formula says. Predictions are written into the table, so every expected order is known.
"""

from __future__ import annotations

import numpy as np

from bench.support.order_family import WeightedPredictionOrder, Weights, blended_male
from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import JobTable, build_table
from shared.policies import PolicyContext, make_policy
from shared.scheduling.binding import bind_jobs

SPEC = parse_cluster_spec(
    {
        "name": "t",
        "node_groups": [{"name": "g", "gpu_type": "A", "count": 1, "gpus": 8, "cpus": 64, "mem_gib": 512}],
    },
    "test",
)


# job  submit  predicted  band (lo..hi)   runtime  GPUs
# 0    0       7200       7000..7400      7000     1
# 1    10      600        100..6000       500      8
# 2    20      900        850..950        800      1
# 3    30      4000       3000..5000      3000     2
def table() -> JobTable:
    return build_table(
        ids=["j0", "j1", "j2", "j3"],
        submit=[0.0, 10.0, 20.0, 30.0],
        runtime=[7000.0, 500.0, 800.0, 3000.0],
        estimate=[100.0, 100.0, 100.0, 100.0],
        gpus=[1, 8, 1, 2],
        optional={
            "predicted": [7200.0, 600.0, 900.0, 4000.0],
            "predicted_lo": [7000.0, 100.0, 850.0, 3000.0],
            "predicted_hi": [7400.0, 6000.0, 950.0, 5000.0],
        },
    )


def order(policy: object, now: float = 100.0) -> list[int]:
    bound = bind_jobs(table(), SPEC)
    policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=8))  # type: ignore[attr-defined]
    keys = policy.keys(np.arange(4), now)  # type: ignore[attr-defined]
    return np.argsort(keys, kind="stable").tolist()


def member(**weights: float) -> WeightedPredictionOrder:
    return WeightedPredictionOrder(Weights(**weights), "m")


def test_the_zero_member_is_sjf_preds_order() -> None:
    assert order(member()) == order(make_policy("sjf-pred")) == [1, 2, 3, 0]


def test_width_sends_wide_jobs_back() -> None:
    # width 1: keys log(600*8)=8.48, log(900)=6.80, log(4000*2)=8.99, log(7200)=8.88
    assert order(member(width=1.0)) == [2, 1, 0, 3]


def test_band_sends_uncertain_jobs_back() -> None:
    # band 1: job 1's log(6000/100)=4.09 lifts its key to 6.40+4.09=10.49, past every other job
    assert order(member(band=1.0)) == [2, 3, 0, 1]


def test_aging_lowers_keys_by_the_expected_slowdown_so_far() -> None:
    # key = log(pred) - 5 * log1p(wait / pred): at t=20,000 s the waits are 20,000, 19,990, 19,980
    # and 19,970 s; a job's key falls by more the shorter its prediction (a slowdown-like aging)
    policy = member(aging=5.0)
    order(policy, now=20_000.0)
    keys = policy.keys(np.arange(4), 20_000.0)
    pred, wait = np.array([7200.0, 600.0, 900.0, 4000.0]), 20_000.0 - np.array([0.0, 10.0, 20.0, 30.0])
    assert np.allclose(keys, np.log(pred) - 5.0 * np.log1p(wait / pred))
    assert policy.dynamic and not member().dynamic


def test_blend_one_orders_by_the_true_runtimes_and_is_clairvoyant() -> None:
    # true runtimes 7000, 500, 800, 3000
    policy = member(blend=1.0)
    assert order(policy) == [1, 2, 3, 0] and policy.clairvoyant
    predicted, runtime = np.array([7200.0, 600.0, 900.0, 4000.0]), np.array([7000.0, 500.0, 800.0, 3000.0])
    assert blended_male(predicted, runtime, 1.0) == 0.0
    # blend 0: median of |log(pred/true)| = median(0.028, 0.182, 0.118, 0.288) = (0.118 + 0.182) / 2
    expected = (np.log(900 / 800) + np.log(600 / 500)) / 2
    assert abs(blended_male(predicted, runtime, 0.0) - expected) < 1e-12
    assert abs(blended_male(predicted, runtime, 0.5) - expected / 2) < 1e-12
