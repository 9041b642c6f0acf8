"""Hand-checked instances of the CP-SAT placer whose optimum is known.

Each instance is built so that the greedy best-fit placement (the warm start) is *not* optimal, or
so that exactly one objective tier decides, and the test asserts the optimum. Comments give the
arithmetic.
"""

from __future__ import annotations

import pytest
from placement_helpers import EXACT, apply_all, nodes_of, occupy, occupy_share, place, req, spec, state

from shared.placement import JobRequest, PlacerSettings, SolveStatus, TierWeights
from shared.placement.warmstart import best_fit_batch
from shared.scheduling.state import ClusterState


def _fragmented(st: ClusterState) -> int:
    """Nodes with 0 < free whole GPUs < GPUs per node."""
    return sum(int(((gs.whole > 0) & (gs.whole < gs.G)).sum()) for gs in st.groups if gs.G >= 2)


def test_gpu_type_constraint_moves_the_flexible_job() -> None:
    # g0: one A node with 8 free GPUs, g1: one B node with 4. Job 0 (4 GPUs, A or B) fits best on B
    # (0 left), which is where job 1 (4 GPUs, B only) must go: best-fit starts one job, CP-SAT two.
    sp = spec(("A", 1, 8, 64, 256), ("B", 1, 4, 64, 256))
    st = state(sp)
    jobs = [req(4, (0, 1)), req(4, (1,))]
    greedy = best_fit_batch(st, jobs, 0)
    assert greedy[0] is not None and greedy[0].group == 1 and greedy[1] is None
    res = place(st, jobs)
    assert res.status == SolveStatus.OPTIMAL
    assert nodes_of(res.allocs[0]) == [(0, 0)]
    assert nodes_of(res.allocs[1]) == [(1, 0)]
    apply_all(st, sp, res.allocs)


