"""A queue of 25,000 pending jobs through the real pipeline (issue 22, items 1 and 2): featurizer,
prioritizer and placer as their runtimes run them in production, on the machine's NATS and a real
SQLite store, whose recorder stores the decision's rows. The inline limit is 256 KiB
(``HYLO_LARGE_PAYLOAD_BYTES``; by default it is the server's max_payload, 1 MiB here, which this
small cluster's snapshot of 0.5 MB stays under), so the snapshot, its feature matrix and its
decision travel through the object store.

Before issue 22 the same snapshot was refused at publish (``MaxPayloadError``), and one of 5,000
jobs was dead-lettered as "more than the limit of 4096".
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from services.adapter_sim.stack import free_port
from services.featurizer.service import DEFINITION as FEATURIZER
from services.placer.service import DEFINITION as PLACER
from services.prioritizer.service import DEFINITION as PRIORITIZER
from shared.bus import Consumer, Delivery, Publisher, stream_name
from shared.bus.large import is_reference
from shared.schemas import Limits, PlacementDecision
from shared.service import ServiceRuntime, ServiceSettings
from shared.store import Decision, create_engine
from shared.store.settings import StoreSettings
from tests.conftest_services import Bus
from tests.schemas.message_factories import snapshot
from tests.service_runtime.runtime_helpers import spec_and_store

PENDING = 25_000


@pytest.mark.asyncio
async def test_a_25000_job_snapshot_goes_end_to_end_through_the_object_store(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYLO_LARGE_PAYLOAD_BYTES", str(256 << 10))  # read by every LargePayloads
    spec, db = await spec_and_store(tmp_path, "big")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root, "ack_wait_s": 30.0})
    stop = asyncio.Event()
    tasks = []
    for definition in (FEATURIZER, PRIORITIZER, PLACER):
        settings = ServiceSettings(http_port=free_port(), clusters={"c1": str(spec)}, replica=definition.name)
        runtime = ServiceRuntime(definition, settings, bus_settings, StoreSettings(database_url=db))
        await runtime.start()
        tasks.append(asyncio.create_task(runtime.run(stop)))
    publisher = Publisher(bus.js, bus.subjects, Limits())  # the default limits: 100,000 pending
    decisions: list[PlacementDecision] = []

    async def took(decision: PlacementDecision, _: Delivery) -> None:
        decisions.append(decision)

    adapter = Consumer(
        bus.js,
        publisher,
        kind="placements",
        model=PlacementDecision,
        durable="adapter",
        handler=took,
        settings=bus_settings,
    )
    engine = create_engine(db)
    try:
        sent = snapshot(correlation_id="big-queue", n_jobs=PENDING)
        started = time.monotonic()
        stored = await publisher.publish(sent)
        raw = await bus.js.get_msg(stream_name(bus.subjects, "snapshots"), stored.seq)
        assert is_reference(raw.data)  # over 1 MiB: the stream holds a reference
        while not decisions and time.monotonic() - started < 60:
            await adapter.process_batch(timeout_s=0.5)
        assert decisions, "no decision within 60 s"
        [decision] = decisions
        assert decision.correlation_id == "big-queue" and len(decision.placements) == PENDING
        assert sorted(decision.placements.job_id) == sorted(sent.pending.job_id)
        assert any(decision.placements.node_count)  # something starts on the 4 nodes
        for kind in ("features", "placements"):  # both went through the object store too
            info = await bus.js.stream_info(stream_name(bus.subjects, kind))
            last = await bus.js.get_msg(stream_name(bus.subjects, kind), info.state.last_seq)
            assert is_reference(last.data), kind
        rows = 0
        while rows < PENDING and time.monotonic() - started < 90:  # the recorder stores every row
            async with engine.connect() as conn:
                rows = int((await conn.execute(select(func.count()).select_from(Decision))).scalar_one())
            await asyncio.sleep(0.2)
        assert rows == PENDING
    finally:
        await engine.dispose()
        await adapter.close()
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
