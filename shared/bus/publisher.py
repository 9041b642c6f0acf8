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
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError
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
#: the pause before another try of a publish the server refused at once (no stream leader: no
#: responders, or a peer answering "not leader"); also the consumers' pause after such an answer
RETRY_PAUSE_S = 0.1
#: how long a try waits without any answer before another copy is sent (the first keeps waiting)
RESEND_AFTER_S = 0.25
#: JetStream's "duplicate message id is in process": a copy of this very message is staged by the
#: stream leader and not yet committed (JSStreamDuplicateMessageConflict, nats-server errors)
ERR_DUPLICATE_IN_PROCESS = 10158


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
        resend_after_s: float = RESEND_AFTER_S,
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
        #: how long without any answer before another copy is sent (``_publish_acked``)
        self.resend_after_s = min(resend_after_s, attempt_s)

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
        """Publish until JetStream acks, within ``timeout_s`` in all; each copy waits ``attempt_s``
        for its ack, and another copy goes out when none answered for ``resend_after_s``.

        Why several tries: when a NATS node of a cluster dies, the streams it led elect a new leader
        on the survivors, which takes seconds after a SIGKILL (nats-server's raft election timeout),
        and a publish meanwhile is refused ("no responders") or, where a core subscriber listens on
        the subject (``shared.bus.ahead``), never answered. A single 5 s wait failed the publish (the
        simulated cluster's replay aborted: bench/nats_failover.py).

        Why a copy every ``resend_after_s`` rather than one try after another: a try sent while the
        stream had no leader is lost, and waiting out its whole ``attempt_s`` (2 s) before the next
        added up to that much to the pause after the new leader was up (issue 22, measured with
        bench/nats_failover.py). An ack is normally back within milliseconds; a slow one is not
        given up on (its try keeps waiting), a second copy merely races it.

        Why that is safe: every copy carries the same ``Nats-Msg-Id``. The stream stores the first
        copy it gets; a later one is acked as a duplicate (``PublishResult.duplicate``), and one that
        arrives while the first is still being replicated is answered "duplicate message id is in
        process" (10158), after which this keeps waiting for the first copy's ack (or resends later).
        """
        deadline = time.monotonic() + self.timeout_s
        tries: set[asyncio.Task[PubAck]] = set()
        last: BaseException | None = None
        next_send = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    raise last if last is not None else nats.errors.TimeoutError()
                if now >= next_send:
                    wait = min(self.attempt_s, max(deadline - now, 0.05))
                    publish = self.js.publish(subject, payload, timeout=wait, headers=headers)
                    tries.add(asyncio.ensure_future(publish))
                    next_send = now + self.resend_after_s
                until = min(next_send, deadline) - now
                if tries:
                    done, _ = await asyncio.wait(tries, timeout=until, return_when=asyncio.FIRST_COMPLETED)
                else:
                    done = set()
                    await asyncio.sleep(until)
                for task in done:
                    tries.discard(task)
                    err = task.exception()
                    if err is None:
                        return task.result()
                    if not _retried(err):
                        raise err
                    last = err
                    if not _in_process(err):  # refused at once: try again shortly
                        next_send = min(next_send, time.monotonic() + RETRY_PAUSE_S)
        finally:
            for task in tries:  # copies still waiting: their answer no longer matters
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved, so that asyncio does not report it
                task.cancel()


def _retried(err: BaseException) -> bool:
    """Whether a failed try is worth another: nobody answered, nobody listened, the stream had no
    leader, or a copy of the message is in process."""
    retryable = (nats.errors.TimeoutError, nats.errors.NoRespondersError, NoStreamResponseError)
    return isinstance(err, (*retryable, ServiceUnavailableError)) or _in_process(err)


def _in_process(err: BaseException) -> bool:
    return isinstance(err, APIError) and err.err_code == ERR_DUPLICATE_IN_PROCESS


def encode_any(message: object, limits: Limits) -> bytes:
    """``encode`` for any pydantic message (kept apart so the Protocol stays minimal)."""
    if not isinstance(message, BaseModel):
        raise TypeError(f"{type(message).__name__} is not a pydantic message")
    return encode(message, limits)
