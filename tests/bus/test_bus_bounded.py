"""Decompression bombs through a real NATS server: each lands in the dead-letter subject with its
one-line reason, and the consumer goes on with the next message (issue 20, "Bounded resources")."""

from __future__ import annotations

import json

import pytest

from shared.bus import Consumer
from shared.schemas import FeatureMatrix, PriorityVector, encode
from tests.bus.bus_helpers import Recorder, dead_letters, process_until
from tests.conftest_services import Bus
from tests.schemas.bombs import HUGE_COLS, HUGE_ROWS, matrix_bomb, packed_bomb
from tests.schemas.message_factories import features, priorities

pytestmark = pytest.mark.asyncio


async def test_bombs_are_dead_lettered_with_the_reason_and_the_consumer_goes_on(bus: Bus) -> None:
    """The bus fixture's limits: 256 KiB messages, 64 jobs. Each bomb below inflates to 150 MiB."""
    cases = [
        # 10^6 x 4096 declared: refused from the row count
        (
            matrix_bomb(inflates_to_mib=150),
            f"'rows' must be an integer in [0, 64] (max_jobs), got {HUGE_ROWS}",
        ),
        # within the row bound, but 64 x 4096 x 8 = 2 MiB from 1 kB: no deflate stream does that
        (
            matrix_bomb(rows=64, cols=HUGE_COLS, inflates_to_mib=1),
            "more than 1032 times as many (max_inflate_ratio)",
        ),
        # an honest-looking header whose stream inflates further: cut at the 2 MiB it declared
        (
            matrix_bomb(rows=64, cols=HUGE_COLS, inflates_to_mib=150),
            "does not hold exactly rows * cols values",
        ),
    ]
    subject = bus.subjects.of("c1", "features")
    for payload, _ in cases:
        assert len(payload) < bus.limits.max_message_bytes
        await bus.js.publish(subject, payload)
    valid = features()
    await bus.publisher.publish(valid)
    rec: Recorder[FeatureMatrix] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="features",
        model=FeatureMatrix,
        durable="placer",
        handler=rec,
        settings=bus.settings,
    )
    await process_until([consumer], lambda: len(rec.seen) == 1)
    assert [m for m, _ in rec.seen] == [valid]
    assert consumer.stats.dead_lettered == len(cases) and consumer.stats.handler_errors == 0
    letters = {
        letter.stream_seq: letter for letter in await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 3)
    }
    assert sorted(letters) == [1, 2, 3]
    for seq, (payload, fragment) in enumerate(cases, start=1):
        letter = letters[seq]
        assert letter.reason.startswith("invalid FeatureMatrix: values: Value error, packed float table: ")
        assert fragment in letter.reason and "\n" not in letter.reason
        assert letter.errors[0].loc == "values" and fragment in letter.errors[0].msg
        assert letter.stage == "placer" and letter.original_subject == subject
        assert letter.payload_bytes == len(payload)


async def test_a_bomb_nested_in_a_priority_vector_is_dead_lettered(bus: Bus) -> None:
    vector = json.loads(encode(priorities(), bus.limits))
    vector["matrix"]["values"] = packed_bomb(HUGE_ROWS, HUGE_COLS, inflates_to_mib=150)
    await bus.js.publish(bus.subjects.of("c1", "priorities"), json.dumps(vector).encode())
    rec: Recorder[PriorityVector] = Recorder()
    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="priorities",
        model=PriorityVector,
        durable="placer",
        handler=rec,
        settings=bus.settings,
    )
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1)
    [letter] = await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 1)
    assert letter.reason.startswith(
        "invalid PriorityVector: matrix.values: Value error, packed float table: "
    )
    assert "(max_jobs)" in letter.reason and not rec.seen
