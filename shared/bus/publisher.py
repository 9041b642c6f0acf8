"""Publishing typed messages with a deterministic message id and the current trace context.

Why deterministic ids: ``Nats-Msg-Id`` is what JetStream deduplicates on (within the stream's
duplicate window). A service that crashes after publishing but before acking its input redoes the
work after redelivery and publishes the same message again: with an id derived from the content's
identity (kind, cluster, correlation id; job id for outcomes) the second copy is dropped by the server.

A message whose encoding passes the inline limit (the server's ``max_payload``, less room for the
headers) is stored in the object store and its reference published in its place, under the same
id and headers (``shared.bus.large``); readers resolve the reference transparently.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.js.errors import NoStreamResponseError
from opentelemetry import trace
from pydantic import BaseModel

from shared.bus.large import LargePayloads
from shared.bus.signing import HEADER_SIGNATURE, Signer
from shared.bus.tracing import inject_headers
from shared.schemas.codec import encode
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.subjects import KINDS, Kind, Subjects

HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_CORRELATION = "Hylo-Correlation-Id"
HEADER_SCHEMA = "Hylo-Schema-Version"
#: the pause between two tries of a publish nobody acked (a stream electing its leader)
RETRY_PAUSE_S = 0.1


class Publishable(Protocol):
    """What the publisher needs of a message (Message subclasses and DeadLetter have it)."""

    @property
    def cluster(self) -> str: ...

    @property
    def correlation_id(self) -> str | None: ...

    @property
    def schema_version(self) -> int: ...

    def message_id(self) -> str: ...


@dataclass(frozen=True)
class PublishResult:
    """Where JetStream stored the message; ``duplicate`` when its id was already stored."""

    stream: str
    seq: int
    duplicate: bool
    subject: str


def kind_of(message: object) -> Kind:
    """The subject kind of a message class (its ``kind`` class variable)."""
    kind = getattr(type(message), "kind", "")
    for k in KINDS:
        if k == kind:
            return k
    raise TypeError(f"{type(message).__name__} has no subject kind")


class Publisher:
    """Publishes messages to ``<root>.v1.<cluster>.<kind>`` and waits for JetStream's ack."""

    def __init__(
        self,
        js: JetStreamContext,
        subjects: Subjects,
        limits: Limits | None = None,
        tracer: trace.Tracer | None = None,
        timeout_s: float = 20.0,
        signer: Signer | None = None,
        attempt_s: float = 2.0,
        large: LargePayloads | None = None,
    ) -> None:
        self.js = js
        #: where payloads above the inline limit go (and how consumers of this publisher read them)
        self.large = large or LargePayloads(js, subjects)
        #: signs the messages of its kinds (model announcements) when a signing key is configured
        self.signer = signer
        self.subjects = subjects
        self.limits = limits_or_configured(limits)
        self.tracer = tracer or trace.get_tracer("hylo.bus")
        #: how long a publish may wait for JetStream's ack in all (a leader election included)
        self.timeout_s = timeout_s
        #: how long one try waits for the ack (``_publish_acked``)
        self.attempt_s = attempt_s

    async def publish(self, message: Publishable, headers: dict[str, str] | None = None) -> PublishResult:
        """Encode (size-checked), attach id, correlation and trace headers (and a signature for the
        signer's kinds, over the whole payload), publish (a reference to the payload when it passes
        the inline limit, ``shared.bus.large``), await the ack."""
        kind = kind_of(message)
        subject = self.subjects.of(message.cluster, kind)
        payload = encode_any(message, self.limits)
        with self.tracer.start_as_current_span(f"publish {kind}", kind=trace.SpanKind.PRODUCER) as span:
            span.set_attribute("messaging.destination.name", subject)
            hdrs = dict(headers or {})
            hdrs[HEADER_MSG_ID] = message.message_id()
            hdrs[HEADER_SCHEMA] = str(message.schema_version)
            if message.correlation_id:
                hdrs[HEADER_CORRELATION] = message.correlation_id
                span.set_attribute("hylo.correlation_id", message.correlation_id)
            inject_headers(hdrs)
            if self.signer is not None and kind in self.signer.kinds:
                hdrs[HEADER_SIGNATURE] = self.signer.sign(subject, payload)
            if len(payload) > self.large.inline_max():
                span.set_attribute("hylo.large_payload_bytes", len(payload))
                payload = await self.large.offload(kind, message.cluster, payload)
            ack = await self._publish_acked(subject, payload, hdrs)
        return PublishResult(stream=ack.stream, seq=ack.seq, duplicate=bool(ack.duplicate), subject=subject)

    async def _publish_acked(self, subject: str, payload: bytes, headers: dict[str, str]) -> PubAck:
        """Publish until JetStream acks, within ``timeout_s`` in all, each try waiting ``attempt_s``.

        Why several tries: when a NATS node of a cluster dies, the streams it led elect a new leader
        on the survivors, which takes several seconds after a SIGKILL (the election timeout), and a
        publish meanwhile is never answered. A single 5 s wait failed the publish (the simulated
        cluster's replay aborted: bench/nats_failover.py); now it is retried until the budget is
        spent. A retry carries the same ``Nats-Msg-Id``, so a try that did land is dropped by the
        stream as a duplicate, never stored twice."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                wait = min(self.attempt_s, max(left, 0.05))
                return await self.js.publish(subject, payload, timeout=wait, headers=headers)
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, NoStreamResponseError):
                if time.monotonic() + RETRY_PAUSE_S >= deadline:
                    raise
                await asyncio.sleep(RETRY_PAUSE_S)


def encode_any(message: object, limits: Limits) -> bytes:
    """``encode`` for any pydantic message (kept apart so the Protocol stays minimal)."""
    if not isinstance(message, BaseModel):
        raise TypeError(f"{type(message).__name__} is not a pydantic message")
    return encode(message, limits)
