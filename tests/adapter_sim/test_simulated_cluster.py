"""``SimulatedCluster`` beyond the contract: what it does with a placement it cannot apply."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.schemas import PlacementDecision
from shared.schemas.messages import JobPlacement, Placements
from tests.adapter_contract.contract_harness import SimHarness, decision_for


@pytest.fixture
def scene() -> Iterator[SimHarness]:
    made = SimHarness()
    try:
        yield made
    finally:
        made.close()


def test_a_placement_on_an_unknown_node_is_skipped_with_its_reason(scene: SimHarness) -> None:
    _, queued = scene.queue_behind_blocker()
    scene.advance()  # the blocker has not ended: nothing fits, and nothing has started
    observed = scene.adapter.observe()
    made = decision_for(observed.snapshot, queued, place=False)
    rows = list(made.placements)
    rows[0] = JobPlacement(job_id=rows[0].job_id, rank=0, priority=rows[0].priority, nodes=("no-such-node",))
    decision = PlacementDecision.model_validate({**made.model_dump(), "placements": Placements.of(rows)})

    applied = scene.adapter.apply(decision)

    assert not applied.stale
    assert applied.applied == []
    assert applied.skipped == [(queued[0], "unknown node(s) no-such-node")]
    assert scene.changes() == []
