"""Hand-computed schedules on tiny clusters.

Every expected start time below is derived by hand in the comment above its test, from the rules
documented in ``shared/sim`` (event loop: ends at t are applied before arrivals at t, then one
scheduling cycle; policies: the formulas of ``shared/policies``). None of the numbers was copied
from a run of the simulator.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import JobTable, build_table
from shared.policies import make_policy
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator

NAN = float("nan")

# ---------------------------------------------------------------------------------------------
# helpers


def cluster(*groups: dict[str, Any], **extra: Any) -> ClusterSpec:
    """A spec from partial node groups; unspecified fields get roomy defaults (64 cores, 1 TiB)."""
    base = {"gpu_type": "V100", "count": 1, "gpus": 4, "cpus": 64, "mem_gib": 1024}
    node_groups = [{"name": f"g{k}", **base, **g} for k, g in enumerate(groups)]
    return parse_cluster_spec({"name": "test", "node_groups": node_groups, **extra}, "test")


def job(jid: str, submit: float, runtime: float, gpus: int, **kw: Any) -> dict[str, Any]:
    return {"id": jid, "submit": submit, "runtime": runtime, "gpus": gpus, **kw}


def table(*rows: dict[str, Any], **tables: Any) -> JobTable:
    """A JobTable from job() rows; absent per-job fields take build_table's neutral defaults."""
    defaults = {
        "estimate": NAN,
        "gpu_milli": 1000,
        "type_set": 0,
        "cpus_milli": -1,
        "mem_mib": -1,
        "user": 0,
        "vc": 0,
        "qos": 0,
    }
    cols: dict[str, list[Any]] = {
        "ids": [r["id"] for r in rows],
        "submit": [r["submit"] for r in rows],
        "runtime": [r["runtime"] for r in rows],
        "gpus": [r["gpus"] for r in rows],
    }
    for name, default in defaults.items():
        cols[name] = [r.get(name, default) for r in rows]
    return build_table(**cols, **tables)


def simulate(
    jobs: JobTable,
    spec: ClusterSpec,
    policy: str = "fcfs",
    *,
    job_range: tuple[int, int] | None = None,
    metric_range: tuple[int, int] | None = None,
    **config: Any,
) -> tuple[SimResult, Simulator, BoundWorkload]:
    """Bind (expecting no exclusion), simulate with reservations recorded, check the final state."""
    cfg = SimConfig(**config)
    bound = bind_jobs(jobs, spec, node_slack=cfg.node_slack)
    assert bound.exclusions == [], [str(e) for e in bound.exclusions]
    sim = Simulator(bound, make_policy(policy), cfg)
    res = sim.run(job_range, metric_range, record_reservations=True)
    return res, sim, bound


def starts(res: SimResult) -> dict[str, float]:
    return {str(i): float(s) for i, s in zip(res.jobs.ids, res.start, strict=True)}


def check_ends(res: SimResult) -> None:
    done = ~np.isnan(res.start)
    np.testing.assert_array_equal(res.end[done], res.start[done] + res.jobs.runtime[done])


def busy_at(res: SimResult, t: float) -> float:
    """Busy GPUs after the last cycle at or before t."""
    k = int(np.searchsorted(res.timeline_t, t, side="right")) - 1
    return float(res.timeline_busy[k])


# ---------------------------------------------------------------------------------------------
# policy order on one node
#
# One node with 4 GPUs and 4 cores; every job asks for all 4 cores, so exactly one job runs at a
# time whatever its GPUs, and the start order is the policy's order at each decision time.
# A (1 GPU) runs [0, 100). B..E arrive while A runs (oracle runtimes: estimate = runtime):
#
#   job  submit  runtime  GPUs
#   B    50      50       2
#   C    51      500      4
#   D    52      40       1
#   E    53      30       3
#
# FCFS: submit order B, C, D, E -> B 100, C 150, D 650, E 690.
#
# SJF: key floor(est) + GPUs/1000 = B 50.002, C 500.004, D 40.001, E 30.003 -> E, D, B, C:
#   E 100-130, D 130-170, B 170-220, C 220.  (sjf-oracle: the same, the oracle makes est = runtime.)
#
# WFP3: priority (wait/est)^3 x GPUs, recomputed at each decision:
#   t=100 (waits 50, 49, 48, 47): B (50/50)^3*2 = 2; C (49/500)^3*4 = 0.0038; D (48/40)^3 = 1.728;
#         E (47/30)^3*3 = 1.5667^3*3 = 11.53 -> E runs 100-130
#   t=130: B (80/50)^3*2 = 8.192; C (79/500)^3*4 = 0.0158; D (78/40)^3 = 7.415 -> B runs 130-180
#   t=180: C (129/500)^3*4 = 0.0687; D (128/40)^3 = 32.77 -> D runs 180-220; C at 220.
#
# UNICEP: priority wait / (log2(GPUs+1) x est); log2 3 = 1.585, log2 4 = 2, log2 5 = 2.3219:
#   t=100: B 50/(1.585*50) = 0.631; C 49/(2.3219*500) = 0.042; D 48/(1*40) = 1.2;
#          E 47/(2*30) = 0.783 -> D runs 100-140
#   t=140: B 90/79.25 = 1.136; C 89/1161 = 0.077; E 87/60 = 1.45 -> E runs 140-170
#   t=170: B 120/79.25 = 1.514; C 119/1161 = 0.103 -> B runs 170-220; C at 220.
#
# F1: key log10(est) x GPUs + 870 x log10(submit):
#   B 2*1.69897 + 870*1.69897 = 1481.50    C 4*2.69897 + 870*1.70757 = 10.80 + 1485.59 = 1496.38
#   D 1*1.60206 + 870*1.71600 = 1494.52    E 3*1.47712 + 870*1.72428 = 4.43 + 1500.12 = 1504.55
#   -> B, D, C, E: B 100-150, D 150-190, C 190-690, E 690.
#
# Multifactor (default weights 1000, one user, no partitions or QOS defined):
#   floor(1000 age + 1000 GPUs/4 + 1000 fairshare + 1000 partition + 0 qos); waits are < 700 s, so
#   1000 age < 1.2; fairshare is 2^-(1/1) = 0.5 for everybody (one user holding all the usage);
#   partition factor 1/1 = 1. Priorities B 1750, C 2500, D 1500, E 2250 at every decision
#   -> C, E, B, D: C 100-600, E 600-630, B 630-680, D 680.
POLICY_ORDER_EXPECTED = {
    "fcfs": {"B": 100, "C": 150, "D": 650, "E": 690},
    "sjf": {"E": 100, "D": 130, "B": 170, "C": 220},
    "sjf-oracle": {"E": 100, "D": 130, "B": 170, "C": 220},
    "wfp3": {"E": 100, "B": 130, "D": 180, "C": 220},
    "unicep": {"D": 100, "E": 140, "B": 170, "C": 220},
    "f1": {"B": 100, "D": 150, "C": 190, "E": 690},
    "multifactor": {"C": 100, "E": 600, "B": 630, "D": 680},
}


