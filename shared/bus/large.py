"""Messages larger than one NATS message: the payload in the JetStream object store, a reference in
its stream (a claim check).

Why: NATS refuses a message above the server's ``max_payload`` (1 MiB by default), and the pipeline's
messages grow with the queue: a snapshot of 25,000 pending jobs (1.14 MB) failed at publish with
``MaxPayloadError``, and on a 10,000-node cluster a snapshot of 4,096 pending jobs is already 3.3 MB
(its 67,000 running jobs). Raising ``max_payload`` only moves the wall, and NATS advises against
messages of many MB.

How: the publisher (``shared.bus.publisher``) hands every encoding above the inline limit
(``HYLO_LARGE_PAYLOAD_BYTES``, else the server's ``max_payload`` less 16 KiB for the headers) to
``LargePayloads.offload``, which writes it into the subject root's bucket (``<ROOT>_LARGE``, stream
``OBJ_<ROOT>_LARGE``, ``shared.bus.streams.large_config``) with nats-py's ``ObjectStore.put``: the
chunks (``HYLO_LARGE_CHUNK_BYTES``) on ``$O.<bucket>.C.<nuid>``, then the object's info (size,
chunk count, SHA-256) on ``$O.<bucket>.M.<name>``, the JetStream object store's layout (``nats object
get`` and nats-py's ``ObjectStore.get`` read it). The message's stream then gets, instead of the
payload, a reference ``LargeRef`` (``{"hylo_large_payload": 1, "bucket", "name", "nuid", "chunks",
"bytes", "sha256"}``, about 250 bytes) under the message's usual headers. Every guarantee of the bus
therefore applies to the reference unchanged: its ``Nats-Msg-Id`` deduplicates a republished
message, consumers ack, nak, redeliver and dead-letter it, the snapshots stream keeps each
cluster's newest, latest-wins reads the decoded message's key. A reader (``resolve``: the consumer,
the snapshot cache, decode-ahead, a stored message fetched by sequence, the stream browser) reads
the chunks back with direct gets, checks the chunk count, the byte count and the SHA-256 of the
whole against the reference, and decodes the whole as if it had arrived inline.

Integrity: a chunk that is missing (aged out, discarded when the bucket was full, purged), a
reassembly of another length, or a whole whose SHA-256 differs from the reference's is a
``MessageError`` with the reason: the consumer dead-letters the reference with it, never drops it.
Only the server not answering (``LargePayloadUnavailable``) is retried as a transient failure.

Redelivery and republishing: an object is written completely before its reference is published,
so a reference is never seen before its object, and a redelivered reference reads the same object
again. Each object has a name of its own (kind, cluster, digest prefix and a random suffix), so an
object is never replaced while someone reads it; a message republished after a crash writes a new
object, whose reference the stream drops as a duplicate: that object is an orphan, left to the
bucket's age and byte limits.

Why not nats-py's ``ObjectStore.get``: it reads through an ordered push consumer (a consumer
created per object, flow control), 270 ms for a 5 MB object on this machine against 13-47 ms for
the direct gets here, and it waits forever for chunks that are gone instead of saying so.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectMeta, ObjectMetaOptions
from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.bus.settings import BusSettings
from shared.bus.streams import large_bucket, large_config, large_stream
from shared.schemas.codec import MessageError
from shared.schemas.limits import NATS_DEFAULT_MAX_PAYLOAD
from shared.schemas.subjects import Subjects

__all__ = [
    "LargePayloadUnavailable",
    "LargePayloads",
    "LargeRef",
    "is_reference",
    "parse_reference",
]

#: what a reference's JSON starts with (and no message of the pipeline does)
REFERENCE_PREFIX = b'{"hylo_large_payload":'
#: room left for the headers (message id, correlation, schema version, trace context) under
#: the server's max_payload
HEADROOM = 16 << 10
#: the smallest inline limit and chunk (a server announcing less than this is misconfigured)
MIN_INLINE = 4096
#: the transport errors that mean "the server did not answer": retried, not dead-lettered
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
)


class LargePayloadUnavailable(RuntimeError):
    """The server did not answer while a large payload was written or read: a transient failure
    (the message comes back), not a bad message."""


class LargeRef(BaseModel):
    """The reference a stream holds instead of a large payload (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    hylo_large_payload: Literal[1] = 1
    bucket: str = Field(pattern=r"^[A-Za-z0-9_-]{1,200}$")
    name: str = Field(pattern=r"^[-_=.A-Za-z0-9]{1,300}$")
    nuid: str = Field(pattern=r"^[A-Za-z0-9]{1,64}$")
    chunks: int = Field(ge=1, le=1_000_000)
    bytes: int = Field(ge=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


def is_reference(data: bytes | None) -> bool:
    """Whether ``data`` is a large payload's reference rather than a message."""
    return data is not None and data.startswith(REFERENCE_PREFIX)


def parse_reference(data: bytes) -> LargeRef:
    """The reference ``data`` holds; MessageError naming what is wrong."""
    try:
        return LargeRef.model_validate_json(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reference"
        raise MessageError(f"invalid large-payload reference: {where}: {first['msg']}") from None


def max_payload_of(js: JetStreamContext) -> int:
    """The connected server's ``max_payload`` (NATS' default before the first INFO)."""
    client = getattr(js, "_nc", None)
    value = getattr(client, "max_payload", 0)
    return int(value) if isinstance(value, int) and value > 0 else NATS_DEFAULT_MAX_PAYLOAD


@dataclass
class LargeStats:
    """Large payloads written and read by one process."""

    offloaded: int = 0
    offloaded_bytes: int = 0
    resolved: int = 0
    resolved_bytes: int = 0


class LargePayloads:
    """Writes and reads the large payloads of one subject root (module docstring).

    ``settings`` give the inline limit and chunk size (and, when the bucket is missing, how to
    create it); without them they are read from the environment and ``hylo.toml`` like every
    service's (``BusSettings()``), so a service's publisher and readers follow ``HYLO_LARGE_*``.
    """

    def __init__(self, js: JetStreamContext, subjects: Subjects, settings: BusSettings | None = None) -> None:
        self.js = js
        self.subjects = subjects
        self.settings = settings if settings is not None else BusSettings()
        self.bucket = large_bucket(subjects)
        self.stream = large_stream(subjects)
        self.stats = LargeStats()
        self._store = ObjectStore(name=self.bucket, stream=self.stream, js=js)

    # -- limits ---------------------------------------------------------------------------------

    def inline_max(self) -> int:
        """The largest encoding published as it is: the setting, at most the server's
        ``max_payload`` less ``HEADROOM``."""
        server = max(MIN_INLINE, max_payload_of(self.js) - HEADROOM)
        configured = self.settings.large_payload_bytes
        return max(MIN_INLINE, min(configured, server)) if configured else server

    def chunk_bytes(self) -> int:
        """The size of one chunk: the setting, at most the inline limit."""
        inline = self.inline_max()
        configured = self.settings.large_chunk_bytes
        return max(MIN_INLINE, min(configured, inline)) if configured else inline

    # -- writing --------------------------------------------------------------------------------

    async def offload(self, kind: str, cluster: str, payload: bytes) -> bytes:
        """Store ``payload`` as an object of its own and return the reference to publish instead.

        A missing bucket (streams created by an older Hylo) is created when the settings allow
        managing streams; LargePayloadUnavailable when the server does not answer."""
        digest = hashlib.sha256(payload).hexdigest()
        name = f"{kind}.{cluster}.{digest[:16]}.{secrets.token_hex(6)}"
        meta = ObjectMeta(name=name, options=ObjectMetaOptions(max_chunk_size=self.chunk_bytes()))
        try:
            info = await self._store.put(name, payload, meta=meta)
        except Exception as err:
            if not await self._created_missing_bucket():
                raise LargePayloadUnavailable(
                    f"writing a {len(payload):,}-byte {kind} message to {self.stream} failed: "
                    f"{type(err).__name__}: {err}"
                ) from err
            info = await self._store.put(name, payload, meta=meta)
        if info.chunks is None or info.nuid is None:
            raise LargePayloadUnavailable(f"{self.stream} did not describe the object {name} it stored")
        ref = LargeRef(
            bucket=self.bucket,
            name=name,
            nuid=info.nuid,
            chunks=max(1, int(info.chunks)),
            bytes=len(payload),
            sha256=digest,
        )
        self.stats.offloaded += 1
        self.stats.offloaded_bytes += len(payload)
        return ref.model_dump_json().encode()

    async def _created_missing_bucket(self) -> bool:
        """Create the bucket if it does not exist and this identity may; True if it was created."""
        try:
            await self.js.stream_info(self.stream)
            return False
        except NotFoundError:
            pass
        if not self.settings.nats_manage_streams:
            return False
        await self.js.add_stream(large_config(self.subjects, self.settings))
        return True

    # -- reading --------------------------------------------------------------------------------

    async def resolve(self, data: bytes, max_bytes: int) -> bytes:
        """The whole message ``data`` stands for: ``data`` itself, or the payload its reference names,
        reassembled and checked (module docstring). MessageError (a dead letter) if the reference is
        invalid, too large, not of this root, or its object is incomplete or corrupt;
        LargePayloadUnavailable if the server does not answer."""
        if not is_reference(data):
            return data
        ref = parse_reference(data)
        what = f"large payload {ref.name}"
        if ref.bucket != self.bucket:
            raise MessageError(f"{what}: in bucket {ref.bucket}, not this subject root's {self.bucket}")
        if ref.bytes > max_bytes:
            raise MessageError(
                f"{what}: {ref.bytes} bytes, more than the limit of {max_bytes} bytes "
                "(raise it with HYLO_MAX_MESSAGE_BYTES)"
            )
        if ref.chunks > -(-ref.bytes // MIN_INLINE):  # every chunk but the last holds MIN_INLINE or more
            raise MessageError(
                f"{what}: {ref.chunks} chunks for {ref.bytes} bytes, more than chunks of "
                f"{MIN_INLINE} bytes or more need"
            )
        whole = await self._read_chunks(ref, what)
        digest = hashlib.sha256(whole).hexdigest()
        if digest != ref.sha256:
            raise MessageError(
                f"{what}: corrupt: the {len(whole)} reassembled bytes have sha256 {digest[:16]}..., "
                f"the reference says {ref.sha256[:16]}..."
            )
        self.stats.resolved += 1
        self.stats.resolved_bytes += len(whole)
        return whole

    async def _read_chunks(self, ref: LargeRef, what: str) -> bytes:
        """The object's chunks in order (direct gets, each the next message of its chunk subject),
        at most ``ref.bytes`` of them in all."""
        subject = f"$O.{self.bucket}.C.{ref.nuid}"
        parts: list[bytes] = []
        got, seq = 0, 1
        for i in range(ref.chunks):
            try:
                raw = await self.js.get_msg(self.stream, seq=seq, subject=subject, next=True, direct=True)
            except NotFoundError:
                raise MessageError(
                    f"{what}: chunk {i + 1} of {ref.chunks} is missing from {self.stream} (aged out or "
                    "discarded: the bucket keeps HYLO_STREAM_MAX_AGE_S and its share of "
                    "HYLO_STREAM_ROOT_MAX_BYTES)"
                ) from None
            except TRANSPORT_ERRORS as err:
                await self._bucket_exists(what)
                raise LargePayloadUnavailable(f"{what}: reading chunk {i + 1} failed: {err!r}") from err
            chunk = raw.data or b""
            got += len(chunk)
            if got > ref.bytes:
                raise MessageError(f"{what}: its chunks hold more than the {ref.bytes} bytes referenced")
            parts.append(chunk)
            seq = int(raw.seq or seq) + 1
        if got != ref.bytes:
            raise MessageError(
                f"{what}: {got} bytes reassembled from {ref.chunks} chunks, expected {ref.bytes}"
            )
        return b"".join(parts)

    async def _bucket_exists(self, what: str) -> None:
        """MessageError if the bucket itself is gone (a direct get then has no responder, which is
        otherwise how a server that does not answer looks)."""
        try:
            await self.js.stream_info(self.stream)
        except NotFoundError:
            raise MessageError(f"{what}: the bucket's stream {self.stream} does not exist") from None
        except Exception:  # the server does not answer either: transient, the caller says so
            return
