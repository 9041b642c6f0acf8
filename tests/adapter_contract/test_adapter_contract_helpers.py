"""The shared rules behind the cluster-adapter contract (``shared.service.cluster_adapter``).

Sequence numbers, the stale-decision gate, "reported once" and the outcome outbox are used by every
adapter; these tests pin each rule on its own, the outbox over a real NATS JetStream server.
"""

from __future__ import annotations

import pytest

from shared.schemas import JobOutcome, JobPlacement, PlacementDecision, Placements, decode
from shared.schemas.base import Message
from shared.service.cluster_adapter import (
    DecisionGate,
    OutcomeOutbox,
    ReportedOnce,
    SnapshotSequence,
    WrongCluster,
    answers,
    wall_clock_sequence,
)
from tests.conftest_services import Bus
from tests.stages.stage_helpers import node, snap


def decision(sequence: int, cluster: str = "c", correlation_id: str = "s1") -> PlacementDecision:
    return PlacementDecision(
        cluster=cluster,
        correlation_id=correlation_id,
        snapshot_time=0.0,
        sequence=sequence,
        policy="test",
        placements=Placements.of([JobPlacement(job_id="1", rank=0, priority=1.0)]),
    )


def outcome(job_id: str) -> JobOutcome:
    return JobOutcome(
        cluster="c", correlation_id="s1", job_id=job_id, submit_s=0.0, start_s=1.0, end_s=2.0, gpus=1
    )


def test_sequence_numbers_only_increase() -> None:
    seq = SnapshotSequence(first=5)
    assert [seq.next(), seq.next()] == [5, 6]
    assert seq.next(floor=100) == 100  # a clock reading ahead of the count wins
    assert seq.next(floor=100) == 101  # the same millisecond again: still increasing
    assert seq.next(floor=50) == 102  # a clock stepped back: still increasing
    assert seq.last == 102
    with pytest.raises(ValueError, match="0 or above"):
        SnapshotSequence(first=-1)
    assert wall_clock_sequence(1000, now=12.3456) == 12345
    assert wall_clock_sequence(1_000_000) > wall_clock_sequence(1000) * 999


def test_the_gate_admits_own_and_newer_decisions_only() -> None:
    gate = DecisionGate("c")
    assert gate.admit(decision(7))
    gate.applied(decision(7))
    assert gate.newest == 7
    assert gate.admit(decision(7))  # the same snapshot again (a redelivery) passes
    assert gate.admit(decision(8))
    assert not gate.admit(decision(6))  # older than one applied: stale
    with pytest.raises(WrongCluster, match="decision for cluster 'other', this adapter is 'c'"):
        gate.admit(decision(9, cluster="other"))
    assert issubclass(WrongCluster, ValueError)


def test_a_decision_answers_only_its_own_snapshot() -> None:
    s = snap([], [node("a-0", "a")], cluster="c", correlation_id="s1").model_copy(update={"sequence": 3})
    assert answers(decision(3), s)
    assert not answers(decision(4), s)
    assert not answers(decision(3, correlation_id="s2"), s)
    assert not answers(decision(3, cluster="d"), s)


def test_reported_once_remembers_the_newest_ids() -> None:
    seen = ReportedOnce(limit=2)
    assert seen.add("a") and not seen.add("a")
    assert seen.add("b") and seen.add("c")
    assert "a" not in seen and "b" in seen and "c" in seen and len(seen) == 2


@pytest.mark.asyncio
async def test_the_outbox_keeps_what_the_bus_refused_and_publishes_each_once(bus: Bus) -> None:
    refuse = {"2"}

    async def publish(message: Message) -> object:
        if isinstance(message, JobOutcome) and message.job_id in refuse:
            raise ConnectionError("bus down")
        return await bus.publisher.publish(message)

    box = OutcomeOutbox()
    box.add([outcome("1"), outcome("2"), outcome("3")])
    with pytest.raises(ConnectionError):
        await box.flush(publish)
    assert [o.job_id for o in box.pending] == ["2"]  # the others were acknowledged
    refuse.clear()
    box.add([outcome("3")])  # reported again (a restarted adapter): harmless
    assert await box.flush(publish) == 2
    assert box.pending == [] and await box.flush(publish) == 0

    sub = await bus.js.pull_subscribe(bus.subjects.of("c", "outcomes"), durable=None)
    try:
        msgs = await sub.fetch(10, timeout=2)
    finally:
        await sub.unsubscribe()
    stored = sorted(decode(JobOutcome, m.data).job_id for m in msgs)
    assert stored == ["1", "2", "3"]  # the stream dropped the duplicate by message id