def policy_order_jobs() -> JobTable:
    return table(
        job("A", 0, 100, 1, cpus_milli=4000),
        job("B", 50, 50, 2, cpus_milli=4000),
        job("C", 51, 500, 4, cpus_milli=4000),
        job("D", 52, 40, 1, cpus_milli=4000),
        job("E", 53, 30, 3, cpus_milli=4000),
    )


@pytest.mark.parametrize("policy", sorted(POLICY_ORDER_EXPECTED))
@pytest.mark.parametrize("backfill", ["none", "easy", "greedy"])
def test_policy_order_on_one_node(policy: str, backfill: str) -> None:
    spec = cluster({"gpus": 4, "cpus": 4, "mem_gib": 256})
    res, _, _ = simulate(policy_order_jobs(), spec, policy, backfill=backfill, oracle_runtimes=True)
    got = starts(res)
    assert got.pop("A") == 0.0
    assert got == POLICY_ORDER_EXPECTED[policy]
    check_ends(res)


def test_policy_orders_are_all_different() -> None:
    """The scenario above separates every policy (except the two SJFs under the oracle)."""
    orders = {
        tuple(sorted(exp, key=exp.__getitem__))
        for name, exp in POLICY_ORDER_EXPECTED.items()
        if name != "sjf-oracle"
    }
    assert len(orders) == 6


# SJF ranks by the estimate, sjf-oracle by the true runtime. One node, one GPU, A runs [0, 100).
# P: runtime 10 but estimated 500; Q: runtime 300, estimated 20.
#   sjf (est):      Q (20) before P (500) -> Q 100-400, P 400
#   sjf-oracle:     P (10) before Q (300) -> P 100-110, Q 110
@pytest.mark.parametrize(
    ("policy", "expected"), [("sjf", {"Q": 100, "P": 400}), ("sjf-oracle", {"P": 100, "Q": 110})]
)
def test_sjf_estimate_vs_oracle(policy: str, expected: dict[str, float]) -> None:
    spec = cluster({"gpus": 1})
    jobs = table(
        job("A", 0, 100, 1, estimate=100),
        job("P", 10, 10, 1, estimate=500),
        job("Q", 20, 300, 1, estimate=20),
    )
    res, _, _ = simulate(jobs, spec, policy, backfill="easy")
    got = starts(res)
    assert got.pop("A") == 0.0
    assert got == expected


# ---------------------------------------------------------------------------------------------
# backfill modes
#
# One node, 4 GPUs, FCFS, oracle runtimes.
#   A: submit 0, 100 s, 2 GPUs  -> starts at 0 on an empty node (2 GPUs left)
#   H: submit 1,  50 s, 4 GPUs  -> the wide head: blocked until A ends
#   S: submit 2,  50 s, 1 GPU   -> short: would end at 52, before A's end (the shadow time 100)
#   L: submit 3, 200 s, 1 GPU   -> long: would end at 203 > 100, and H needs all 4 GPUs at 100
#
# none (committed head): nothing passes H. H starts at 100 when A ends and takes all 4 GPUs;
#   S and L start when H ends, at 150 (1 GPU each).
# easy: at t=1 H gets a reservation at 100 (A's end) on all 4 GPUs; S ends by 52 <= 100 so it may
#   start at 2; L would still run at 100 and the reservation leaves 4 - 4 = 0 GPUs for such jobs,
#   so it waits. H starts at 100, L fails then (H holds all GPUs), gets a reservation at 150 and
#   starts at 150.
# greedy: S starts at 2 and L at 3 (1 GPU still free). At 100 A ends but L holds 1 GPU until 203,
#   so H waits until 203.
BACKFILL_EXPECTED = {
    "none": {"A": 0, "H": 100, "S": 150, "L": 150},
    "easy": {"A": 0, "H": 100, "S": 2, "L": 150},
    "greedy": {"A": 0, "H": 203, "S": 2, "L": 3},
}


@pytest.mark.parametrize("backfill", sorted(BACKFILL_EXPECTED))
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_backfill_modes(backfill: str, placement: str) -> None:
    spec = cluster({"gpus": 4})
    jobs = table(job("A", 0, 100, 2), job("H", 1, 50, 4), job("S", 2, 50, 1), job("L", 3, 200, 1))
    res, sim, _ = simulate(jobs, spec, backfill=backfill, placement=placement, oracle_runtimes=True)
    assert starts(res) == BACKFILL_EXPECTED[backfill]
    check_ends(res)
    assert res.backfill == backfill
    if backfill == "easy":
        # one timeline row per event (t, busy GPUs after the cycle, queued jobs):
        #   0: A starts (2, 0) | 1: H waits (2, 1) | 2: S starts (3, 1) | 3: L waits (3, 2)
        #   52: S ends (2, 2) | 100: A ends, H starts (4, 1) | 150: H ends, L starts (1, 0) | 350: L ends (0, 0)
        assert res.timeline_t.tolist() == [0, 1, 2, 3, 52, 100, 150, 350]
        assert res.timeline_busy.tolist() == [2, 2, 3, 3, 2, 4, 1, 0]
        assert res.timeline_queued.tolist() == [0, 1, 1, 2, 2, 1, 0, 0]
        # H's first reservation is A's end; L's is H's end (computed at 100, when H has started)
        first = dict(zip(res.jobs.ids.tolist(), sim.first_reservation.tolist(), strict=True))
        assert first["H"] == 100.0
        assert first["L"] == 150.0
        assert math.isnan(first["A"]) and math.isnan(first["S"])


