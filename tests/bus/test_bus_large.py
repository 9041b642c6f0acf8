"""Messages larger than one NATS message (issue 22, item 2): stored in the JetStream object store, a
reference in the stream, read back and checked by every reader; a missing or corrupt chunk is a
dead letter with the reason, never a silent drop. Real NATS (the bus suite's private server, whose
max_payload is NATS' default 1 MiB); the inline limit is lowered to 8 KiB so that small messages
travel in several chunks.
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from shared.bus import BusSettings, Consumer, LargePayloads, Publisher, stream_name
from shared.bus.ahead import DecodeAhead, fetch_stored
from shared.bus.large import is_reference, parse_reference
from shared.bus.snapshots import SnapshotCache
from shared.bus.streams import large_bucket, large_stream
from shared.schemas import FeatureMatrix, Limits, QueueSnapshot, configured_limits, encode
from shared.schemas.codec import RECEIVED, MissingReference
from tests.bus.bus_helpers import Recorder, dead_letters, process_until, wait_all_acked, wait_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, snapshot

pytestmark = pytest.mark.asyncio

LIMITS = Limits(max_message_bytes=4 << 20, max_jobs=10_000)
INLINE, CHUNK = 8192, 4096


def large_publisher(bus: Bus, limits: Limits = LIMITS) -> Publisher:
    """A publisher (and, through it, consumers) whose inline limit is 8 KiB, chunks 4 KiB."""
    settings = bus.settings.model_copy(update={"large_payload_bytes": INLINE, "large_chunk_bytes": CHUNK})
    return Publisher(bus.js, bus.subjects, limits, large=LargePayloads(bus.js, bus.subjects, settings))


def snapshot_consumer(
    bus: Bus, publisher: Publisher, recorder: Recorder[QueueSnapshot]
) -> Consumer[QueueSnapshot]:
    return Consumer(
        bus.js,
        publisher,
        kind="snapshots",
        model=QueueSnapshot,
        durable="featurizer",
        handler=recorder,
        settings=bus.settings,
        latest_wins=True,
    )


async def stored_reference(bus: Bus, seq: int) -> bytes:
    stored = await bus.js.get_msg(stream_name(bus.subjects, "snapshots"), seq)
    assert stored.data is not None
    return stored.data


async def chunk_seqs(bus: Bus, nuid: str, count: int) -> list[int]:
    subject = f"$O.{large_bucket(bus.subjects)}.C.{nuid}"
    seqs, seq = [], 1
    for _ in range(count):
        raw = await bus.js.get_msg(
            large_stream(bus.subjects), seq=seq, subject=subject, next=True, direct=True
        )
        assert raw.seq is not None
        seqs.append(raw.seq)
        seq = raw.seq + 1
    return seqs


async def test_a_snapshot_larger_than_the_inline_limit_travels_as_a_reference_and_decodes_whole(
    bus: Bus,
) -> None:
    publisher = large_publisher(bus)
    sent = snapshot(correlation_id="big", n_jobs=2000)
    whole = encode(sent, LIMITS)
    result = await publisher.publish(sent)
    data = await stored_reference(bus, result.seq)
    ref = parse_reference(data)
    assert is_reference(data) and len(data) < 400 < INLINE < len(whole)
    assert (ref.bytes, ref.chunks) == (len(whole), -(-len(whole) // CHUNK))
    assert ref.bucket == large_bucket(bus.subjects)

    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, publisher, recorder)
    await process_until([consumer], lambda: len(recorder.seen) == 1)
    got, delivery = recorder.seen[0]
    assert encode(got, LIMITS) == whole and got.pending.job_id == sent.pending.job_id
    assert delivery.stream_seq == result.seq and consumer.stats.dead_lettered == 0
    # the object store's own reader (nats-py) reads the same object: the layout is the object store's
    store = await bus.js.object_store(ref.bucket)
    assert (await store.get(ref.name)).data == whole

    # a small message still travels inline
    small = await publisher.publish(snapshot(correlation_id="small", sequence=2))
    assert not is_reference(await stored_reference(bus, small.seq))
    await process_until([consumer], lambda: len(recorder.seen) == 2)


async def test_a_republished_large_message_is_stored_once(bus: Bus) -> None:
    """A publisher that crashed after publishing publishes again: the second reference carries the
    same message id and is dropped by the stream; its object is an orphan, nobody reads it."""
    publisher = large_publisher(bus)
    sent = snapshot(correlation_id="again", n_jobs=1500)
    first = await publisher.publish(sent)
    second = await publisher.publish(sent)
    assert second.duplicate and second.seq == first.seq
    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, publisher, recorder)
    await process_until([consumer], lambda: len(recorder.seen) == 1)
    await consumer.process_batch(timeout_s=0.3)
    assert len(recorder.seen) == 1 and publisher.large.stats.offloaded == 2


async def test_a_missing_chunk_is_a_dead_letter_with_the_reason(bus: Bus) -> None:
    publisher = large_publisher(bus)
    result = await publisher.publish(snapshot(correlation_id="holed", n_jobs=2000))
    ref = parse_reference(await stored_reference(bus, result.seq))
    seqs = await chunk_seqs(bus, ref.nuid, ref.chunks)
    await bus.js.delete_msg(large_stream(bus.subjects), seqs[-1])  # the last chunk is gone

    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, publisher, recorder)
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), 1)
    assert f"chunk {ref.chunks} of {ref.chunks} is missing from {large_stream(bus.subjects)}" in letter.reason
    assert letter.stage == "featurizer" and letter.stream_seq == result.seq and "\n" not in letter.reason
    assert letter.correlation_id == "holed" and recorder.seen == []
    await wait_all_acked(bus.js, stream_name(bus.subjects, "snapshots"), "featurizer")


async def test_a_corrupt_chunk_is_a_dead_letter_with_the_reason(bus: Bus) -> None:
    """Chunk 2 replaced by zeros of the same length, every chunk still in order: the reassembled
    payload has the right length but not the referenced sha256."""
    publisher = large_publisher(bus)
    result = await publisher.publish(snapshot(correlation_id="forged", n_jobs=2000))
    ref = parse_reference(await stored_reference(bus, result.seq))
    seqs = await chunk_seqs(bus, ref.nuid, ref.chunks)
    stream = large_stream(bus.subjects)
    chunks = []
    for seq in seqs:
        raw = await bus.js.get_msg(stream, seq, direct=True)
        assert raw.data is not None
        chunks.append(raw.data)
    for seq in seqs[1:]:
        await bus.js.delete_msg(stream, seq)
    subject = f"$O.{ref.bucket}.C.{ref.nuid}"
    for data in [bytes(len(chunks[1])), *chunks[2:]]:
        await bus.js.publish(subject, data)

    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, publisher, recorder)
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), 1)
    assert (
        f"large payload {ref.name}: corrupt: the {ref.bytes} reassembled bytes have sha256" in letter.reason
    )
    assert recorder.seen == []


async def test_a_reference_larger_than_the_message_limit_is_refused_unread(bus: Bus) -> None:
    publisher = large_publisher(bus)
    result = await publisher.publish(snapshot(correlation_id="huge", n_jobs=2000))
    small_limits = Limits(max_message_bytes=16 << 10, max_jobs=10_000)
    reader = large_publisher(bus, small_limits)
    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, reader, recorder)
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), 1)
    assert "more than the limit of 16384 bytes (raise it with HYLO_MAX_MESSAGE_BYTES)" in letter.reason
    assert letter.stream_seq == result.seq and reader.large.stats.resolved == 0


async def test_a_snapshot_over_the_configured_job_limit_is_dead_lettered_naming_the_setting(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22, item 1: the limit is a setting (HYLO_MAX_JOBS); a snapshot over it is a dead letter
    whose reason names the limit and the setting, one under it is handled."""
    publisher = large_publisher(bus)
    await publisher.publish(snapshot(correlation_id="five-thousand", n_jobs=5000))
    strict = large_publisher(bus, Limits(max_message_bytes=4 << 20, max_jobs=4096))
    recorder: Recorder[QueueSnapshot] = Recorder()
    consumer = snapshot_consumer(bus, strict, recorder)
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), 1)
    assert (
        "pending holds 5000 entries, more than the limit of 4096 (max_jobs; raise it with HYLO_MAX_JOBS)"
        in letter.reason
    )
    # the default (100,000) takes it; the settings are what validation without limits reads
    monkeypatch.setenv("HYLO_MAX_JOBS", "6000")
    configured_limits.cache_clear()
    try:
        assert BusSettings().max_jobs == 6000 and configured_limits().max_jobs == 6000
        roomy = large_publisher(bus, configured_limits().model_copy(update={"max_message_bytes": 4 << 20}))
        await roomy.publish(snapshot(correlation_id="again", sequence=2, n_jobs=5000))
        ok = snapshot_consumer(bus, roomy, recorder)
        await process_until([ok], lambda: len(recorder.seen) == 1)
        monkeypatch.setenv("HYLO_MAX_JOBS", "10")
        configured_limits.cache_clear()
        with pytest.raises(
            ValueError, match=r"more than the limit of 10 \(max_jobs; raise it with HYLO_MAX_JOBS\)"
        ):
            snapshot(n_jobs=11)  # built without a context: the configured limits apply
    finally:
        monkeypatch.delenv("HYLO_MAX_JOBS")
        configured_limits.cache_clear()


