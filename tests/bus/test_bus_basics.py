"""Publish/consume round trips, duplicate suppression, shared durable consumers, stream limits."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import Consumer, Delivery, Handler, ensure_streams, stream_name
from shared.schemas import JobOutcome, QueueSnapshot
from tests.bus.bus_helpers import Recorder, process_until, wait_all_acked
from tests.conftest_services import Bus
from tests.schemas.message_factories import outcome, snapshot

pytestmark = pytest.mark.asyncio


async def test_round_trip_with_ack(bus: Bus) -> None:
    sent = snapshot(cluster="c1")
    result = await bus.publisher.publish(sent)
    assert result.subject == bus.subjects.of("c1", "snapshots") and not result.duplicate
    rec: Recorder[QueueSnapshot] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="snapshots",
        model=QueueSnapshot,
        durable="featurizer",
        handler=rec,
        settings=bus.settings,
        latest_wins=True,
    )
    await process_until([consumer], lambda: len(rec.seen) == 1)
    message, delivery = rec.seen[0]
    assert message == sent and delivery.message_id == sent.message_id() and delivery.num_delivered == 1
    await wait_all_acked(bus.js, stream_name(bus.subjects, "snapshots"), "featurizer")
    assert consumer.stats.handled == 1 and consumer.stats.dead_lettered == 0


async def test_duplicate_publish_is_dropped_by_message_id(bus: Bus) -> None:
    first = await bus.publisher.publish(outcome(job_id="j7"))
    again = await bus.publisher.publish(outcome(job_id="j7"))
    assert not first.duplicate and again.duplicate and again.seq == first.seq
    info = await bus.js.stream_info(stream_name(bus.subjects, "outcomes"))
    assert info.state.messages == 1


async def test_replicas_share_one_durable_consumer(bus: Bus) -> None:
    for i in range(40):
        await bus.publisher.publish(outcome(job_id=f"j{i}"))
    got_one = [asyncio.Event(), asyncio.Event()]
    seen: list[list[str]] = [[], []]

    def replica_handler(k: int) -> Handler[JobOutcome]:
        async def handle(message: JobOutcome, delivery: Delivery) -> None:
            got_one[k].set()
            # hold the first message until the other replica has one too: proves the work is shared
            await asyncio.wait_for(got_one[1 - k].wait(), 10)
            seen[k].append(message.job_id)

        return handle

    replicas = [
        Consumer(
            bus.js,
            bus.publisher,
            kind="outcomes",
            model=JobOutcome,
            durable="store",
            handler=replica_handler(k),
            settings=bus.settings.model_copy(update={"fetch_batch": 2}),
        )
        for k in range(2)
    ]
    await process_until(replicas, lambda: len(seen[0]) + len(seen[1]) >= 40, timeout_s=20)
    assert sorted(seen[0] + seen[1]) == sorted(f"j{i}" for i in range(40))  # each exactly once
    assert seen[0] and seen[1]


async def test_streams_carry_the_configured_limits_and_ensure_is_idempotent(bus: Bus) -> None:
    names = await ensure_streams(bus.js, bus.subjects, bus.settings)
    assert await ensure_streams(bus.js, bus.subjects, bus.settings) == names
    snaps = await bus.js.stream_info(stream_name(bus.subjects, "snapshots"))
    assert snaps.config.max_msgs_per_subject == 1
    assert snaps.config.subjects == [bus.subjects.all_clusters("snapshots")]
    outs = await bus.js.stream_info(stream_name(bus.subjects, "outcomes"))
    assert outs.config.max_msgs_per_subject == -1
    assert outs.config.max_age == pytest.approx(bus.settings.stream_max_age_s)
    assert outs.config.duplicate_window == pytest.approx(bus.settings.duplicate_window_s)
    dead = await bus.js.stream_info(stream_name(bus.subjects, "dead"))
    assert dead.config.max_age == pytest.approx(bus.settings.dead_max_age_s)