# EASY lets a long job use what the reservation does not need.
# One node, 4 GPUs: A (2 GPUs, 0-100); H (3 GPUs, submit 1) is reserved at 100 and will need
# 3 of the 4 GPUs, leaving 1 for jobs still running then. L (1 GPU, 200 s, submit 3) ends at 203 > 100
# but fits in that 1 GPU: it starts at 3. At 100, A frees 2 GPUs: 4 - 1 (L) = 3 free, H starts at 100.
# Under none, L waits behind H: H starts at 100 (3 GPUs), then L fits in the last GPU at 100 too.
@pytest.mark.parametrize(("backfill", "l_start"), [("easy", 3.0), ("greedy", 3.0), ("none", 100.0)])
def test_easy_backfills_a_long_job_beside_the_reservation(backfill: str, l_start: float) -> None:
    spec = cluster({"gpus": 4})
    jobs = table(job("A", 0, 100, 2), job("H", 1, 50, 3), job("L", 3, 200, 1))
    res, _, _ = simulate(jobs, spec, backfill=backfill, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "H": 100.0, "L": l_start}


# ---------------------------------------------------------------------------------------------
# oracle runtimes vs estimates under EASY
#
# One node, 4 GPUs, FCFS, easy.
#   A: submit 0, runtime 100, estimate 300, 2 GPUs
#   H: submit 1, runtime 50 (estimate 50), 4 GPUs -> blocked behind A
#   L: submit 3, runtime 200 (estimate 200), 1 GPU
# Estimates: H's reservation is A's *estimated* end 300. L would end at 203 <= 300, so it starts
#   at 3. A really ends at 100, leaving 4 - 1 = 3 GPUs: H waits for L to end at 203.
# Oracle: H's reservation is 100; L ends at 203 > 100 and the reservation needs all 4 GPUs, so L
#   waits. H starts at 100, L gets a reservation at H's end 150 and starts then.
@pytest.mark.parametrize(
    ("oracle", "expected", "first_res"),
    [
        (False, {"A": 0, "H": 203, "L": 3}, {"H": 300.0, "L": NAN}),
        (True, {"A": 0, "H": 100, "L": 150}, {"H": 100.0, "L": 150.0}),
    ],
)
def test_oracle_runtimes_vs_estimates(
    oracle: bool, expected: dict[str, float], first_res: dict[str, float]
) -> None:
    spec = cluster({"gpus": 4})
    jobs = table(
        job("A", 0, 100, 2, estimate=300),
        job("H", 1, 50, 4, estimate=50),
        job("L", 3, 200, 1, estimate=200),
    )
    res, sim, _ = simulate(jobs, spec, backfill="easy", oracle_runtimes=oracle)
    assert starts(res) == expected
    got = dict(zip(res.jobs.ids.tolist(), sim.first_reservation.tolist(), strict=True))
    np.testing.assert_array_equal([got["H"], got["L"]], [first_res["H"], first_res["L"]])


def test_estimates_are_required_without_the_oracle() -> None:
    spec = cluster({"gpus": 4})
    bound = bind_jobs(table(job("A", 0, 100, 2)), spec)
    with pytest.raises(ValueError, match="no runtime estimate"):
        Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=False))
    # the oracle needs none
    Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=True)).run()


# ---------------------------------------------------------------------------------------------
# the paper's configuration


# SimConfig.paper(): committed head (no backfill), first-fit, oracle runtimes.
# On the backfill scenario above it gives the "none" schedule, and it needs no estimates.
def test_paper_config() -> None:
    cfg = SimConfig.paper()
    assert (cfg.backfill, cfg.placement, cfg.oracle_runtimes) == ("none", "first-fit", True)
    assert (cfg.max_reservations, cfg.node_slack) == (0, 0)
    spec = cluster({"gpus": 4})
    jobs = table(job("A", 0, 100, 2), job("H", 1, 50, 4), job("S", 2, 50, 1), job("L", 3, 200, 1))
    bound = bind_jobs(jobs, spec)
    res = Simulator(bound, make_policy("fcfs"), cfg).run()
    assert starts(res) == BACKFILL_EXPECTED["none"]
    assert (res.placement, res.backfill) == ("first-fit", "none")


# ---------------------------------------------------------------------------------------------
# GPU types

TYPED = {"type_sets": [(), ("V100",), ("A100",)]}
V100, A100, ANY = 1, 2, 0


def two_type_cluster() -> ClusterSpec:
    return cluster(
        {"name": "v100", "gpu_type": "V100", "gpus": 4}, {"name": "a100", "gpu_type": "A100", "gpus": 4}
    )


# One V100 node and one A100 node, 4 GPUs each.
#   A: V100 only, 4 GPUs, 0-100 -> fills the V100 node
#   B: V100 only, 1 GPU, submit 1 -> must wait for A (100) although the A100 node is idle
#   C: any type, 1 GPU, submit 2 -> runs on the A100 node at 2, except under none where it waits
#      behind B and both start at 100 (B on V100, C on the still idle A100 node or the V100 one)
@pytest.mark.parametrize(("backfill", "c_start"), [("easy", 2.0), ("greedy", 2.0), ("none", 100.0)])
def test_job_waits_for_its_gpu_type(backfill: str, c_start: float) -> None:
    jobs = table(
        job("A", 0, 100, 4, type_set=V100),
        job("B", 1, 10, 1, type_set=V100),
        job("C", 2, 10, 1, type_set=ANY),
        **TYPED,
    )
    res, _, _ = simulate(jobs, two_type_cluster(), backfill=backfill, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "B": 100.0, "C": c_start}


