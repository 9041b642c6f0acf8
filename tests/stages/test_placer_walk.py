"""The placer's walk on ``WalkState`` decides exactly as it does with ``BestFit`` on the state.

The reference run patches ``WalkState.place`` to hand every request to ``BestFit`` on the
``ClusterState`` (brought up to date first): the walk as it was before ``WalkState``. On the stage
tests' simulated snapshots (embedded cluster, 80-90% busy, 350 queued, random priorities) both runs
must give the same allocations, reservations (times and nodes), held-back jobs and status, for
best-fit and CP-SAT placement. With ``solve_when_all_fit=False`` the walk's own ALL_FIT test
(``PlacerStage._all_fit``) must agree with the placer's, which the reference run falls back to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from services.placer.stage import Decided, PlacerStage, rank_order
from shared.placement import PlacerSettings
from shared.placement.walk import WalkState
from shared.schemas import PendingJobs
from shared.schemas.snapshot_state import snapshot_state
from shared.schemas.views import bind_pending
from tests.stages.stage_helpers import vector
from tests.stages.test_placer_stage import sim_snapshot

FAST = WalkState.place


def _reference_place(self: WalkState, *args: Any, **kwargs: Any) -> Any:
    gpus, milli, cpu, mem, groups, *rest = args
    blocked = rest[0] if rest else kwargs.get("blocked")
    slack = rest[1] if len(rest) > 1 else kwargs.get("node_slack", 0)
    return self._fallback(gpus, milli, cpu, mem, groups, blocked, slack, kwargs.get("fallback", True))


@pytest.fixture
def reference() -> Iterator[None]:
    WalkState.place = _reference_place  # type: ignore[method-assign]
    try:
        yield
    finally:
        WalkState.place = FAST  # type: ignore[method-assign]


def _decide(seed: int, placement: str, settings: PlacerSettings) -> tuple[Decided, int]:
    s, spec = sim_snapshot(seed)
    specs = {"embedded": spec}
    m = FeaturizerStage(specs).handle(s)
    prio = (np.random.default_rng(seed).permutation(len(m.job_ids)).astype(float) + 1).tolist()
    v = vector(m, prio)
    by_id = {j.job_id: j for j in s.pending}
    jobs = PendingJobs.of(by_id[j] for j in m.job_ids)
    binding = bind_pending(jobs, spec)
    track = {
        g
        for pos, gs in zip(binding.kept, binding.groups, strict=True)
        if jobs[pos].gpu_milli < 1000
        for g in gs
    }
    ss = snapshot_state(s, spec, track)
    order = rank_order(v.priorities, [j.submit_s for j in jobs])
    can = np.array([row[m.columns.index("can_schedule_now")] > 0.5 for row in m.values])
    stage = PlacerStage(specs, placement=placement, settings=settings)  # type: ignore[arg-type]
    return stage.decide(ss, jobs, binding, order, s.time, can), len(jobs)


def _summary(d: Decided) -> tuple[Any, ...]:
    allocs = sorted(
        (r, a.group, a.nodes, a.whole, a.cpu, a.mem, a.gpu_ids, a.frac_gpu) for r, a in d.allocs.items()
    )
    res = [(r.row, r.when, r.nodes) for r in d.reservations]
    return allocs, sorted(d.spread.items()), res, d.held_back, d.status


CASES = [
    ("best-fit", PlacerSettings()),
    ("cp-sat", PlacerSettings(reproducible=True)),
    ("cp-sat", PlacerSettings(reproducible=True, solve_when_all_fit=False)),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_walk_state_decides_as_best_fit_on_the_state(seed: int, case: int, reference: None) -> None:
    placement, settings = CASES[case]
    WalkState.place = FAST  # type: ignore[method-assign]
    fast, n = _decide(seed, placement, settings)
    WalkState.place = _reference_place  # type: ignore[method-assign]
    ref, _ = _decide(seed, placement, settings)
    assert _summary(fast) == _summary(ref)
    assert fast.allocs and fast.reservations  # the walk started jobs and reserved room
    assert len(fast.allocs) < n
