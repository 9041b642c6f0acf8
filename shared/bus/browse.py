"""Read a stream's stored messages without consuming them.

Why one function: tools that look back at what the bus carried (``hylo deadletters replay`` reads
the dead letters, ``hylo run``'s store check reads the run's decisions) need every stored message
of a subject, oldest first, and must leave the stream as they found it. An ephemeral pull
consumer that acks nothing does that; its loop (fetch until nothing is pending, skip what does
not decode) lives here once. A stored reference to the object store (``shared.bus.large``) is read
back and checked like any reader does; one whose payload is gone or corrupt is skipped with the
messages that do not decode.
"""

from __future__ import annotations

import contextlib
from typing import TypeVar

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from pydantic import BaseModel

from shared.bus.large import LargePayloads, LargePayloadUnavailable
from shared.schemas.codec import MessageError, decode
from shared.schemas.limits import Limits
from shared.schemas.subjects import Subjects

M = TypeVar("M", bound=BaseModel)


async def read_stream(
    js: JetStreamContext,
    subject: str,
    stream: str,
    model: type[M],
    limits: Limits,
    *,
    start_seq: int | None = None,
) -> list[tuple[int, M]]:
    """Every message on ``subject`` in ``stream`` (from sequence ``start_seq``, else the first) that
    decodes as ``model``, oldest first, with its stream sequence. Messages that do not decode are
    skipped: the consumers that handle the subject dead-letter them."""
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.ALL if start_seq is None else DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start_seq,
        inactive_threshold=30.0,
    )
    sub = await js.pull_subscribe(subject, durable=None, stream=stream, config=config)
    large = LargePayloads(js, Subjects(subject.split(".", 1)[0]))
    out: list[tuple[int, M]] = []
    try:
        while (await sub.consumer_info()).num_pending:
            try:
                msgs = await sub.fetch(256, timeout=2.0)
            except TimeoutError:
                break
            for m in msgs:
                with contextlib.suppress(MessageError, LargePayloadUnavailable):
                    data = await large.resolve(m.data, limits.max_message_bytes)
                    out.append((m.metadata.sequence.stream, decode(model, data, limits)))
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out