# A blocked head of one type does not stall another type under EASY (one reservation per pool).
#   A: V100, 4 GPUs, 0-100;  H: V100, 4 GPUs, submit 1 -> blocked, reserved at 100 on the V100 node
#   Y: A100, 4 GPUs, 1000 s, submit 2 -> its pool (the A100 node) holds no reservation: starts at 2
# none: Y waits behind H; at 100 H starts on V100 and Y on A100.
@pytest.mark.parametrize(("backfill", "y_start"), [("easy", 2.0), ("greedy", 2.0), ("none", 100.0)])
def test_other_gpu_type_starts_while_head_blocked(backfill: str, y_start: float) -> None:
    jobs = table(
        job("A", 0, 100, 4, type_set=V100),
        job("H", 1, 50, 4, type_set=V100),
        job("Y", 2, 1000, 4, type_set=A100),
        **TYPED,
    )
    res, _, _ = simulate(jobs, two_type_cluster(), backfill=backfill, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "H": 100.0, "Y": y_start}


# Per-pool reservations (max_reservations=0) vs textbook EASY (max_reservations=1).
#   A1: V100, 4 GPUs, 0-100;  A2: A100, 2 GPUs, 0-100 (2 A100 GPUs left)
#   H1: V100, 4 GPUs, submit 1 -> blocked, reserved at 100 (V100 pool)
#   H2: A100, 4 GPUs, submit 2 -> blocked
#   X:  A100, 2 GPUs, 1000 s, submit 3
# max_reservations=0: H2 gets its own reservation at 100 on the A100 node (all 4 GPUs), so X
#   (ends 1003 > 100) may not take the 2 free A100 GPUs. At 100 H1 and H2 start; X fails, is
#   reserved at H2's end 150 and starts then.
# max_reservations=1: the only reservation is H1's (the first blocked job in FCFS order); H2 has
#   none, so X starts at 3 on the 2 free A100 GPUs and H2 waits until X ends at 1003.
@pytest.mark.parametrize(
    ("max_res", "expected"),
    [
        (0, {"A1": 0, "A2": 0, "H1": 100, "H2": 100, "X": 150}),
        (1, {"A1": 0, "A2": 0, "H1": 100, "H2": 1003, "X": 3}),
    ],
)
def test_per_pool_reservations(max_res: int, expected: dict[str, float]) -> None:
    jobs = table(
        job("A1", 0, 100, 4, type_set=V100),
        job("A2", 0, 100, 2, type_set=A100),
        job("H1", 1, 50, 4, type_set=V100),
        job("H2", 2, 50, 4, type_set=A100),
        job("X", 3, 1000, 2, type_set=A100),
        **TYPED,
    )
    res, sim, _ = simulate(
        jobs, two_type_cluster(), backfill="easy", max_reservations=max_res, oracle_runtimes=True
    )
    assert starts(res) == expected
    first = dict(zip(res.jobs.ids.tolist(), sim.first_reservation.tolist(), strict=True))
    assert first["H1"] == 100.0
    # max_reservations=1: H2 gets no reservation while H1 holds the only one; at 100 H1 starts and
    # H2, now the first blocked job, is reserved at X's end 1003
    assert first["H2"] == (100.0 if max_res == 0 else 1003.0)


# ---------------------------------------------------------------------------------------------
# multi-node gangs
#
# Two nodes of 8 GPUs.
#   A: 6 GPUs, 0-100 -> node 0 (both placers pick node 0 on an empty cluster): free 2 + 8
#   G: 12 GPUs, submit 1 -> a gang over ceil(12/8) = 2 nodes; 10 GPUs are free but the gang is
#      all-or-nothing, so it takes nothing and waits
#   S: 2 GPUs, 1000 s, submit 2 -> starts at 2 (greedy: it fits; easy: G's reservation at 100 is
#      8 GPUs on one node + 4 on the other, which leaves 4 GPUs on the second node, enough for S)
#   At 100: free 16 - 2 (S) = 14 with at most 8 + 6 on two nodes >= 12: G starts on 2 nodes.
@pytest.mark.parametrize("backfill", ["easy", "greedy"])
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_gang_over_two_nodes_is_all_or_nothing(backfill: str, placement: str) -> None:
    spec = cluster({"count": 2, "gpus": 8})
    jobs = table(job("A", 0, 100, 6), job("G", 1, 50, 12), job("S", 2, 1000, 2))
    res, _, _ = simulate(jobs, spec, backfill=backfill, placement=placement, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "G": 100.0, "S": 2.0}
    assert res.nodes_used.tolist() == [1, 2, 1]
    # while G waited it held nothing: 6 busy GPUs after t=1, 8 after S started
    assert busy_at(res, 1.0) == 6.0
    assert busy_at(res, 2.0) == 8.0
    assert busy_at(res, 100.0) == 14.0
    check_ends(res)


