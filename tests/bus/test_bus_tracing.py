"""W3C trace context travels in NATS headers: one trace across hops."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.bus import Consumer, Delivery, Publisher
from shared.schemas import FeatureMatrix, QueueSnapshot
from tests.bus.bus_helpers import Recorder, process_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, snapshot

pytestmark = pytest.mark.asyncio


async def test_trace_context_survives_two_hops(bus: Bus) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    publisher = Publisher(bus.js, bus.subjects, bus.limits, tracer=tracer)

    async def featurize(message: QueueSnapshot, delivery: Delivery) -> None:
        assert "traceparent" in delivery.headers
        await publisher.publish(features(message))  # inside the consume span: same trace

    first = Consumer(
        bus.js,
        publisher,
        kind="snapshots",
        model=QueueSnapshot,
        durable="featurizer",
        handler=featurize,
        settings=bus.settings,
        tracer=tracer,
    )
    rec: Recorder[FeatureMatrix] = Recorder()
    second = Consumer(
        bus.js,
        publisher,
        kind="features",
        model=FeatureMatrix,
        durable="prioritizer",
        handler=rec,
        settings=bus.settings,
        tracer=tracer,
    )
    with tracer.start_as_current_span("adapter") as root:
        await publisher.publish(snapshot())
    await process_until([first], lambda: first.stats.handled == 1)
    await process_until([second], lambda: len(rec.seen) == 1)

    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) >= {
        "adapter",
        "publish snapshots",
        "consume snapshots",
        "publish features",
        "consume features",
    }
    trace_id = root.get_span_context().trace_id
    assert all(s.context is not None and s.context.trace_id == trace_id for s in spans.values())
    hop = [
        ("publish snapshots", "consume snapshots"),
        ("consume snapshots", "publish features"),
        ("publish features", "consume features"),
    ]
    for parent, child in hop:
        assert spans[child].parent is not None
        assert spans[child].parent.span_id == spans[parent].context.span_id  # type: ignore[union-attr]
    provider.shutdown()
