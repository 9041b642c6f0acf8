"""The snapshots a stage needs beside the message it handles: recent ones in memory, else from the stream.

Why: a FeatureMatrix does not carry its QueueSnapshot (``shared.schemas.messages``), because re-sending
thousands of running jobs and nodes at every hop cost more than any stage's own work. The placer
needs every snapshot it places against, so it keeps the recent ones: a plain (core NATS)
subscription on the snapshots subjects hands every published snapshot to every placer replica as it
is published, in parallel with the featurizer, and the newest snapshot of each cluster is decoded
while the placer waits for its priorities. A snapshot not in memory (the replica started after it
was published, or it was evicted) is read from the snapshots stream by its sequence
(``FeatureMatrix.snapshot_seq``); that stream keeps only the newest snapshot of each cluster, so a
superseded one may be gone: ``get`` then returns None and the caller treats the message as stale
(latest wins, as for snapshots themselves).

Every snapshot is validated exactly as the featurizer validated it (``decode`` under the same
limits) and must carry the correlation id asked for.

``prepare`` (optional) is run on each snapshot decoded ahead, and its result handed out once by
``take_prepared``: the placer builds the cluster state and the running jobs' release profile of a
snapshot there, while the featurizer and the prioritizer work, so that only the walk over the ranked
queue is left when the priorities arrive.

A snapshot larger than one NATS message arrives as a reference to the object store (``shared.bus
.large``); the cache keeps the reference and reads the snapshot back (checking its digest) when it
decodes it, ahead or on demand.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from shared.bus.large import LargePayloads, LargePayloadUnavailable
from shared.bus.publisher import HEADER_CORRELATION
from shared.bus.streams import stream_name
from shared.schemas.codec import MessageError, decode
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.subjects import SubjectError, Subjects

__all__ = ["SnapshotCache", "SnapshotCacheStats"]

log = logging.getLogger("hylo.bus.snapshots")


@dataclass
class SnapshotCacheStats:
    """How requests were served: from memory, decoded on demand, read from the stream, or missing."""

    received: int = 0
    decoded_ahead: int = 0
    prepared_ahead: int = 0
    hits: int = 0
    decoded_on_demand: int = 0
    fetched: int = 0
    missing: int = 0
    invalid: int = 0
    prepare_failed: int = 0


@dataclass
class _Entry:
    raw: bytes | None
    snapshot: QueueSnapshot | None = None
    prepared: Any = None
    #: set while the snapshot is read and decoded (a large one is read from the object store first)
    decoding: asyncio.Event | None = None


@dataclass
class _Cluster:
    entries: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)


class SnapshotCache:
    """Recent snapshots by (cluster, correlation id); ``start`` subscribes, ``get`` looks one up.

    ``per_cluster``: how many recent snapshots of each cluster are kept (raw bytes; the newest is
    decoded ahead while ``decode_ahead()`` says so, always by default; the prioritizer decodes ahead
    only while a model is loaded). Without ``start`` the cache only reads from the stream.
    """

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        subjects: Subjects,
        limits: Limits | None = None,
        per_cluster: int = 4,
        decode_ahead: Callable[[], bool] | None = None,
        prepare: Callable[[QueueSnapshot], Any] | None = None,
        large: LargePayloads | None = None,
        accept: Callable[[str], bool] | None = None,
    ) -> None:
        if per_cluster < 1:
            raise ValueError("per_cluster must be >= 1")
        self.nc = nc
        self.js = js
        self.subjects = subjects
        self.limits = limits_or_configured(limits)
        self.large = large or LargePayloads(js, subjects)
        self.per_cluster = per_cluster
        self.decode_ahead = decode_ahead or (lambda: True)
        self.prepare = prepare
        #: the clusters whose snapshots are kept as they arrive (the replica's own, when the stage's
        #: replicas split the clusters: ``shared.service.shards``); the others are read on demand
        self.accept = accept or (lambda cluster: True)
        self.stats = SnapshotCacheStats()
        self._clusters: dict[str, _Cluster] = {}
        self._sub: Subscription | None = None
        self._ahead: asyncio.Task[None] | None = None
        self._stream = stream_name(subjects, "snapshots")

    async def start(self) -> None:
        """Receive every snapshot published from now on (core NATS: no consumer state on the server)."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(self.subjects.all_clusters("snapshots"), cb=self._on_msg)

    async def receive(self, on: bool) -> None:
        """Receive snapshots as they are published (``on``) or stop (and forget those kept).

        Why: every snapshot is 0.5-1 MB on a big cluster, and each subscriber costs the server a copy
        and its own process the reading, on the cores the pipeline shares. A cache that decodes
        nothing ahead (the prioritizer without a model) only needs the rare snapshot on demand, which
        ``get`` reads from the stream.
        """
        if on:
            await self.start()
            return
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        self._clusters.clear()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None
        if self._ahead is not None:
            self._ahead.cancel()
            self._ahead = None

    # -- filling ---------------------------------------------------------------------------------

    async def _on_msg(self, msg: Msg) -> None:
        correlation = (msg.headers or {}).get(HEADER_CORRELATION)
        try:
            cluster, _ = self.subjects.parse(msg.subject)
        except SubjectError:
            return
        if not correlation:
            return  # not published by a Hylo publisher: the stream fallback still finds it
        if not self.accept(cluster):
            self._clusters.pop(cluster, None)  # another replica's now: forget what was kept
            return
        self.stats.received += 1
        entries = self._clusters.setdefault(cluster, _Cluster()).entries
        entries[correlation] = _Entry(raw=msg.data)
        entries.move_to_end(correlation)
        while len(entries) > self.per_cluster:
            entries.popitem(last=False)
        if self.decode_ahead() and (self._ahead is None or self._ahead.done()):
            self._ahead = asyncio.get_running_loop().create_task(self._decode_newest())

    async def _decode_newest(self) -> None:
        """Decode the newest undecoded snapshot of each cluster, yielding between clusters."""
        for cluster, state in list(self._clusters.items()):
            if not state.entries:
                continue
            correlation, entry = next(reversed(state.entries.items()))
            if (
                entry.snapshot is None
                and entry.raw is not None
                and await self._decode(cluster, correlation, entry) is not None
            ):
                self.stats.decoded_ahead += 1
                await asyncio.sleep(0)  # a message that arrived meanwhile goes first
                self._prepare(entry)
            await asyncio.sleep(0)

    def _prepare(self, entry: _Entry) -> None:
        if self.prepare is None or entry.snapshot is None or entry.prepared is not None:
            return
        try:
            entry.prepared = self.prepare(entry.snapshot)
        except Exception as err:  # the handler prepares again on demand and reports the error there
            self.stats.prepare_failed += 1
            log.debug("preparing snapshot %s failed: %s", entry.snapshot.correlation_id, err)
            return
        self.stats.prepared_ahead += 1

    async def _decode(self, cluster: str, correlation: str, entry: _Entry) -> QueueSnapshot | None:
        raw, entry.raw = entry.raw, None
        if raw is None:
            if entry.decoding is not None:  # being read already: wait for it, do not read it twice
                await entry.decoding.wait()
            return entry.snapshot
        entry.decoding = asyncio.Event()
        try:
            snapshot = await self._checked(raw, cluster, correlation)
            entry.snapshot = snapshot
        finally:
            entry.decoding.set()
            entry.decoding = None
        return snapshot

    async def _checked(self, raw: bytes, cluster: str, correlation: str) -> QueueSnapshot | None:
        try:
            whole = await self.large.resolve(raw, self.limits.max_message_bytes)
            snapshot = decode(QueueSnapshot, whole, self.limits)
        except (MessageError, LargePayloadUnavailable) as err:
            self.stats.invalid += 1
            log.warning("snapshot %s of %s is unusable: %s", correlation, cluster, err)
            return None
        if snapshot.cluster != cluster or snapshot.correlation_id != correlation:
            self.stats.invalid += 1
            log.warning(
                "snapshot %s/%s found where %s/%s was expected",
                snapshot.cluster,
                snapshot.correlation_id,
                cluster,
                correlation,
            )
            return None
        return snapshot

    # -- lookup ----------------------------------------------------------------------------------

    def take_prepared(self, cluster: str, correlation_id: str) -> Any:
        """What ``prepare`` made of the snapshot, once (None if it was not prepared ahead)."""
        entry = self._clusters.get(cluster, _Cluster()).entries.get(correlation_id)
        if entry is None:
            return None
        prepared, entry.prepared = entry.prepared, None
        return prepared

    async def get(self, cluster: str, correlation_id: str, stream_seq: int | None) -> QueueSnapshot | None:
        """The snapshot of ``cluster`` with ``correlation_id``; None if it is nowhere to be had."""
        entry = self._clusters.get(cluster, _Cluster()).entries.get(correlation_id)
        if entry is not None:
            if entry.snapshot is not None:
                self.stats.hits += 1
                return entry.snapshot
            if entry.raw is not None or entry.decoding is not None:
                self.stats.decoded_on_demand += 1
                return await self._decode(cluster, correlation_id, entry)
        if stream_seq is None:
            self.stats.missing += 1
            return None
        try:
            stored = await self.js.get_msg(self._stream, seq=stream_seq)
        except NotFoundError:  # superseded (the stream keeps the newest per cluster) or expired
            self.stats.missing += 1
            return None
        if stored.data is None:
            self.stats.missing += 1
            return None
        self.stats.fetched += 1
        return await self._checked(stored.data, cluster, correlation_id)
