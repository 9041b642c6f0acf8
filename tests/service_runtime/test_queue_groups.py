"""Eight clusters publish at once into a pipeline with two replicas of every stage (issue 22, item 2).

Replicas of a stage share one durable JetStream consumer, which hands each message to one replica
(the queue-group behaviour, with redelivery on top). What must hold: every snapshot of every
cluster gets exactly one decision, each decision answers its own cluster's snapshot, and every
replica of every stage did part of the work (read from each process' own /metrics).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import httpx
import pytest

from services.adapter_sim.stack import LocalStack
from shared.bus import Publisher, connect, ensure_streams
from shared.schemas import Limits, PlacementDecision, Subjects, decode
from tests.conftest_services import bus_settings, drop_streams
from tests.schemas.message_factories import snapshot
from tests.service_runtime.runtime_helpers import spec_and_store

ROUNDS = 6
pytestmark = pytest.mark.slow


def _handled(metrics: str, route: str) -> float:
    """Messages a replica handled on ``route`` (the count of its handle-time histogram)."""
    pattern = rf'^hylo_handle_seconds_count\{{[^}}]*route="{re.escape(route)}"[^}}]*\}} ([0-9.e+]+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, metrics, re.M))


def test_eight_clusters_share_two_replicas_of_every_stage(
    tmp_path: Path, nats_url: str, postgres_url: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    clusters = [f"qg{tag}-{k}" for k in range(8)]
    spec, _ = asyncio.run(spec_and_store(tmp_path, "unused"))
    root = f"qg{tag}"
    bus = bus_settings(nats_url).model_copy(update={"subject_root": root})  # small memory streams
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": root,
        "HYLO_STORAGE": "memory",
        "HYLO_STREAM_MAX_BYTES": str(bus.stream_max_bytes),
        "HYLO_DEAD_MAX_BYTES": str(bus.dead_max_bytes),
        # one message per fetch: a replica cannot take a whole burst in one batch, so with 48
        # snapshots each replica gets some (the sharing itself is JetStream's, not the test's)
        "HYLO_FETCH_BATCH": "1",
        "HYLO_DATABASE_URL": postgres_url,
        "HYLO_CLUSTERS": json.dumps({c: str(spec) for c in clusters}),
        "HYLO_LOG_LEVEL": "WARNING",
    }
    sent: dict[str, str] = {}
    got: list[PlacementDecision] = []

    async def run() -> None:
        nc = await connect(bus)
        try:
            js = nc.jetstream()
            subjects = Subjects(root)
            await ensure_streams(js, subjects, bus)
            publisher = Publisher(js, subjects, Limits(max_message_bytes=8 << 20))
            waiting: dict[str, asyncio.Future[None]] = {}

            async def on_decision(msg: object) -> None:
                decision = decode(PlacementDecision, msg.data, Limits(max_message_bytes=8 << 20))  # type: ignore[attr-defined]
                got.append(decision)
                future = waiting.pop(decision.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(None)

            await nc.subscribe(subjects.all_clusters("placements"), cb=on_decision)

            async def cluster_loop(cluster: str) -> None:
                for i in range(ROUNDS):  # one snapshot in flight per cluster, as an adapter does
                    corr = f"{cluster}-{i}"
                    sent[corr] = cluster
                    # held here: the decision may arrive (and leave ``waiting``) before the wait starts
                    answered = waiting[corr] = asyncio.get_running_loop().create_future()
                    await publisher.publish(snapshot(cluster=cluster, correlation_id=corr, sequence=i + 1))
                    await asyncio.wait_for(answered, 60)

            await asyncio.gather(*(cluster_loop(c) for c in clusters))
            await asyncio.sleep(0.5)  # a duplicate would arrive now
        finally:
            await nc.close()

    stack = LocalStack(tmp_path / "stack")
    stack.workdir.mkdir()
    try:
        stack.start_services(env)  # two replicas of each stage, each its own process
        stack.start_services(env)
        stack.wait_ready()
        asyncio.run(run())
        with httpx.Client(timeout=5) as http:
            handled = {
                (c.name, c.replica): _handled(
                    http.get(f"http://127.0.0.1:{c.port}/metrics").text,
                    {"featurizer": "featurizer", "prioritizer": "prioritizer", "placer": "placer"}[c.name],
                )
                for c in stack.services()
            }
    finally:
        stack.stop()
        drop_streams(nats_url, root)

    assert len(sent) == 8 * ROUNDS
    assert sorted(d.correlation_id for d in got) == sorted(sent), "each snapshot gets one decision"
    assert all(sent[d.correlation_id] == d.cluster for d in got), "a decision answered another cluster"
    assert len(handled) == 6
    for stage in ("featurizer", "prioritizer", "placer"):
        counts = [n for (name, _), n in handled.items() if name == stage]
        assert len(counts) == 2 and all(n > 0 for n in counts), f"{stage}: {counts}"
        assert sum(counts) >= 8 * ROUNDS, f"{stage}: {counts}"