# node_slack lets a gang spread over more nodes than the minimum.
# Three nodes of 8 GPUs and 32 cores. B1..B3 (4 GPUs and 20 cores each, 0-100): 20 + 20 > 32 cores,
# so each lands on its own node, leaving 4 GPUs and 12 cores on each node.
# G: 12 GPUs with 12 cores in all (1 per GPU), submit 1.
#   node_slack=0: at most ceil(12/8) = 2 nodes -> 8 free GPUs < 12: waits for 100, then 2 nodes.
#   node_slack=1: up to 3 nodes -> 4 + 4 + 4 = 12 GPUs, 4 cores on each: starts at 1 on 3 nodes.
@pytest.mark.parametrize(("slack", "g_start", "g_nodes"), [(0, 100.0, 2), (1, 1.0, 3)])
def test_node_slack(slack: int, g_start: float, g_nodes: int) -> None:
    spec = cluster({"count": 3, "gpus": 8, "cpus": 32})
    jobs = table(
        job("B1", 0, 100, 4, cpus_milli=20_000),
        job("B2", 0, 100, 4, cpus_milli=20_000),
        job("B3", 0, 100, 4, cpus_milli=20_000),
        job("G", 1, 50, 12, cpus_milli=12_000),
    )
    res, _, _ = simulate(
        jobs, spec, backfill="greedy", placement="first-fit", oracle_runtimes=True, node_slack=slack
    )
    assert starts(res) == {"B1": 0.0, "B2": 0.0, "B3": 0.0, "G": g_start}
    assert res.nodes_used.tolist() == [1, 1, 1, g_nodes]


def test_gang_larger_than_any_group_is_excluded() -> None:
    # 12 GPUs cannot run on a single 8-GPU node (and no other node exists)
    bound = bind_jobs(table(job("G", 0, 10, 12), job("ok", 0, 10, 8)), cluster({"gpus": 8}))
    assert bound.jobs.ids.tolist() == ["ok"]
    assert [(e.count, e.example_ids) for e in bound.exclusions] == [(1, ["G"])]
    assert "more GPUs than any eligible node group" in bound.exclusions[0].reason


# ---------------------------------------------------------------------------------------------
# fractional GPUs
#
# One node with a single GPU (8 cores, 64 GiB; a half GPU gets 2 cores and 8 GiB by default).
#   F1: 500 milli, 0-100      -> GPU 0 has 500 left
#   F2: 500 milli, submit 1   -> shares the same GPU: starts at 1 (GPU fully used, 1.0 busy)
#   F3: 500 milli, submit 2   -> no share left: waits for F1's end at 100
#   W:  1 whole GPU, submit 3, 10 s -> needs the whole GPU: F3 runs [100, 200), F2 until 101,
#       so the GPU is never entirely free before 200 -> W starts at 200
@pytest.mark.parametrize("backfill", ["easy", "greedy"])
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_fractional_jobs_share_one_gpu(backfill: str, placement: str) -> None:
    spec = cluster({"gpus": 1, "cpus": 8, "mem_gib": 64})
    jobs = table(
        job("F1", 0, 100, 1, gpu_milli=500),
        job("F2", 1, 100, 1, gpu_milli=500),
        job("F3", 2, 100, 1, gpu_milli=500),
        job("W", 3, 10, 1),
    )
    res, _, bound = simulate(jobs, spec, backfill=backfill, placement=placement, oracle_runtimes=True)
    assert starts(res) == {"F1": 0.0, "F2": 1.0, "F3": 100.0, "W": 200.0}
    assert busy_at(res, 0.0) == 0.5
    assert busy_at(res, 1.0) == 1.0
    assert busy_at(res, 100.5) == 1.0
    assert busy_at(res, 101.0) == 0.5
    # default requests scale with the GPU share: 0.5 x 4 cores, 0.5 x 16 GiB
    assert bound.jobs.cpus_milli.tolist() == [2000, 2000, 2000, 4000]
    assert bound.jobs.mem_mib.tolist() == [8192, 8192, 8192, 16384]


# First-fit vs best-fit for GPU shares. One node with 2 GPUs; all jobs fractional.
#   F1: 300 milli, 0-1000 -> GPU 0 (both placers: lowest id / least leftover among equals): 700 left
#   F2: 800 milli, submit 1, 1000 s -> only GPU 1 has 800: 200 left
#   F3: 150 milli, submit 2, 1000 s: first-fit -> GPU 0 (first with room), leaving 550 and 200
#                                    best-fit  -> GPU 1 (200 - 150 = 50 < 700 - 150), leaving 700, 50
#   F4: 600 milli, submit 3, 10 s: first-fit: no GPU has 600 until F1 ends at 1000 (GPU 0: 850)
#                                  best-fit: GPU 0 has 700 -> starts at 3
@pytest.mark.parametrize(("placement", "f4_start"), [("first-fit", 1000.0), ("best-fit", 3.0)])
def test_first_fit_vs_best_fit_for_gpu_shares(placement: str, f4_start: float) -> None:
    spec = cluster({"gpus": 2})
    jobs = table(
        job("F1", 0, 1000, 1, gpu_milli=300),
        job("F2", 1, 1000, 1, gpu_milli=800),
        job("F3", 2, 1000, 1, gpu_milli=150),
        job("F4", 3, 10, 1, gpu_milli=600),
    )
    res, _, _ = simulate(jobs, spec, placement=placement, oracle_runtimes=True)
    assert starts(res) == {"F1": 0.0, "F2": 1.0, "F3": 2.0, "F4": f4_start}


# ---------------------------------------------------------------------------------------------
# partitions (VCs)
#
# g0 (4 GPUs) belongs to partition "research" only; g1 (4 GPUs) to every partition.
#   R: research, 4 GPUs, 0-100 -> g0 (best-fit: both groups leave 0, the first is taken)
#   P1: prod, 4 GPUs, submit 1, 100 s -> may only use g1: starts at 1 on g1
#   P2: prod, 1 GPU, submit 2 -> g1 is full and g0 is not prod's: waits for P1's end at 101,
#       although g0 is idle from 100
# A prod job on a cluster whose only group is research's is excluded.
def test_partitions_restrict_node_groups() -> None:
    spec = cluster({"gpus": 4, "partitions": ["research"]}, {"gpus": 4})
    jobs = table(
        job("R", 0, 100, 4, vc=0),
        job("P1", 1, 100, 4, vc=1),
        job("P2", 2, 10, 1, vc=1),
        vcs=["research", "prod"],
    )
    res, _, bound = simulate(jobs, spec, oracle_runtimes=True)
    assert bound.class_groups[int(bound.job_class[0])] == (0, 1)
    assert bound.class_groups[int(bound.job_class[1])] == (1,)
    # the request the placers take: GPUs, share, CPUs and memory (filled from the spec), groups
    gpus, milli, cpus, mem, groups = bound.request(2)
    assert (gpus, milli, groups) == (1, 1000, (1,))
    assert (cpus, mem) == (int(bound.jobs.cpus_milli[2]), int(bound.jobs.mem_mib[2])) and cpus > 0 and mem > 0
    assert starts(res) == {"R": 0.0, "P1": 1.0, "P2": 101.0}

    only_research = cluster({"gpus": 4, "partitions": ["research"]})
    excluded = bind_jobs(table(job("P", 0, 10, 1, vc=1), vcs=["research", "prod"]), only_research)
    assert [(e.count, e.example_ids) for e in excluded.exclusions] == [(1, ["P"])]
    assert "partition/VC 'prod'" in excluded.exclusions[0].reason


