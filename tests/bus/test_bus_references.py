"""A PriorityVector names its FeatureMatrix by reference: the consumer fetches one not at hand."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from shared.bus import Consumer
from shared.bus.ahead import fetch_stored
from shared.schemas import FeatureMatrix, MatrixRef, MissingReference, PriorityVector, encode
from tests.bus.bus_helpers import Recorder, dead_letters, process_until, wait_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, priorities, snapshot

pytestmark = pytest.mark.asyncio


def fresh_matrix(correlation_id: str) -> FeatureMatrix:
    """A matrix this process never decoded (so no ``ReceivedJson`` entry pairs a vector with it)."""
    return features(snapshot().model_copy(update={"correlation_id": correlation_id}))


async def test_a_vector_whose_matrix_was_not_decoded_ahead_reads_it_from_the_stream(bus: Bus) -> None:
    matrix = fresh_matrix("fetched")
    stored = await bus.publisher.publish(matrix)
    digest = hashlib.sha256(encode(matrix, bus.limits)).hexdigest()
    named = priorities(matrix).model_copy(update={"matrix_ref": MatrixRef(seq=stored.seq, sha256=digest)})
    await bus.publisher.publish(named)
    # the same seq but another digest (a stream re-created since): not the matrix named
    wrong = fresh_matrix("wrong")
    await bus.publisher.publish(
        priorities(wrong).model_copy(update={"matrix_ref": MatrixRef(seq=stored.seq, sha256="cd" * 32)})
    )
    # a sequence the stream does not hold (expired)
    gone = fresh_matrix("gone")
    await bus.publisher.publish(
        priorities(gone).model_copy(update={"matrix_ref": MatrixRef(seq=999, sha256="ef" * 32)})
    )
    fetched: list[int] = []

    async def fetch(missing: MissingReference) -> bool:
        fetched.append(missing.seq)
        return await fetch_stored(bus.js, bus.subjects, FeatureMatrix, missing, bus.limits)

    rec: Recorder[PriorityVector] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="priorities",
        model=PriorityVector,
        durable="placer",
        handler=rec,
        settings=bus.settings,
        fetch_missing=fetch,
    )
    await process_until([consumer], lambda: len(rec.seen) + consumer.stats.dead_lettered == 3)
    [(got, _)] = rec.seen
    assert got.matrix == matrix and got.priorities == named.priorities and got.matrix_ref == named.matrix_ref
    assert sorted(fetched) == [stored.seq, stored.seq, 999] and consumer.stats.fetched_references == 1
    letters = await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 2)
    reasons = sorted(letter.reason for letter in letters)
    assert "is not at hand; fetched from its stream" in reasons[0] and "another message" in reasons[0]
    assert "features stream sequence 999" in reasons[1] and reasons[1].endswith("nor in its stream")


async def test_without_a_fetcher_a_vector_naming_an_unknown_matrix_is_dead_lettered(bus: Bus) -> None:
    matrix = fresh_matrix("nofetch")
    stored = await bus.publisher.publish(matrix)
    digest = hashlib.sha256(encode(matrix, bus.limits)).hexdigest()
    await bus.publisher.publish(
        priorities(matrix).model_copy(update={"matrix_ref": MatrixRef(seq=stored.seq, sha256=digest)})
    )
    rec: Recorder[PriorityVector] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="priorities",
        model=PriorityVector,
        durable="other-reader",
        handler=rec,
        settings=bus.settings,
    )
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 1)
    assert f"features stream sequence {stored.seq}" in letter.reason and "is not at hand" in letter.reason
    assert not rec.seen


async def test_a_fetch_the_server_does_not_answer_is_retried_then_dead_lettered(bus: Bus) -> None:
    matrix = fresh_matrix("unanswered")
    stored = await bus.publisher.publish(matrix)
    digest = hashlib.sha256(encode(matrix, bus.limits)).hexdigest()
    await bus.publisher.publish(
        priorities(matrix).model_copy(update={"matrix_ref": MatrixRef(seq=stored.seq, sha256=digest)})
    )
    tries: list[int] = []

    async def unreachable(missing: MissingReference) -> bool:
        tries.append(missing.seq)
        raise TimeoutError("no answer from the server")

    rec: Recorder[PriorityVector] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="priorities",
        model=PriorityVector,
        durable="placer",
        handler=rec,
        settings=bus.settings,
        fetch_missing=unreachable,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        await wait_until(lambda: consumer.stats.dead_lettered == 1, timeout_s=15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    # redelivered after each unanswered try (the ack wait), dead-lettered at the last delivery
    assert tries == [stored.seq] * bus.settings.max_deliver and not rec.seen
    [letter] = await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 1)
    assert "fetching it failed: TimeoutError: no answer from the server" in letter.reason
