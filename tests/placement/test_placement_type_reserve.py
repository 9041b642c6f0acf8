"""Tier (t), type reserve: group costs move flexible jobs off the groups that waiting jobs need.

Hand-checked: in each case best-fit's choice and the cheaper group are worked out in the comments.
"""

from __future__ import annotations

from placement_helpers import EXACT, apply_all, nodes_of, occupy, req, spec, state

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import build_table
from shared.placement import CpSatPlacer, GroupCost, PlacerSettings, SolveStatus, TierWeights
from shared.placement.warmstart import best_fit_batch
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.state import ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator


def _two_types() -> tuple[ClusterSpec, ClusterState]:
    # g0: one 8-GPU A node with 2 GPUs free (the scarce type); g1: one 8-GPU B node, all free
    sp = spec(("A", 1, 8, 64, 256), ("B", 1, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=6)
    return sp, st


def test_costs_move_a_flexible_job_to_the_cheap_group() -> None:
    sp, st = _two_types()
    job = req(2, (0, 1))
    # best-fit: the A node leaves 0 free GPUs, the B node 6, so A
    assert best_fit_batch(st, [job], 0)[0].group == 0  # type: ignore[union-attr]
    # no costs: the model agrees with best-fit (fragmentation: A becomes full, B stays empty)
    plain = CpSatPlacer(EXACT).place_batch(st, [job])
    assert nodes_of(plain.allocs[0]) == [(0, 0)]
    # A priced at 1 per GPU, B at 0.1: the job costs 2 on A, 0.2 on B -> B
    costs = {0: GroupCost(1.0), 1: GroupCost(0.1)}
    res = CpSatPlacer(EXACT).place_batch(st, [job], None, costs)
    assert res.status == SolveStatus.OPTIMAL
    assert nodes_of(res.allocs[0]) == [(1, 0)]
    # integer costs: the largest (2 on A) is cost_levels = 100, B's 0.2 is 10; the job paid 10
    assert res.terms.type_cost == 10
    apply_all(st, sp, res.allocs)


def test_costs_never_stop_a_job_from_starting() -> None:
    # the cheap group B is full: the job (A or B) goes to the expensive A and still starts
    # (tier b outweighs tier t); it pays A's cost, the largest, i.e. cost_levels = 100
    _, st = _two_types()
    occupy(st, 1, 0, gpus=8)
    res = CpSatPlacer(EXACT).place_batch(st, [req(2, (0, 1))], None, {0: GroupCost(5.0), 1: GroupCost(0.0)})
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert res.terms.type_cost == 100
    # a job with one eligible group pays a constant wherever it goes: no term at all
    res = CpSatPlacer(EXACT).place_batch(st, [req(2, (0,))], None, {0: GroupCost(5.0), 1: GroupCost(0.0)})
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert res.terms.type_cost == 0


def test_costs_never_start_less_work() -> None:
    # job 0 (2 GPUs, A or B) and job 1 (8 GPUs, B only). Putting job 0 on cheap B would leave
    # job 1 no room: tier (b) keeps job 0 on A although A costs more
    _, st = _two_types()
    jobs = [req(2, (0, 1)), req(8, (1,))]
    res = CpSatPlacer(EXACT).place_batch(st, jobs, None, {0: GroupCost(1.0), 1: GroupCost(0.1)})
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert nodes_of(res.allocs[1]) == [(1, 0)]


def test_cpu_price_charges_cpu_heavy_jobs() -> None:
    # a CPU-only job of 32 CPUs. A: 0 per GPU but 1/1000 per milli-CPU (32 for the job);
    # B: 0.5 per GPU and 0.0001 per milli-CPU (3.2): the dominant share prices it, B is cheaper
    sp = spec(("A", 1, 8, 64, 256), ("B", 1, 8, 64, 256))
    st = state(sp)
    occupy(st, 1, 0, cpu=16000)  # best-fit for CPUs: B has the fewest left
    job = req(0, (0, 1), cpu=32000)
    costs = {0: GroupCost(0.0, 1e-3), 1: GroupCost(0.5, 1e-4)}
    res = CpSatPlacer(EXACT).place_batch(st, [job], None, costs)
    assert nodes_of(res.allocs[0]) == [(1, 0)]
    # and with A the cheaper one, it moves there
    costs = {0: GroupCost(0.0, 1e-5), 1: GroupCost(0.5, 1e-4)}
    res = CpSatPlacer(EXACT).place_batch(st, [job], None, costs)
    assert nodes_of(res.allocs[0]) == [(0, 0)]


def test_tier_switch_restores_the_five_tier_model() -> None:
    _, st = _two_types()
    off = PlacerSettings(**{**EXACT.model_dump(), "weights": TierWeights(type_reserve=0)})
    res = CpSatPlacer(off).place_batch(st, [req(2, (0, 1))], None, {0: GroupCost(1.0), 1: GroupCost(0.1)})
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert res.terms.type_cost == 0


def test_simulator_prices_keep_the_scarce_type_for_the_job_that_needs_it() -> None:
    """A whole simulation, worked out by hand. Nodes: one 8-GPU A (the scarce type), one 8-GPU B.
    Job 0 (4 GPUs, A only, 1000 s) starts at 0 on A. Job 1 (4 GPUs, A or B, 1000 s)
    arrives at 1 with nothing else queued. Best-fit puts it on A (0 GPUs left there, 4 on B).
    Job 2 (4 GPUs, A only, 10 s) arrives at 3 and then finds A full: it waits until job 0 or 1
    ends (t = 1000). With tier (t) priced from the last arrivals, job 0 is among them and makes A
    dear, so job 1 goes to B and job 2 starts at once on A. Priced from the queue alone, job 1 is
    alone in the queue and flexible (it adds no pressure), every price is 0, and it goes where
    best-fit puts it: A.
    """
    sp = spec(("A", 1, 8, 64, 256), ("B", 1, 8, 64, 256))
    table = build_table(
        ids=["0", "1", "3"],
        submit=[0.0, 1.0, 3.0],
        runtime=[1000.0, 1000.0, 10.0],
        estimate=[1000.0, 1000.0, 10.0],
        gpus=[4, 4, 4],
        type_set=[1, 0, 1],
        type_sets=[("A", "B"), ("A",)],
    )
    w = bind_jobs(table, sp)
    waits = {}
    for name, cfg in {
        "best-fit": SimConfig(),
        "cp-sat-queue": SimConfig(placement="cp-sat", cpsat_demand_window=0),
        "cp-sat": SimConfig(placement="cp-sat"),
    }.items():
        res = Simulator(w, make_policy("fcfs"), cfg).run()
        waits[name] = (res.start - table.submit).tolist()
    # job 2 waits for job 0 to end on A (t = 1000) unless job 1 went to B
    assert waits["best-fit"][2] > 900
    assert waits["cp-sat-queue"][2] > 900
    assert waits["cp-sat"] == [0.0, 0.0, 0.0]