# ---------------------------------------------------------------------------------------------
# CPU or memory as the binding resource


# One node, 8 GPUs, 8 cores. Each 1-GPU job gets the default 4 cores: only 2 run at once although
# 6 GPUs stay idle. J0, J1 start at 0, J2 at 100.
@pytest.mark.parametrize("backfill", ["easy", "greedy", "none"])
def test_cpu_is_the_binding_resource(backfill: str) -> None:
    spec = cluster({"gpus": 8, "cpus": 8})
    jobs = table(job("J0", 0, 100, 1), job("J1", 0, 100, 1), job("J2", 0, 100, 1))
    res, _, _ = simulate(jobs, spec, backfill=backfill, oracle_runtimes=True)
    assert starts(res) == {"J0": 0.0, "J1": 0.0, "J2": 100.0}
    assert busy_at(res, 0.0) == 2.0


# One node, 8 GPUs, 64 cores, 40 GiB. Each 1-GPU job gets the default 16 GiB: 2 x 16 = 32 <= 40
# but 3 x 16 = 48 > 40, so J2 waits for 100. An explicit 8 GiB request (K) fits beside J0 and J1.
@pytest.mark.parametrize("backfill", ["easy", "greedy", "none"])
def test_memory_is_the_binding_resource(backfill: str) -> None:
    spec = cluster({"gpus": 8, "cpus": 64, "mem_gib": 40})
    jobs = table(
        job("J0", 0, 100, 1), job("J1", 0, 100, 1), job("J2", 0, 100, 1), job("K", 1, 10, 1, mem_mib=8 * 1024)
    )
    res, _, _ = simulate(jobs, spec, backfill=backfill, oracle_runtimes=True)
    # none: K is behind the blocked J2 and waits; J2 starts at 100 (J0, J1 end, 16 GiB used),
    # K fits beside J2 at 100.  easy: J2 is reserved at 100, K ends at 11 <= 100 and fits in the
    # remaining 8 GiB: starts at 1.  greedy: K starts at 1.
    k = 100.0 if backfill == "none" else 1.0
    assert starts(res) == {"J0": 0.0, "J1": 0.0, "J2": 100.0, "K": k}


# ---------------------------------------------------------------------------------------------
# first-fit vs best-fit
#
# Two nodes of 4 GPUs.
#   A: 4 GPUs, 0-50 -> node 0 (both placers: lowest id / tie on leftover -> lowest id)
#   B: 1 GPU, 0-1000 -> node 1 (node 0 is full): free after 50 is node0 4, node1 3
#   C: 1 GPU, submit 60, 100 s: first-fit -> node 0 (lowest id), leaving 3 + 3;
#                               best-fit  -> node 1 (leaves 2 instead of 3), leaving 4 + 2
#   D: 4 GPUs, submit 70: first-fit: no node has 4 free until C ends at 160;
#                         best-fit: node 0 is whole -> starts at 70
@pytest.mark.parametrize(("placement", "d_start"), [("first-fit", 160.0), ("best-fit", 70.0)])
def test_first_fit_vs_best_fit_start_times(placement: str, d_start: float) -> None:
    spec = cluster({"count": 2, "gpus": 4})
    jobs = table(job("A", 0, 50, 4), job("B", 0, 1000, 1), job("C", 60, 100, 1), job("D", 70, 100, 4))
    res, _, _ = simulate(jobs, spec, placement=placement, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "B": 0.0, "C": 60.0, "D": d_start}
    assert res.placement == placement


# Three nodes of 4 GPUs, node_slack 1. A (3 GPUs, long) goes to node 0 under both placers
# (empty cluster: lowest id), leaving free GPUs 1, 4, 4.
# G: 8 GPUs, submit 1, may span ceil(8/4) + 1 = 3 nodes.
#   first-fit walks node ids: 1 (node 0) + 4 (node 1) + 3 (node 2) -> 3 nodes
#   best-fit takes the fullest nodes: 4 (node 1) + 4 (node 2) -> 2 nodes
@pytest.mark.parametrize(("placement", "g_nodes"), [("first-fit", 3), ("best-fit", 2)])
def test_first_fit_vs_best_fit_nodes_used(placement: str, g_nodes: int) -> None:
    spec = cluster({"count": 3, "gpus": 4})
    jobs = table(job("A", 0, 1000, 3), job("G", 1, 100, 8))
    res, _, _ = simulate(jobs, spec, placement=placement, oracle_runtimes=True, node_slack=1)
    assert starts(res) == {"A": 0.0, "G": 1.0}
    assert res.nodes_used.tolist() == [1, g_nodes]


# ---------------------------------------------------------------------------------------------
# exclusions


