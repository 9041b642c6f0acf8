"""Decoding a kind of message as it is published, before the message that names it arrives.

Why: the placer's PriorityVector names the FeatureMatrix the featurizer published a few milliseconds
earlier by reference (its sequence in the features stream and the sha256 of its bytes,
``shared.schemas.messages.MatrixRef``), or nests it byte for byte (``shared.schemas.codec
.ReceivedJson``). A placer replica that receives every matrix as it is published (a plain core NATS
subscription, no consumer state on the server) and decodes it while the prioritizer works decodes
the vector afterwards without reading the matrix on the path: about 2 ms less between snapshot and
decision for a 1,024-job queue on openb, and a vector of a few kB instead of 0.3 MB.

Nothing depends on it for correctness: a matrix not decoded ahead (missed, not yet decoded, invalid,
the replica restarted) is read from the features stream by the sequence the vector names
(``fetch_stored``, the placer's consumer calls it), or, for a vector that nests its matrix, decoded
with the vector. Only the newest matrix of each cluster is decoded (one published while an older one
waits supersedes it), so a burst costs no more than the vectors that follow it.

A matrix larger than one NATS message arrives as a reference to the object store (``shared.bus
.large``): it is read back and checked when its turn to be decoded comes, and the digest a vector
names is the whole matrix's, whichever way it travelled.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from shared.bus.large import LargePayloads, LargePayloadUnavailable, is_reference, parse_reference
from shared.bus.streams import stream_name
from shared.schemas.base import Message
from shared.schemas.codec import RECEIVED, MessageError, MissingReference, decode
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.subjects import KINDS, Kind, SubjectError, Subjects

__all__ = ["DecodeAhead", "DecodeAheadStats", "fetch_stored"]

log = logging.getLogger("hylo.bus.ahead")

M = TypeVar("M", bound=Message)


@dataclass
class DecodeAheadStats:
    """What became of the messages received: decoded, superseded before decoding, or invalid."""

    received: int = 0
    decoded: int = 0
    superseded: int = 0
    invalid: int = 0


class DecodeAhead(Generic[M]):
    """Decodes every published message of ``kind`` as ``model`` (under ``limits``), newest first.

    The model must keep its received JSON (``KEEP_RECEIVED_JSON``), else decoding ahead is useless.
    """

    def __init__(
        self,
        nc: Client,
        subjects: Subjects,
        kind: Kind,
        model: type[M],
        limits: Limits | None = None,
        decode_ahead: Callable[[], bool] | None = None,
        large: LargePayloads | None = None,
        accept: Callable[[str], bool] | None = None,
    ) -> None:
        if not getattr(model, "KEEP_RECEIVED_JSON", False):
            raise ValueError(f"{model.__name__} does not keep its received JSON: nothing to decode ahead")
        self.nc = nc
        self.subjects = subjects
        self.kind = kind
        self.model = model
        self.limits = limits_or_configured(limits)
        self.large = large or LargePayloads(nc.jetstream(), subjects)
        #: whether to decode as messages arrive (else they wait, raw, until one is named)
        self.decode_ahead = decode_ahead or (lambda: True)
        #: the clusters whose messages are kept and decoded as they arrive (the replica's own when
        #: the stage's replicas split the clusters: ``shared.service.shards``)
        self.accept = accept or (lambda cluster: True)
        self.stats = DecodeAheadStats()
        self._waiting: dict[str, bytes] = {}
        #: references being read from the object store now, by the digest of the message
        self._reading: dict[str, asyncio.Event] = {}
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._sub is None:
            self._sub = await self.nc.subscribe(self.subjects.all_clusters(self.kind), cb=self._on_msg)

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._waiting.clear()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            cluster, _ = self.subjects.parse(msg.subject)
        except SubjectError:
            return
        if not self.accept(cluster):
            self._waiting.pop(cluster, None)
            return
        self.stats.received += 1
        if self._waiting.pop(cluster, None) is not None:
            self.stats.superseded += 1
        self._waiting[cluster] = msg.data
        if self.decode_ahead() and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def decode_waiting(self, sha256: str | None = None) -> None:
        """Decode now what waits (only the message whose bytes have ``sha256``, when given): a
        message naming it arrived before its turn came. A reference to the object store cannot be
        read here (``decode_named`` reads it): it stays waiting."""
        for cluster, data in list(self._waiting.items()):
            if is_reference(data) or (sha256 is not None and _digest(data) != sha256):
                continue
            del self._waiting[cluster]
            self._decode_whole(cluster, data)

    async def decode_named(self, sha256: str) -> None:
        """Decode now the message whose whole bytes have ``sha256``, if it waits (inline or as a
        reference to the object store) or is being read: a message naming it arrived first."""
        reading = self._reading.get(sha256)
        if reading is not None:
            await reading.wait()
            return
        for cluster, data in list(self._waiting.items()):
            if _digest(data) == sha256 and self._waiting.get(cluster) is data:
                del self._waiting[cluster]
                await self._decode(cluster, data)
                return

    async def _drain(self) -> None:
        """Decode what waits, one message at a time, letting other work run in between (and stop
        when ``decode_ahead`` says so: the rest waits until named)."""
        while self._waiting and self.decode_ahead():
            cluster = next(iter(self._waiting))
            await self._decode(cluster, self._waiting.pop(cluster))
            await asyncio.sleep(0)

    async def _decode(self, cluster: str, data: bytes) -> None:
        """Read a reference's payload (``shared.bus.large``), then decode it."""
        if not is_reference(data):
            self._decode_whole(cluster, data)
            return
        digest = _digest(data)
        done = self._reading.setdefault(digest, asyncio.Event())
        try:
            whole = await self.large.resolve(data, self.limits.max_message_bytes)
        except (MessageError, LargePayloadUnavailable) as err:  # the naming message's consumer
            self.stats.invalid += 1  # reads it itself, and reports it
            log.debug("%s of %s not read ahead: %s", self.kind, cluster, err)
        else:
            self._decode_whole(cluster, whole)
        finally:
            self._reading.pop(digest, None)
            done.set()

    def _decode_whole(self, cluster: str, data: bytes) -> None:
        try:
            message = decode(self.model, data, self.limits)
            RECEIVED.digest_of(message)  # what a vector's reference is matched against
        except MessageError as err:  # the consumer of the naming message reports it
            self.stats.invalid += 1
            log.debug("%s of %s decoded ahead is invalid: %s", self.kind, cluster, err.reason)
        else:
            self.stats.decoded += 1


