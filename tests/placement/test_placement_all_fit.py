"""``solve_when_all_fit=False``: no solve when best-fit starts the whole batch on its fewest nodes.

Checked on random batches (the property tests' scenarios): the status is ALL_FIT exactly when the
best-fit warm start starts every job without extra nodes and no group costs are given, and then the
allocations are best-fit's and the solve would not have started more jobs or used fewer nodes;
otherwise the decision is the one the default settings make (the same model and solve).
"""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from placement_helpers import EXACT, occupy, place, req, spec, state
from test_placement_properties import scenarios

from shared.domain.cluster import ClusterSpec
from shared.placement import CpSatPlacer, GroupCost, JobRequest, SolveStatus
from shared.placement.warmstart import best_fit_batch
from shared.scheduling.state import ClusterState

SKIP = EXACT.model_copy(update={"solve_when_all_fit": False})


def _allocs(res: object) -> list[object]:
    return [d.alloc for d in res.decisions]  # type: ignore[attr-defined]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_all_fit_is_best_fit_and_loses_no_started_job(
    case: tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int],
) -> None:
    _sp, cs, batch, ahead, slack = case
    cfg = SKIP.model_copy(update={"node_slack": slack})
    full_cfg = EXACT.model_copy(update={"node_slack": slack})
    res = CpSatPlacer(cfg).place_batch(cs, batch, ahead)
    full = CpSatPlacer(full_cfg).place_batch(cs, batch, ahead)
    hint = best_fit_batch(cs, batch, slack)
    placer = CpSatPlacer(cfg)
    all_fit = all(a is not None and placer._extra(cs, j, a) == 0 for j, a in zip(batch, hint, strict=True))
    event("best-fit starts the whole batch" if all_fit else "solved")
    if all_fit:
        assert res.status == SolveStatus.ALL_FIT and res.deterministic
        assert _allocs(res) == hint
        # the exact solve starts no more jobs and uses no fewer nodes: tiers (a)-(c) were optimal
        assert full.terms.started == res.terms.started == len(batch)
        assert full.terms.extra_nodes == res.terms.extra_nodes == 0
    else:
        assert res.status == full.status and res.status != SolveStatus.ALL_FIT
        assert _allocs(res) == _allocs(full)


def test_a_batch_best_fit_cannot_start_whole_is_solved() -> None:
    """Node 0: 1 GPU and all CPUs free; node 1: 2 GPUs, no CPU. Best-fit puts the CPU-less job 0 on
    node 0 (least left) and job 1, which needs CPUs, waits; the solve starts both."""
    sp = spec(("A", 2, 2, 64, 256))
    st = state(sp)
    occupy(st, 0, 0, gpus=1)
    occupy(st, 0, 1, cpu=64000)
    batch = [req(1), req(1, cpu=8000)]
    assert best_fit_batch(st, batch, 0)[1] is None
    res = place(st, batch, settings=SKIP)
    assert res.status == SolveStatus.OPTIMAL and res.terms.started == 2


def test_group_costs_always_solve() -> None:
    """With tier (t) the solve may move a job to a cheaper group: never skipped."""
    sp = spec(("A", 1, 8, 64, 256), ("B", 1, 8, 64, 256))
    st = state(sp)
    costs = {0: GroupCost(per_gpu=1.0), 1: GroupCost(per_gpu=0.0)}
    res = CpSatPlacer(SKIP).place_batch(st, [req(1, groups=(0, 1))], [], costs)
    assert res.status == SolveStatus.OPTIMAL
    assert res.decisions[0].alloc is not None and res.decisions[0].alloc.group == 1
    assert CpSatPlacer(SKIP).place_batch(st, [req(1, groups=(0, 1))]).status == SolveStatus.ALL_FIT