# Cluster: 2 nodes x 8 V100 GPUs, 16 cores per node, GPU jobs only.
#   z1, z2, z3: 0 GPUs                         -> excluded, "0 GPUs"               (3)
#   big1, big2: 17 and 64 GPUs (> 16 in total) -> excluded, "more GPUs"          (2)
#   h100: 1 GPU of type H100                   -> excluded, unknown type         (1)
#   fat: 1 GPU with 32 cores (> 16 per node)   -> excluded, CPU/memory           (1)
#   ok1 (1 GPU), ok2 (12 GPUs over 2 nodes), ok3 (any type, 16 GPUs) are kept.
# Exclusions come sorted by count, largest first, with up to 3 example ids each.
def test_exclusions_are_reported_with_counts() -> None:
    spec = cluster({"count": 2, "gpus": 8, "cpus": 16, "mem_gib": 512})
    ts = {"type_sets": [(), ("V100",), ("H100",)]}
    jobs = table(
        job("z1", 0, 10, 0),
        job("ok1", 1, 10, 1, type_set=1),
        job("z2", 2, 10, 0),
        job("big1", 3, 10, 17),
        job("h100", 4, 10, 1, type_set=2),
        job("ok2", 5, 10, 12, cpus_milli=12_000),
        job("z3", 6, 10, 0),
        job("big2", 7, 10, 64),
        job("fat", 8, 10, 1, cpus_milli=32_000),
        job("ok3", 9, 10, 16, cpus_milli=16_000, mem_mib=16 * 1024),
        **ts,
    )
    bound = bind_jobs(jobs, spec)
    assert bound.jobs.ids.tolist() == ["ok1", "ok2", "ok3"]
    assert bound.excluded_count == 7
    got = [(e.count, e.example_ids) for e in bound.exclusions]
    assert got[0] == (3, ["z1", "z2", "z3"])
    assert got[1] == (2, ["big1", "big2"])
    assert sorted(got[2:]) == [(1, ["fat"]), (1, ["h100"])]
    reasons = {e.example_ids[0]: e.reason for e in bound.exclusions}
    assert "0 GPUs" in reasons["z1"]
    assert "more GPUs than any eligible node group" in reasons["big1"]
    assert "H100" in reasons["h100"] and "not in cluster" in reasons["h100"]
    assert "CPU/memory" in reasons["fat"]
    assert bound.exclusions[0].describe().startswith("excluded 3 job(s): requests 0 GPUs")
    # the kept jobs simulate to completion: ok1 (1 GPU) at 1 leaves 7 + 8 free GPUs; ok2 (12 GPUs)
    # fits as 8 on the empty node + 4 on ok1's node -> 5; ok3 (all 16 GPUs) waits until ok1 (ends
    # 11) and ok2 (ends 15) are done -> 15
    res = Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=True)).run()
    assert starts(res) == {"ok1": 1.0, "ok2": 5.0, "ok3": 15.0}


# With cpu_only_jobs = "run", a 0-GPU job runs on CPU and memory only (defaults 1 core, 4 GiB).
# One node: 4 GPUs, 2 cores -> two CPU jobs at once; the third waits for 100.
def test_cpu_only_jobs_run_when_allowed() -> None:
    spec = cluster({"gpus": 4, "cpus": 2, "mem_gib": 64}, cpu_only_jobs="run")
    jobs = table(job("c0", 0, 100, 0), job("c1", 0, 100, 0), job("c2", 0, 100, 0))
    res, _, bound = simulate(jobs, spec, oracle_runtimes=True)
    assert bound.jobs.cpus_milli.tolist() == [1000] * 3
    assert bound.jobs.mem_mib.tolist() == [4096] * 3
    assert starts(res) == {"c0": 0.0, "c1": 0.0, "c2": 100.0}
    assert busy_at(res, 0.0) == 0.0


# ---------------------------------------------------------------------------------------------
# job_range and metric_range
#
# One node, 4 GPUs, each job takes all 4: J0 (0, 100 s), J1 (10, 50 s), J2 (20, 30 s), J3 (30, 10 s).
# Whole run (FCFS): J0 0, J1 100, J2 150, J3 180.
# job_range (1, 3): only J1 and J2 exist: J1 at 10, J2 when J1 ends at 60; J0 and J3 never start.
def four_jobs() -> JobTable:
    return table(job("J0", 0, 100, 4), job("J1", 10, 50, 4), job("J2", 20, 30, 4), job("J3", 30, 10, 4))


def test_whole_run() -> None:
    res, _, _ = simulate(four_jobs(), cluster({"gpus": 4}), oracle_runtimes=True)
    assert starts(res) == {"J0": 0.0, "J1": 100.0, "J2": 150.0, "J3": 180.0}
    assert res.metric_mask.tolist() == [True] * 4
    np.testing.assert_array_equal(res.wait, [0.0, 90.0, 130.0, 150.0])


def test_job_range_and_metric_range() -> None:
    spec = cluster({"gpus": 4})
    res, _, _ = simulate(four_jobs(), spec, oracle_runtimes=True, job_range=(1, 3))
    got = starts(res)
    assert math.isnan(got.pop("J0")) and math.isnan(got.pop("J3"))
    assert got == {"J1": 10.0, "J2": 60.0}
    assert np.isnan(res.end[[0, 3]]).all()
    assert res.metric_mask.tolist() == [False, True, True, False]  # defaults to job_range
    assert res.timeline_t[0] == 10.0

    res2, _, _ = simulate(four_jobs(), spec, oracle_runtimes=True, job_range=(1, 3), metric_range=(2, 3))
    np.testing.assert_array_equal(res2.start, res.start)  # the metric range changes no schedule
    assert res2.metric_mask.tolist() == [False, False, True, False]


@pytest.mark.parametrize("bad", [(2, 5), (3, 2), (-1, 2)])
def test_job_range_outside_the_table(bad: tuple[int, int]) -> None:
    bound = bind_jobs(four_jobs(), cluster({"gpus": 4}))
    sim = Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=True))
    with pytest.raises(ValueError, match="job_range"):
        sim.run(job_range=bad)


def test_node_slack_must_match_the_binding() -> None:
    bound = bind_jobs(four_jobs(), cluster({"gpus": 4}), node_slack=0)
    with pytest.raises(ValueError, match="node_slack"):
        Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=True, node_slack=1))


