"""A thin typed layer over NATS JetStream: streams, publishing, consuming, dead letters, tracing.

Why thin: services should read like "decode a QueueSnapshot, handle it, ack", while the guarantees
(explicit acks, redelivery, duplicate suppression by message id, latest-wins for snapshots, dead
letters for invalid input, trace propagation) live here once. See ``docs/messages.md``.
"""

from shared.bus.connection import connect
from shared.bus.consumer import Consumer, ConsumerStats, Delivery, Handler
from shared.bus.large import LargePayloads, LargePayloadUnavailable, LargeRef
from shared.bus.publisher import HEADER_CORRELATION, HEADER_MSG_ID, Publisher, PublishResult
from shared.bus.settings import BusSettings
from shared.bus.streams import StreamPlan, create_streams, ensure_streams, stream_name, stream_plans
from shared.bus.tracing import extract_context, inject_headers

__all__ = [
    "HEADER_CORRELATION",
    "HEADER_MSG_ID",
    "BusSettings",
    "Consumer",
    "ConsumerStats",
    "Delivery",
    "Handler",
    "LargePayloadUnavailable",
    "LargePayloads",
    "LargeRef",
    "PublishResult",
    "Publisher",
    "StreamPlan",
    "connect",
    "create_streams",
    "ensure_streams",
    "extract_context",
    "inject_headers",
    "stream_name",
    "stream_plans",
]
