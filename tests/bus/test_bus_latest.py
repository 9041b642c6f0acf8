"""Latest-wins for snapshots: stale snapshots are skipped, the newest is always handled."""

from __future__ import annotations

import asyncio

import pytest

from shared.bus import Consumer, ensure_streams, stream_name
from shared.schemas import QueueSnapshot
from tests.bus.bus_helpers import Recorder, process_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import snapshot

pytestmark = pytest.mark.asyncio


def consumer(bus: Bus, rec: Recorder[QueueSnapshot], durable: str = "featurizer") -> Consumer[QueueSnapshot]:
    return Consumer(
        bus.js,
        bus.publisher,
        kind="snapshots",
        model=QueueSnapshot,
        durable=durable,
        handler=rec,
        settings=bus.settings,
        latest_wins=True,
    )


async def test_stream_keeps_only_the_newest_snapshot_per_cluster(bus: Bus) -> None:
    for seq in range(1, 31):
        await bus.publisher.publish(snapshot(cluster="c1", correlation_id=f"s{seq}", sequence=seq))
    await bus.publisher.publish(snapshot(cluster="c2", correlation_id="other", sequence=1))
    rec: Recorder[QueueSnapshot] = Recorder()
    c = consumer(bus, rec)
    await process_until([c], lambda: len(rec.seen) == 2)
    await c.process_batch(timeout_s=0.2)
    assert sorted((m.cluster, m.sequence) for m, _ in rec.seen) == [("c1", 30), ("c2", 1)]


async def test_consumer_skips_stale_snapshots_in_a_batch(bus: Bus) -> None:
    # without the stream's per-subject limit, the consumer's own check must do the skipping
    await ensure_streams(
        bus.js, bus.subjects, bus.settings.model_copy(update={"snapshots_latest_only": False})
    )
    info = await bus.js.stream_info(stream_name(bus.subjects, "snapshots"))
    assert info.config.max_msgs_per_subject == -1
    for seq in [3, 1, 2, 5, 4]:  # out of order, as replicas of an adapter might publish
        await bus.publisher.publish(snapshot(correlation_id=f"s{seq}", sequence=seq))
    rec: Recorder[QueueSnapshot] = Recorder()
    c = consumer(bus, rec)
    await process_until([c], lambda: c.stats.handled + c.stats.skipped_stale == 5)
    assert [m.sequence for m, _ in rec.seen] == [5] and c.stats.skipped_stale == 4
    await bus.publisher.publish(snapshot(correlation_id="late", sequence=2))  # arrives after 5 was handled
    await bus.publisher.publish(snapshot(correlation_id="s6", sequence=6))
    await process_until([c], lambda: c.stats.handled == 2)
    assert [m.sequence for m, _ in rec.seen] == [5, 6] and c.stats.skipped_stale == 5


async def test_burst_while_busy_keeps_latency_bounded(bus: Bus) -> None:
    rec: Recorder[QueueSnapshot] = Recorder(delay_s=0.02)  # a slow featurizer
    c = consumer(bus, rec)
    await c.start()
    stop = asyncio.Event()
    runner = asyncio.create_task(c.run(stop))
    for seq in range(1, 151):
        await bus.publisher.publish(snapshot(correlation_id=f"s{seq}", sequence=seq))
    deadline = asyncio.get_running_loop().time() + 10
    while not rec.seen or rec.seen[-1][0].sequence != 150:
        assert asyncio.get_running_loop().time() < deadline, "newest snapshot never handled"
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(runner, 5)
    handled = [m.sequence for m, _ in rec.seen]
    assert handled == sorted(set(handled)), "snapshots must be handled in increasing order"
    assert len(handled) < 75, f"a burst of 150 should cost far fewer decisions, got {len(handled)}"