# ---------------------------------------------------------------------------------------------
# CPU and memory shares of a gang
#
# A gang's CPU (memory) request is split over its nodes in proportion to its GPUs there, rounded
# up: a node holding w of the gang's g GPUs gets ceil(request x w / g) (placement.py docstring).


# Two nodes of 3 GPUs. G asks for 6 GPUs, so it needs both nodes with 3 GPUs each, and
#   cpu:  7,999 milli-cores -> ceil(7999 x 3 / 6) = ceil(3999.5) = 4,000 per node, on 4-core nodes
#   mem:  65,533 MiB        -> ceil(65533 x 3 / 6) = ceil(32766.5) = 32,767 MiB per node, on 32 GiB
#                              (32,768 MiB) nodes
# Each share fits its node exactly, so binding keeps G (as it must), and on the empty cluster G
# must start at 0 on 2 nodes.
@pytest.mark.parametrize(
    ("node", "ask"),
    [
        ({"cpus": 4, "mem_gib": 256}, {"cpus_milli": 7999}),
        ({"cpus": 64, "mem_gib": 32}, {"cpus_milli": 6000, "mem_mib": 65533}),
    ],
    ids=["cpu", "mem"],
)
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_gang_whose_shares_fit_exactly_starts(
    node: dict[str, Any], ask: dict[str, Any], placement: str
) -> None:
    spec = cluster({"count": 2, "gpus": 3, **node})
    res, _, bound = simulate(
        table(job("G", 0, 10, 6, **ask)), spec, placement=placement, oracle_runtimes=True
    )
    assert bound.jobs.ids.tolist() == ["G"]
    assert starts(res) == {"G": 0.0}
    assert res.nodes_used.tolist() == [2]


# EASY must start a reserved gang at its reservation when the jobs backfilled beside it left it
# exactly its shares. Two nodes of 3 GPUs and 4 cores; CPU-only jobs allowed; FCFS, oracle.
#   A: 6 GPUs, 6 milli-cores, 0-100 -> all GPUs (3 + 3)
#   H: 6 GPUs, 7,000 milli-cores, submit 1 -> blocked; reserved at 100 on both nodes with
#      3 GPUs and ceil(7000 x 3 / 6) = 3,500 milli-cores each, which leaves 4,000 - 3,500 = 500
#      milli-cores per node for jobs still running at 100
#   B: 0 GPUs, 500 milli-cores, 1,000 s, submit 2 -> runs past 100 but fits in those 500: starts
#      at 2 on one node
#   At 100 A ends: each node has 3 GPUs free and 4,000 or 3,500 milli-cores, exactly H's shares:
#   H starts at 100, its reservation.
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
@pytest.mark.parametrize("max_res", [0, 1])
def test_easy_reservation_of_a_gang_is_kept(placement: str, max_res: int) -> None:
    spec = cluster({"count": 2, "gpus": 3, "cpus": 4, "mem_gib": 256}, cpu_only_jobs="run")
    jobs = table(
        job("A", 0, 100, 6, cpus_milli=6),
        job("H", 1, 10, 6, cpus_milli=7000),
        job("B", 2, 1000, 0, cpus_milli=500),
    )
    res, sim, _ = simulate(
        jobs, spec, backfill="easy", placement=placement, max_reservations=max_res, oracle_runtimes=True
    )
    first = dict(zip(res.jobs.ids.tolist(), sim.first_reservation.tolist(), strict=True))
    assert first["H"] == 100.0
    assert starts(res) == {"A": 0.0, "H": 100.0, "B": 2.0}


# A failed request retires the queued requests it dominates, but only those that run at least as
# long: a shorter job of the same shape may still backfill. One node, 4 GPUs, FCFS, EASY, oracle.
#   A: 2 GPUs, 0-100.  H: 4 GPUs, submit 1 -> blocked, reserved at 100 on all 4 GPUs.
#   L: 1 GPU, 200 s, submit 2 -> would end at 202 > 100 and the reservation leaves no GPU: fails.
#   S: 1 GPU, 50 s, submit 2 (same shape as L, behind it) -> ends at 52 <= 100: starts at 2.
#   At 100 A ends: H starts (4 GPUs) and ends at 110, when L starts.
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_failed_long_job_does_not_retire_a_shorter_one(placement: str) -> None:
    spec = cluster({"gpus": 4})
    jobs = table(job("A", 0, 100, 2), job("H", 1, 10, 4), job("L", 2, 200, 1), job("S", 2, 50, 1))
    res, _, _ = simulate(jobs, spec, backfill="easy", placement=placement, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "H": 100.0, "L": 110.0, "S": 2.0}


# The reservation's node when one release frees several nodes at once. Three nodes of 4 GPUs,
# FCFS, EASY, oracle runtimes.
#   A: 6 GPUs, 0-100 -> a gang: 4 on n0, 2 on n1.   C: 3 GPUs, 0-1000 -> n2 (n1 has only 2 free).
#   H: 3 GPUs, submit 2 -> blocked (free: n1 2, n2 1). A's end at 100 frees n0 (4) and n1 (4):
#      both hold H, equally full, so the reservation takes the lowest id, n0, and caps only n0.
#   L: 2 GPUs, 500 s, submit 3 -> runs past 100 but fits on n1, which the reservation leaves
#      alone: starts at 3. At 100 only n0 holds H's 3 GPUs (n1 has 2 free, n2 1): H starts at 100.
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_reservation_takes_the_lowest_of_equally_full_nodes_freed_together(placement: str) -> None:
    spec = cluster({"count": 3, "gpus": 4})
    jobs = table(job("A", 0, 100, 6), job("C", 0, 1000, 3), job("H", 2, 50, 3), job("L", 3, 500, 2))
    res, sim, _ = simulate(jobs, spec, backfill="easy", placement=placement, oracle_runtimes=True)
    assert starts(res) == {"A": 0.0, "C": 0.0, "H": 100.0, "L": 3.0}
    assert sim.first_reservation[2] == 100.0
