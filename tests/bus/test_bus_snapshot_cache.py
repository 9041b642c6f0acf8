"""SnapshotCache against a real NATS server: snapshots in memory as published, else from the stream."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from shared.bus.ahead import DecodeAhead
from shared.bus.snapshots import SnapshotCache
from shared.schemas import FeatureMatrix, PriorityVector, QueueSnapshot, decode, encode
from shared.schemas.codec import RECEIVED, MissingReference
from shared.schemas.messages import MatrixRef
from tests.bus.bus_helpers import wait_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, priorities, snapshot

pytestmark = pytest.mark.asyncio


async def test_published_snapshots_are_held_and_decoded_ahead(bus: Bus) -> None:
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, bus.limits, per_cluster=2)
    await cache.start()
    try:
        sent = [snapshot(cluster="c1", correlation_id=f"s{i}", sequence=i) for i in range(1, 4)]
        for s in sent:
            await bus.publisher.publish(s)
        await wait_until(lambda: cache.stats.received == 3)
        await wait_until(lambda: cache.stats.decoded_ahead >= 1)
        newest = await cache.get("c1", "s3", None)
        assert newest == sent[2] and cache.stats.hits == 1
        # s2 is held raw (only the newest is decoded ahead), s1 was evicted (2 per cluster)
        assert await cache.get("c1", "s2", None) == sent[1]
        assert cache.stats.decoded_on_demand + cache.stats.hits == 2
        assert await cache.get("c1", "s1", None) is None and cache.stats.missing == 1
        assert await cache.get("other", "s3", None) is None
    finally:
        await cache.close()


async def test_a_snapshot_not_in_memory_is_read_from_the_stream_by_sequence(bus: Bus) -> None:
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, bus.limits)  # never started: stream only
    first = snapshot(cluster="c1", correlation_id="a", sequence=1)
    ack = await bus.publisher.publish(first)
    got = await cache.get("c1", "a", ack.seq)
    assert got == first and cache.stats.fetched == 1
    # the stream keeps one snapshot per cluster: once superseded, the old one is gone
    await bus.publisher.publish(snapshot(cluster="c1", correlation_id="b", sequence=2))
    assert await cache.get("c1", "a", ack.seq) is None and cache.stats.missing == 1
    # a sequence that holds another snapshot is refused, not returned under the wrong id
    ack_c = await bus.publisher.publish(snapshot(cluster="c2", correlation_id="c", sequence=1))
    assert await cache.get("c2", "not-c", ack_c.seq) is None and cache.stats.invalid == 1


async def test_an_invalid_published_snapshot_is_never_returned(bus: Bus) -> None:
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, bus.limits)
    await cache.start()
    try:
        doc = json.loads(encode(snapshot(cluster="c1", correlation_id="bad", sequence=1)))
        doc["nodes"]["free_gpus"][0] = -1
        subject = bus.subjects.of("c1", "snapshots")
        await bus.nc.publish(subject, json.dumps(doc).encode(), headers={"Hylo-Correlation-Id": "bad"})
        await wait_until(lambda: cache.stats.received == 1)
        await asyncio.sleep(0.05)
        assert await cache.get("c1", "bad", None) is None and cache.stats.invalid == 1
    finally:
        await cache.close()


async def test_decoding_ahead_can_be_switched_off_and_on(bus: Bus) -> None:
    wanted = [False]
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, bus.limits, decode_ahead=lambda: wanted[0])
    await cache.start()
    try:
        first = snapshot(cluster="c1", correlation_id="a", sequence=1)
        await bus.publisher.publish(first)
        await wait_until(lambda: cache.stats.received == 1)
        await asyncio.sleep(0.05)
        assert cache.stats.decoded_ahead == 0
        assert await cache.get("c1", "a", None) == first and cache.stats.decoded_on_demand == 1
        wanted[0] = True  # e.g. the prioritizer loaded a model
        await bus.publisher.publish(snapshot(cluster="c1", correlation_id="b", sequence=2))
        await wait_until(lambda: cache.stats.decoded_ahead == 1)
    finally:
        await cache.close()


async def test_receiving_can_be_stopped_and_resumed(bus: Bus) -> None:
    """The prioritizer receives snapshots only while a model may need them; the stream still serves."""
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, bus.limits)
    await cache.receive(True)
    try:
        await bus.publisher.publish(snapshot(cluster="c1", correlation_id="a", sequence=1))
        await wait_until(lambda: cache.stats.received == 1)
        await cache.receive(False)  # forgets what it held
        late = snapshot(cluster="c1", correlation_id="b", sequence=2)
        ack = await bus.publisher.publish(late)
        await asyncio.sleep(0.1)
        assert cache.stats.received == 1
        assert await cache.get("c1", "a", None) is None
        assert await cache.get("c1", "b", ack.seq) == late and cache.stats.fetched == 1
        await cache.receive(True)
        await cache.receive(True)  # idempotent: one subscription
        await bus.publisher.publish(snapshot(cluster="c1", correlation_id="c", sequence=3))
        await wait_until(lambda: cache.stats.received == 2)
        await asyncio.sleep(0.1)
        assert cache.stats.received == 2
    finally:
        await cache.close()


async def test_matrices_decoded_as_published_spare_the_vector_decoding_them(bus: Bus) -> None:
    ahead = DecodeAhead(bus.nc, bus.subjects, "features", FeatureMatrix, bus.limits)
    await ahead.start()
    try:
        sent = features(snapshot(cluster="c1", correlation_id="m1"))
        await bus.publisher.publish(sent)
        await wait_until(lambda: ahead.stats.decoded == 1)
        raw = encode(sent, bus.limits)
        vector = priorities(sent)
        head = vector.__pydantic_serializer__.to_json(vector, exclude={"matrix"})
        got = decode(PriorityVector, head[:-1] + b',"matrix":' + raw + b"}", bus.limits)
        assert got == vector and RECEIVED.of(got.matrix) == raw  # the object decoded ahead
        await bus.nc.publish(bus.subjects.of("c1", "features"), b"{not json")
        await wait_until(lambda: ahead.stats.invalid == 1)
        with pytest.raises(ValueError, match="does not keep its received JSON"):
            DecodeAhead(bus.nc, bus.subjects, "snapshots", QueueSnapshot, bus.limits)
    finally:
        await ahead.close()


async def test_a_vector_naming_a_matrix_decoded_ahead_pairs_with_it(bus: Bus) -> None:
    ahead = DecodeAhead(bus.nc, bus.subjects, "features", FeatureMatrix, bus.limits)
    await ahead.start()
    try:
        sent = features(snapshot(cluster="c1", correlation_id="m2"))
        stored = await bus.publisher.publish(sent)
        await wait_until(lambda: ahead.stats.decoded == 1)
        raw = encode(sent, bus.limits)
        ref = MatrixRef(seq=stored.seq, sha256=hashlib.sha256(raw).hexdigest())
        data = encode(priorities(sent).model_copy(update={"matrix_ref": ref}), bus.limits)
        assert b'"matrix":' not in data
        got = decode(PriorityVector, data, bus.limits)
        assert got.matrix == sent and RECEIVED.of(got.matrix) == raw  # the object decoded ahead
        # one still waiting to be decoded when its vector comes is decoded at once, on demand
        ahead._waiting["c1"] = encode(later := features(snapshot(cluster="c1", correlation_id="m3")))
        ref = MatrixRef(seq=stored.seq + 1, sha256=hashlib.sha256(ahead._waiting["c1"]).hexdigest())
        data = encode(priorities(later).model_copy(update={"matrix_ref": ref}), bus.limits)
        with pytest.raises(MissingReference):
            decode(PriorityVector, data, bus.limits)
        ahead.decode_waiting()
        assert decode(PriorityVector, data, bus.limits).matrix == later and not ahead._waiting
    finally:
        await ahead.close()


async def test_matrices_wait_raw_while_decoding_ahead_is_off_and_only_the_named_one_is_decoded(
    bus: Bus,
) -> None:
    """``placer_decode_ahead=idle``: a busy replica leaves matrices raw; a vector naming one decodes
    that one alone (the others may be another replica's, or superseded before anyone needs them)."""
    busy = [True]
    ahead = DecodeAhead(
        bus.nc, bus.subjects, "features", FeatureMatrix, bus.limits, decode_ahead=lambda: not busy[0]
    )
    await ahead.start()
    try:
        sent = {c: features(snapshot(cluster=c, correlation_id=f"w-{c}")) for c in ("c1", "c2", "c3")}
        for matrix in sent.values():
            await bus.publisher.publish(matrix)
        await wait_until(lambda: ahead.stats.received == 3)
        await asyncio.sleep(0.1)
        assert ahead.stats.decoded == 0 and len(ahead._waiting) == 3
        ahead.decode_waiting(hashlib.sha256(encode(sent["c2"], bus.limits)).hexdigest())
        assert ahead.stats.decoded == 1 and set(ahead._waiting) == {"c1", "c3"}
        busy[0] = False  # idle again: the next arrival drains what waits
        await bus.publisher.publish(features(snapshot(cluster="c4", correlation_id="w-c4")))
        await wait_until(lambda: ahead.stats.decoded == 4)
        assert not ahead._waiting
    finally:
        await ahead.close()
