"""A forged huge sequence is dead-lettered, not adopted (issue 20, item 2), with real NATS.

Before: one snapshot with ``sequence=2**62`` made the featurizer skip every later real snapshot as
stale while ``/readyz`` stayed 200; a decision with a huge sequence did the same to an adapter.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from services.featurizer.service import DEFINITION as FEATURIZER
from shared.bus.sequence import JumpGuard
from shared.schemas import FeatureMatrix, decode
from shared.service.cluster_adapter import DecisionGate, SequenceJump
from tests.bus.bus_helpers import dead_letters
from tests.conftest_services import Bus
from tests.schemas.message_factories import decision, snapshot
from tests.shadow.shadow_helpers import running, spec_file


@pytest.mark.asyncio
async def test_a_huge_snapshot_sequence_is_dead_lettered_and_later_snapshots_are_featurized(
    bus: Bus, tmp_path: Path
) -> None:
    async with running((FEATURIZER,), bus.settings, bus.subjects, spec_file(tmp_path)) as s:
        sub = await bus.nc.subscribe(bus.subjects.of("c1", "features"))

        async def featurized(correlation_id: str, sequence: int) -> None:
            await bus.publisher.publish(snapshot(correlation_id=correlation_id, sequence=sequence, n_jobs=4))
            matrix = decode(FeatureMatrix, (await sub.next_msg(timeout=20)).data)
            assert (matrix.correlation_id, matrix.sequence) == (correlation_id, sequence)

        await featurized("real-1", 1)
        await bus.publisher.publish(snapshot(correlation_id="forged", sequence=2**62, n_jobs=4))
        letters = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), expected=1)
        assert [letter.stage for letter in letters] == ["featurizer"]
        assert "HYLO_MAX_SEQUENCE_JUMP" in letters[0].reason and str(2**62) in letters[0].reason
        for i in (2, 3, 4):  # every later real snapshot is still featurized
            await featurized(f"real-{i}", i)
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"http://127.0.0.1:{s.ports['featurizer']}/readyz")
        assert ready.status_code == 200


def test_decision_gate_raises_on_a_huge_sequence_and_keeps_applying_real_decisions() -> None:
    gate = DecisionGate("c1", max_jump=1000)
    first = decision(cluster="c1", sequence=100)
    assert gate.admit(first)
    gate.applied(first)
    with pytest.raises(SequenceJump, match="HYLO_MAX_SEQUENCE_JUMP"):
        gate.admit(decision(cluster="c1", sequence=2**62))
    later = decision(cluster="c1", sequence=101)
    assert gate.admit(later)
    gate.applied(later)
    assert gate.newest == 101
    assert not gate.admit(decision(cluster="c1", sequence=50))  # stale, as before


def test_a_run_of_consistent_jumps_is_a_new_numbering_a_single_one_is_not() -> None:
    guard = JumpGuard(max_jump=10, rebase_after=3)
    assert guard.check("c", 5, None).reason is None
    assert guard.check("c", 12, 5).reason is None
    assert guard.check("c", 10**6, 12).reason is not None  # one forged jump: refused
    assert guard.check("c", 13, 12).reason is None  # and a real one resets the run
    # a sender back with a far other numbering: refused twice, then adopted as its new numbering
    assert guard.check("c", 10**9, 13).reason is not None
    assert guard.check("c", 10**9 + 1, 13).reason is not None
    verdict = guard.check("c", 10**9 + 2, 13)
    assert verdict.reason is None and verdict.rebase
