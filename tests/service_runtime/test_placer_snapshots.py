"""The placer finds each vector's snapshot (memory or stream) and skips vectors whose snapshot is gone.

Real NATS (the test's own subject root) and a real SQLite file; the placer runs as its runtime does in
production (``ServiceRuntime``), started after the snapshots were published so that it must read
them from the snapshots stream, which keeps only each cluster's newest.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import pytest

from services.adapter_sim.stack import free_port
from services.placer.service import DEFINITION as PLACER
from shared.schemas import PlacementDecision, decode
from shared.service import ServiceRuntime, ServiceSettings
from shared.store.settings import StoreSettings
from tests.bus.bus_helpers import read_all
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, priorities, snapshot
from tests.service_runtime.runtime_helpers import spec_and_store


@pytest.mark.asyncio
async def test_vectors_are_placed_against_their_snapshot_and_superseded_ones_are_skipped(
    bus: Bus, tmp_path: Path
) -> None:
    spec, db = await spec_and_store(tmp_path, "placer")
    old, new = snapshot(correlation_id="old", sequence=1), snapshot(correlation_id="new", sequence=2)
    stored_old = await bus.publisher.publish(old)
    stored_new = await bus.publisher.publish(new)  # supersedes "old" in the stream

    port = free_port()
    settings = ServiceSettings(http_port=port, clusters={"c1": str(spec)}, replica="placer")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    runtime = ServiceRuntime(PLACER, settings, bus_settings, StoreSettings(database_url=db))
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    try:
        for snap, stored in ((old, stored_old), (new, stored_new)):
            matrix = features(snap).model_copy(update={"snapshot_seq": stored.seq})
            await bus.publisher.publish(priorities(matrix))
        decisions = [
            decode(PlacementDecision, p)
            for p in await read_all(bus.js, bus.subjects.all_clusters("placements"), 1, 20)
        ]
        assert [d.correlation_id for d in decisions] == ["new"]
        assert any(p.nodes for p in decisions[0].placements)  # placed against the new snapshot's nodes

        async def stale_count() -> float:
            async with httpx.AsyncClient() as client:
                text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
            lines = [ln for ln in text.splitlines() if ln.startswith("hylo_stale_vectors_total{")]
            return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)

        for _ in range(200):  # the stale vector may be acked after the decision was published
            if await stale_count() >= 1:
                break
            await asyncio.sleep(0.05)
        assert await stale_count() == 1.0

        # a snapshot published while the placer runs is held in memory: no stream read needed
        live = snapshot(correlation_id="live", sequence=3)
        await bus.publisher.publish(live)
        await bus.publisher.publish(priorities(features(live).model_copy(update={"snapshot_seq": None})))
        later = await read_all(bus.js, bus.subjects.all_clusters("placements"), 2, 20)
        assert sorted(decode(PlacementDecision, p).correlation_id for p in later) == ["live", "new"]
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
