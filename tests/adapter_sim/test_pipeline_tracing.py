"""One snapshot is one trace across the featurizer, prioritizer and placer processes.

The services run as deployed (processes, configured by environment) with ``HYLO_OTLP_ENDPOINT``
pointing at a real OTLP/HTTP endpoint in this test; after they stop (SIGTERM flushes their span
queues) the spans they exported must form one trace per snapshot, linked through the trace context
carried in NATS headers, with a consume and a publish span per stage.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import pytest

from services.adapter_sim.stack import LocalStack
from shared.bus import BusSettings, Publisher, connect, ensure_streams
from shared.schemas import Limits, PlacementDecision, Subjects, decode
from shared.store.migrate import upgrade_url
from tests.schemas.message_factories import SPEC_DOC, snapshot
from tests.telemetry.otlp_receiver import otlp_receiver

pytestmark = pytest.mark.slow


async def _send_and_wait(nats_url: str, root: str, correlation_ids: list[str]) -> list[PlacementDecision]:
    bus = BusSettings(nats_url=nats_url, subject_root=root)
    nc = await connect(bus)
    try:
        js = nc.jetstream()
        subjects = Subjects(root)
        await ensure_streams(js, subjects, bus)
        sub = await nc.subscribe(subjects.all_clusters("placements"))
        publisher = Publisher(js, subjects, Limits())
        out = []
        for i, corr in enumerate(correlation_ids):
            await publisher.publish(snapshot(correlation_id=corr, sequence=i + 1))
            msg = await sub.next_msg(timeout=30)
            out.append(decode(PlacementDecision, msg.data))
        return out
    finally:
        await nc.close()


def test_each_snapshot_is_one_trace_across_the_services(tmp_path: Path) -> None:
    spec = tmp_path / "c1.yaml"
    spec.write_text(json.dumps(SPEC_DOC))  # JSON is YAML
    root = "traces"
    stack = LocalStack(tmp_path)
    with otlp_receiver() as receiver:
        try:
            nats_url = stack.start_nats()
            env = {
                "HYLO_NATS_URL": nats_url,
                "HYLO_SUBJECT_ROOT": root,
                "HYLO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'traces.db'}",
                "HYLO_CLUSTERS": json.dumps({"c1": str(spec)}),
                "HYLO_OTLP_ENDPOINT": receiver.url,
            }
            upgrade_url(env["HYLO_DATABASE_URL"])
            stack.start_services(env)
            stack.wait_ready()
            decisions = asyncio.run(_send_and_wait(nats_url, root, ["snap-a", "snap-b"]))
        finally:
            stack.stop()
        spans = receiver.spans()

    assert [d.correlation_id for d in decisions] == ["snap-a", "snap-b"]
    by_trace: dict[bytes, set[tuple[str, str]]] = defaultdict(set)
    for service, name, trace_id, _parent in spans:
        by_trace[trace_id].add((service, name))
    pipeline_traces = [t for t, names in by_trace.items() if ("placer", "publish placements") in names]
    assert len(pipeline_traces) == 2, dict(by_trace)  # one per snapshot, not one per service
    for trace_id in pipeline_traces:
        assert {
            ("featurizer", "consume snapshots"),
            ("featurizer", "publish features"),
            ("prioritizer", "consume features"),
            ("prioritizer", "publish priorities"),
            ("placer", "consume priorities"),
            ("placer", "publish placements"),
        } <= by_trace[trace_id]