def _digest(data: bytes) -> str:
    """The sha256 of the whole message ``data`` is or refers to (a reference carries it)."""
    if is_reference(data):
        try:
            return parse_reference(data).sha256
        except MessageError:
            return ""
    return hashlib.sha256(data).hexdigest()


async def fetch_stored(
    js: JetStreamContext,
    subjects: Subjects,
    model: type[Message],
    missing: MissingReference,
    limits: Limits | None = None,
    large: LargePayloads | None = None,
) -> bool:
    """Read the message ``missing`` names from its stream and decode it as ``model`` (so that the
    message naming it decodes next: ``decode`` remembers it); False if the stream no longer holds it.
    A stored reference to the object store is read back (``shared.bus.large``) and the digest
    checked on the whole message.

    MessageError if the stored message is not the one named (another sha256: a stream re-created
    since) or is invalid. Other errors (the server unreachable) propagate: the consumer then leaves
    the naming message unacked, and it comes back.
    """
    kind = next((k for k in KINDS if k == missing.kind), None)
    if kind is None:
        raise MessageError(f"a reference to a message of unknown kind {missing.kind!r}")
    stream = stream_name(subjects, kind)
    try:
        stored = await js.get_msg(stream, seq=missing.seq)
    except NotFoundError:  # expired (the work streams keep a day) or the stream was re-created
        return False
    if stored.data is None:
        return False
    limits = limits_or_configured(limits)
    data = await (large or LargePayloads(js, subjects)).resolve(stored.data, limits.max_message_bytes)
    digest = hashlib.sha256(data).hexdigest()
    if digest != missing.sha256:
        raise MessageError(f"{stream} sequence {missing.seq} has sha256 {digest[:16]}..., another message")
    decode(model, data, limits)
    return True
