"""EASY reservation caps inside the CP-SAT model: capped jobs' decisions are admissible.

A reservation caps what jobs that would still run at the reserved job's start may take on the
reserved nodes (``shared.scheduling.placement.Caps``). Hand-checked instances below; the last test runs
whole simulations and checks that no CP-SAT decision is overridden by the caps any more.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from placement_helpers import EXACT, apply_all, nodes_of, occupy, req, spec, state

from shared.placement import CpSatPlacer, JobRequest
from shared.policies import make_policy
from shared.scheduling.placement import Caps, alloc_fits
from shared.scheduling.state import ClusterState
from shared.sim.config import SimConfig
from shared.sim.evaluate import prepare_workload
from shared.sim.simulator import Simulator


def _reserved_node1(whole: int) -> tuple[ClusterState, dict[int, Caps]]:
    # one group of two 4-GPU nodes: node 0 all free, node 1 with 2 GPUs free; a reservation on
    # node 1 leaves capped jobs ``whole`` of its GPUs
    sp = spec(("A", 2, 4, 64, 256))
    st = state(sp)
    occupy(st, 0, 1, gpus=2)
    cap = Caps.unlimited(2)
    cap.whole[1] = whole
    cap.block_shares(1)
    return st, {0: cap}


def test_a_cap_moves_a_long_job_off_the_reserved_node() -> None:
    st, caps = _reserved_node1(0)
    short = req(2)  # ends before the reservation: not capped
    long = replace(req(2), capped=(0,))
    placer = CpSatPlacer(EXACT)
    # uncapped: node 1 (best-fit: 0 GPUs left; and it becomes full, tier d)
    assert nodes_of(placer.place_batch(st, [short], None, None, caps).allocs[0]) == [(0, 1)]
    # capped: node 1 would take GPUs the reservation needs, so node 0
    res = placer.place_batch(st, [long], None, None, caps)
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert alloc_fits(st, res.allocs[0], caps, 1000)  # type: ignore[arg-type]
    # without caps passed, the capped flag has nothing to respect
    assert nodes_of(placer.place_batch(st, [long]).allocs[0]) == [(0, 1)]


def test_capped_jobs_share_one_cap() -> None:
    # node 0: 1 GPU free; node 1: 3 GPUs free, capped jobs together may take 2 of them. Jobs
    # A, B, C (1 GPU, capped) and D (1 GPU, not capped): 4 GPUs for 4 jobs, so all start only if
    # node 1 holds 3 of them with at most 2 capped, i.e. D and two capped jobs on node 1, the
    # third capped job on node 0. Tier (b) makes all four start.
    sp = spec(("A", 2, 4, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=3)
    occupy(st, 0, 1, gpus=1)
    cap = Caps.unlimited(2)
    cap.whole[1] = 2
    cap.block_shares(1)
    jobs = [replace(req(1), capped=(0,)) for _ in range(3)] + [req(1)]
    res = CpSatPlacer(EXACT).place_batch(st, jobs, None, None, {0: cap})
    where = [nodes_of(a) for a in res.allocs]
    assert where[3] == [(0, 1)]
    assert sorted(w[0][1] for w in where[:3]) == [0, 1, 1]
    apply_all(st, sp, res.allocs)


def test_cap_leaves_no_room_then_the_job_waits() -> None:
    # only node 1 is eligible room (node 0 fully used), and its cap is 0: a capped job may not
    # start, an uncapped one may
    st, caps = _reserved_node1(0)
    occupy(st, 0, 0, gpus=4)
    res = CpSatPlacer(EXACT).place_batch(st, [replace(req(1), capped=(0,)), req(1)], None, None, caps)
    assert res.allocs[0] is None
    assert nodes_of(res.allocs[1]) == [(0, 1)]


def test_capped_gang_respects_the_cap() -> None:
    # two free 4-GPU nodes, node 1 capped at 2 GPUs. A gang spans ceil(gpus / 4) = 2 nodes.
    # capped 6 GPUs: 4 on node 0 + 2 on node 1 is the only admissible split; capped 7: at most
    # 4 + 2 = 6 < 7, it cannot start; uncapped 7: 4 + 3
    sp = spec(("A", 2, 4, 64, 256))
    st = state(sp)
    cap = Caps.unlimited(2)
    cap.whole[1] = 2
    cap.block_shares(1)
    placer = CpSatPlacer(EXACT)

    def split(job: JobRequest) -> list[tuple[int, int]] | None:
        a = placer.place_batch(st, [job], None, None, {0: cap}).allocs[0]
        return None if a is None else sorted(zip(a.nodes, a.whole, strict=True))

    assert split(replace(req(6), capped=(0,))) == [(0, 4), (1, 2)]
    assert split(replace(req(7), capped=(0,))) is None
    assert split(req(7)) in ([(0, 4), (1, 3)], [(0, 3), (1, 4)])


def test_simulation_decisions_are_never_overridden() -> None:
    """Solving again under each new reservation makes every CP-SAT decision admissible: none is
    overridden, where checking the caps only afterwards overrides some (the earlier design)."""
    w = prepare_workload(None, "rltune-synthetic", n_jobs=400, seed=3).bound
    stats = {}
    for replan in (True, False):
        cfg = SimConfig(placement="cp-sat", cpsat_reservations=replan)
        res = Simulator(w, make_policy("fcfs"), cfg).run()
        assert not np.isnan(res.start).any()
        stats[replan] = res.placer_stats
    assert stats[True]["overridden"] == 0 and stats[True]["replans"] > 0
    assert stats[False]["overridden"] > 0 and stats[False]["replans"] == 0