async def test_a_large_matrix_is_decoded_ahead_and_fetched_by_sequence(bus: Bus) -> None:
    """The placer's paths: decode-ahead (core subscription) reads the object when its turn comes or
    when a vector names it; a matrix fetched from its stream by sequence is read back too, and the
    digest a vector names is the whole matrix's."""
    publisher = large_publisher(bus)
    matrix = features(snapshot(correlation_id="m", n_jobs=1500))
    whole = encode(matrix, LIMITS)
    digest = hashlib.sha256(whole).hexdigest()
    ahead = DecodeAhead(bus.nc, bus.subjects, "features", FeatureMatrix, LIMITS, large=publisher.large)
    await ahead.start()
    try:
        result = await publisher.publish(matrix)
        await wait_until(lambda: ahead.stats.decoded == 1)
        assert RECEIVED.with_digest(digest, FeatureMatrix, LIMITS) is not None
    finally:
        await ahead.close()
    missing = MissingReference("not at hand", "features", result.seq, digest)
    assert await fetch_stored(bus.js, bus.subjects, FeatureMatrix, missing, LIMITS, publisher.large)
    wrong = MissingReference("not at hand", "features", result.seq, "0" * 64)
    with pytest.raises(Exception, match="another message"):
        await fetch_stored(bus.js, bus.subjects, FeatureMatrix, wrong, LIMITS, publisher.large)


async def test_the_snapshot_cache_reads_large_snapshots_ahead_and_from_the_stream(bus: Bus) -> None:
    publisher = large_publisher(bus)
    cache = SnapshotCache(bus.nc, bus.js, bus.subjects, LIMITS, large=publisher.large)
    await cache.start()
    try:
        live = snapshot(correlation_id="live", n_jobs=1200)
        await publisher.publish(live)
        await wait_until(lambda: cache.stats.decoded_ahead == 1)
        got = await cache.get("c1", "live", None)
        assert got is not None and encode(got, LIMITS) == encode(live, LIMITS)
    finally:
        await cache.close()
    other = SnapshotCache(bus.nc, bus.js, bus.subjects, LIMITS, large=publisher.large)  # never received it
    stored = await publisher.publish(snapshot(correlation_id="later", sequence=2, n_jobs=1200))
    await asyncio.sleep(0)
    got = await other.get("c1", "later", stored.seq)
    assert got is not None and got.correlation_id == "later" and other.stats.fetched == 1