def test_cpu_is_the_binding_resource() -> None:
    # node 0: 2 GPUs and 40 CPUs free; node 1: 4 GPUs and 8 CPUs free. Job 0 (1 GPU, 8 CPUs) fits
    # best (GPU-wise) on node 0 and leaves 32 CPUs there, too few for job 1 (1 GPU, 40 CPUs).
    sp = spec(("A", 2, 4, 48, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=2, cpu=8000)
    occupy(st, 0, 1, cpu=40000)
    jobs = [req(1, cpu=8000), req(1, cpu=40000)]
    assert best_fit_batch(st, jobs, 0)[1] is None
    res = place(st, jobs)
    assert nodes_of(res.allocs[0]) == [(0, 1)]
    assert nodes_of(res.allocs[1]) == [(0, 0)]
    after = apply_all(st, sp, res.allocs)
    assert int(after.groups[0].cpu[0]) == 0 and int(after.groups[0].cpu[1]) == 0


def test_memory_is_the_binding_resource() -> None:
    # the CPU case again with memory: node 0 has 2 GPUs and 40 GiB free, node 1 4 GPUs and 8 GiB
    sp = spec(("A", 2, 4, 48, 64))
    st = state(sp)
    occupy(st, 0, 0, gpus=2, mem=24 * 1024)
    occupy(st, 0, 1, mem=56 * 1024)
    jobs = [req(1, mem=8 * 1024), req(1, mem=40 * 1024)]
    assert best_fit_batch(st, jobs, 0)[1] is None
    res = place(st, jobs)
    assert nodes_of(res.allocs[0]) == [(0, 1)]
    assert nodes_of(res.allocs[1]) == [(0, 0)]
    apply_all(st, sp, res.allocs)


def test_multi_node_gang_spreads_only_when_it_must() -> None:
    # free GPUs per node: 4, 8, 4. A 16-GPU gang needs at least 2 nodes; only 8 + 4 + 4 holds it,
    # which takes the node slack of 1. CPUs are split as ceil(16000 * w / 16).
    sp = spec(("A", 3, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=4)
    occupy(st, 0, 2, gpus=4)
    job = req(16, cpu=16000)
    assert place(st, [job]).status == SolveStatus.NOTHING_FITS  # no slack: 2 nodes cannot hold it
    res = place(st, [job], settings=EXACT.model_copy(update={"node_slack": 1}))
    a = res.allocs[0]
    assert a is not None
    assert dict(zip(a.nodes, a.whole, strict=True)) == {0: 4, 1: 8, 2: 4}
    assert dict(zip(a.nodes, a.cpu, strict=True)) == {0: 4000, 1: 8000, 2: 4000}
    assert res.decisions[0].spread and res.terms.extra_nodes == 1
    apply_all(st, sp, res.allocs)


def test_locality_outranks_fragmentation() -> None:
    # free GPUs 8, 4, 4 and an 8-GPU job with slack 1: one whole node (extra nodes 0, two nodes
    # left fragmented) beats 4 + 4 (no fragmentation, one extra node) because tier (c) > tier (d).
    sp = spec(("A", 3, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 1, gpus=4)
    occupy(st, 0, 2, gpus=4)
    slack = EXACT.model_copy(update={"node_slack": 1})
    res = place(st, [req(8)], settings=slack)
    assert nodes_of(res.allocs[0]) == [(0, 0)] and not res.decisions[0].spread
    assert res.terms.fragmented_nodes == 2
    # with the locality tier off, fragmentation decides: the job spreads over the two half nodes
    no_loc = slack.model_copy(update={"weights": TierWeights(locality=0)})
    res = place(st, [req(8)], settings=no_loc)
    assert nodes_of(res.allocs[0]) == [(0, 1), (0, 2)] and res.decisions[0].spread
    assert res.terms.fragmented_nodes == 0


def test_fractional_shares_pack_onto_one_physical_gpu() -> None:
    # one node, GPU 0 free, GPU 1 with 700 milli-GPUs free. Shares of 300, 700, 700: best-fit puts
    # the 300 on GPU 1 (tightest) and then only one 700 fits. Optimum: 300 + 700 on GPU 0, 700 on
    # GPU 1: all three start and both GPUs are full.
    sp = spec(("A", 1, 2, 16, 64))
    st = state(sp, track=True)
    occupy_share(st, 0, 0, gpu=1, milli=300)
    jobs = [req(1, milli=300), req(1, milli=700), req(1, milli=700)]
    assert best_fit_batch(st, jobs, 0)[2] is None
    res = place(st, jobs)
    assert all(a is not None for a in res.allocs)
    gpus = [a.frac_gpu for a in res.allocs if a is not None]
    assert gpus[0] == 0 and sorted(gpus[1:]) == [0, 1]
    after = apply_all(st, sp, res.allocs)
    gfree = after.groups[0].gfree
    assert gfree is not None and gfree[0].tolist() == [0, 0]


def test_fragmentation_beats_the_greedy_sequence() -> None:
    # 4-GPU nodes with 3 and 2 GPUs free; jobs of 1 then 2 GPUs. Best-fit: 1 -> node 1 (2 -> 1),
    # 2 -> node 0 (3 -> 1): two fragmented nodes. Optimum: both jobs on node 0 (3 -> 0), or the
    # 2-GPU job on node 1: one fragmented node.
    sp = spec(("A", 2, 4, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=1)
    occupy(st, 0, 1, gpus=2)
    jobs = [req(1), req(2)]
    assert _fragmented(apply_all(st, sp, best_fit_batch(st, jobs, 0))) == 2
    res = place(st, jobs)
    assert all(a is not None for a in res.allocs)
    assert _fragmented(apply_all(st, sp, res.allocs)) == 1 == res.terms.fragmented_nodes


def test_lookahead_keeps_room_for_the_next_job() -> None:
    # two 8-GPU nodes with 6 GPUs free each; node 0 has 96 CPUs free, node 1 only 8. Job 0 (2 GPUs)
    # fragments either node equally; the next job (6 GPUs, 48 CPUs) only fits on node 0, so job 0
    # must go to node 1. Best-fit takes node 0 (first of the equally full nodes).
    sp = spec(("A", 2, 8, 96, 512))
    st = state(sp)
    occupy(st, 0, 0, gpus=2)
    occupy(st, 0, 1, gpus=2, cpu=88000)
    job, nxt = req(2, cpu=4000), req(6, cpu=48000)
    greedy = best_fit_batch(st, [job], 0)[0]
    assert greedy is not None and greedy.nodes == [0]
    res = place(st, [job], [nxt])
    assert nodes_of(res.allocs[0]) == [(0, 1)]
    assert res.terms.lookahead_fits == 1


def test_packing_leaves_room_for_the_next_job_and_spreading_does_not() -> None:
    # free GPUs 8 and 4, slack 1; a 4-GPU job and next an 8-GPU job. Packing (node 1 alone) keeps
    # node 0 empty for the next job; spreading 2 + 2 would leave no node with 8.
    sp = spec(("A", 2, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 1, gpus=4)
    res = place(st, [req(4)], [req(8)], settings=EXACT.model_copy(update={"node_slack": 1}))
    assert nodes_of(res.allocs[0]) == [(0, 1)] and not res.decisions[0].spread
    assert int(apply_all(st, sp, res.allocs).groups[0].whole[0]) == 8


def test_locality_outranks_lookahead() -> None:
    # free GPUs 8, 4, 4, slack 1, an 8-GPU job and next an 8-GPU job: spreading 4 + 4 would keep
    # node 0 for the next job, but one node for this job (tier c) comes before look-ahead (tier e)
    sp = spec(("A", 3, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 1, gpus=4)
    occupy(st, 0, 2, gpus=4)
    slack = EXACT.model_copy(update={"node_slack": 1})
    res = place(st, [req(8)], [req(8)], settings=slack)
    assert nodes_of(res.allocs[0]) == [(0, 0)] and res.terms.lookahead_fits == 0
    res = place(
        st, [req(8)], [req(8)], settings=slack.model_copy(update={"weights": TierWeights(locality=0)})
    )
    assert nodes_of(res.allocs[0]) == [(0, 1), (0, 2)] and res.terms.lookahead_fits == 1


def test_priority_order_beats_more_work() -> None:
    # one node with 8 free GPUs: job 0 (4 GPUs, 1 s) or job 1 (8 GPUs, 1000 s). Tier (b) alone
    # would start job 1 (8000 GPU-s > 4); job 0 fits alone and ranks higher, so it starts.
    sp = spec(("A", 1, 8, 64, 256))
    st = state(sp)
    res = place(st, [req(4, est=1), req(8, est=1000)])
    assert res.allocs[0] is not None and res.allocs[1] is None
    assert res.terms.priority_violations == 0


def test_lower_ranked_job_starts_when_the_head_cannot() -> None:
    # the head needs 8 GPUs, the most any node has free is 4: the next job starts (backfill)
    sp = spec(("A", 2, 8, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=4)
    occupy(st, 0, 1, gpus=4)
    res = place(st, [req(8), req(4)])
    assert res.allocs[0] is None and res.allocs[1] is not None


def test_work_decides_where_the_priority_order_allows() -> None:
    # 4-GPU nodes P (1 free) and Q (4 free); jobs: 1 GPU, 4 GPUs (1 s), 2 GPUs (1000 s) twice.
    # Job 0 on P lets job 1 start (work 1 + 4); job 0 on Q blocks job 1 (a higher-ranked job's
    # placement, which tier (a) allows) and lets a 2000 GPU-s job start: tier (b) prefers that.
    # Job 0 on P with both 2-GPU jobs on Q is forbidden: job 1 would fit after job 0 alone.
    sp = spec(("A", 2, 4, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=3)
    jobs = [req(1, est=1), req(4, est=1), req(2, est=1000), req(2, est=1000)]
    res = place(st, jobs)
    assert [a is not None for a in res.allocs] == [True, False, True, False]
    assert nodes_of(res.allocs[0]) == [(0, 1)]
    # strict rank order instead: the started set is the lexicographically best by rank
    res = place(st, jobs, settings=EXACT.model_copy(update={"strict_rank": True}))
    assert [a is not None for a in res.allocs] == [True, True, False, False]
    assert nodes_of(res.allocs[0]) == [(0, 0)]


def test_identical_nodes_are_one_class_and_decode_to_lowest_ids() -> None:
    from shared.placement.aggregate import aggregate

    sp = spec(("A", 10, 1, 8, 32), ("B", 5, 8, 64, 256))
    st = state(sp)
    jobs = [req(1, (0,)), req(1, (0,)), req(1, (0,)), req(8, (1,))]
    tables, fit_groups = aggregate(st, jobs, [], 0)
    assert fit_groups == [(0,), (0,), (0,), (1,)]
    assert len(tables[0].whole) == 1 and int(tables[0].count[0]) == 10
    assert len(tables[1].whole) == 1 and int(tables[1].count[0]) == 5
    res = place(st, jobs, settings=PlacerSettings(reproducible=True))
    assert [nodes_of(a) for a in res.allocs] == [[(0, 0)], [(0, 1)], [(0, 2)], [(1, 0)]]


def test_nothing_fits_skips_the_solver() -> None:
    sp = spec(("A", 1, 4, 64, 256))
    st = state(sp)
    res = place(st, [req(8, (0,))])
    assert res.status == SolveStatus.NOTHING_FITS and res.allocs == [None]
    assert res.model_vars == 0


def test_requests_from_the_simulator_arrays() -> None:
    from shared.placement import requests_from_arrays

    reqs = requests_from_arrays(
        [2, 1, 0],
        [1000, 300, 1000],
        [8000, 1000, 500],
        [1024, 0, 64],
        [(0,), (0, 1), (1,)],
        [60.0, float("nan"), 5.0],
    )
    assert [(r.gpus, r.fractional, r.groups, r.est_runtime) for r in reqs] == [
        (2, False, (0,), 60.0),
        (1, True, (0, 1), 1.0),
        (0, False, (1,), 5.0),
    ]
    with pytest.raises(ValueError, match="share"):
        JobRequest(2, 500, 0, 0, (0,))
    with pytest.raises(ValueError, match="defaults"):
        JobRequest(1, 1000, -1, 0, (0,))
