"""The consumer waits for a dependency that is down: NAK with back-off for the retry window, then a
dead letter; a bad message still gets only ``max_deliver`` tries."""

from __future__ import annotations

import pytest

from shared.bus import Consumer, Delivery, stream_name
from shared.bus.settings import BusSettings, retry_delays
from shared.schemas import JobOutcome
from tests.bus.bus_helpers import dead_letters, process_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import outcome


class StoreDown(ConnectionRefusedError):
    """What the handler raises while its dependency is away (stands for a refused connection)."""


def _consumer(bus: Bus, handler: object, settings: BusSettings, durable: str = "rec") -> Consumer[JobOutcome]:
    return Consumer(
        bus.js,
        bus.publisher,
        kind="outcomes",
        model=JobOutcome,
        durable=durable,
        handler=handler,  # type: ignore[arg-type]
        settings=settings,
        transient=lambda err: isinstance(err, StoreDown),
    )


def test_retry_delays_double_up_to_the_cap_and_cover_the_window() -> None:
    settings = BusSettings(retry_window_s=900.0, retry_backoff_s=0.5, retry_backoff_max_s=5.0)
    delays = retry_delays(settings)
    assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert max(delays) == 5.0
    assert sum(delays) >= 900.0 > sum(delays[:-1])


@pytest.mark.asyncio
async def test_a_dependency_down_longer_than_max_deliver_is_waited_for(bus: Bus) -> None:
    settings = bus.settings.model_copy(
        update={"retry_window_s": 30.0, "retry_backoff_s": 0.02, "retry_backoff_max_s": 0.1}
    )
    tries: list[int] = []

    async def handler(message: JobOutcome, delivery: Delivery) -> None:
        tries.append(delivery.num_delivered)
        if len(tries) <= 3 * settings.max_deliver:  # down for three times max_deliver (3) deliveries
            raise StoreDown("connection refused")

    consumer = _consumer(bus, handler, settings)
    await consumer.start()
    info = await bus.js.consumer_info(stream_name(bus.subjects, "outcomes"), "rec")
    assert info.config.max_deliver == consumer.attempts + 1 > 3 * settings.max_deliver
    await bus.publisher.publish(outcome(job_id="j1"))
    await process_until([consumer], lambda: consumer.stats.handled == 1, timeout_s=20)
    assert tries == list(range(1, 3 * settings.max_deliver + 2))
    assert consumer.stats.dead_lettered == 0 and consumer.stats.retried == 3 * settings.max_deliver
    assert consumer.stats.unavailable is None  # back: a message went through


@pytest.mark.asyncio
async def test_past_the_retry_window_the_message_is_dead_lettered_with_the_reason(bus: Bus) -> None:
    settings = bus.settings.model_copy(
        update={"retry_window_s": 0.3, "retry_backoff_s": 0.05, "retry_backoff_max_s": 0.1}
    )

    async def handler(message: JobOutcome, delivery: Delivery) -> None:
        raise StoreDown("connection refused")

    consumer = _consumer(bus, handler, settings)
    await bus.publisher.publish(outcome(job_id="j1"))
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1, timeout_s=20)
    [letter] = await dead_letters(bus.js, bus.subjects.of("c1", "dead"), 1)
    n = consumer.attempts
    assert letter.deliveries == n and letter.stage == "rec"
    assert (
        letter.reason == f"unavailable for {n} deliveries (retry window 0.3 s): StoreDown: connection refused"
    )


@pytest.mark.asyncio
async def test_a_bad_message_still_gets_max_deliver_tries(bus: Bus) -> None:
    settings = bus.settings.model_copy(update={"retry_window_s": 60.0})
    tries: list[int] = []

    async def handler(message: JobOutcome, delivery: Delivery) -> None:
        tries.append(delivery.num_delivered)
        raise ValueError("a column refuses the value")

    consumer = _consumer(bus, handler, settings)
    await bus.publisher.publish(outcome(job_id="j1"))
    await process_until([consumer], lambda: consumer.stats.dead_lettered == 1, timeout_s=20)
    assert tries == [1, 2, 3]  # max_deliver, not the retry window


@pytest.mark.asyncio
async def test_while_down_one_message_per_batch_probes_the_rest_wait_untried(bus: Bus) -> None:
    settings = bus.settings.model_copy(
        update={"retry_window_s": 60.0, "retry_backoff_s": 0.5, "retry_backoff_max_s": 0.5}
    )
    calls: list[str] = []

    async def handler(message: JobOutcome, delivery: Delivery) -> None:
        calls.append(message.job_id)
        raise StoreDown("connection refused")

    consumer = _consumer(bus, handler, settings)
    for i in range(10):
        await bus.publisher.publish(outcome(job_id=f"j{i}"))
    fetched = 0
    while fetched < 10:
        fetched += await consumer.process_batch(batch=10)
    assert calls == ["j0"]  # one try for the whole batch
    assert consumer.stats.retried == 10 and consumer.stats.unavailable == "StoreDown: connection refused"


@pytest.mark.asyncio
async def test_an_existing_durable_gets_the_windows_max_deliver(bus: Bus) -> None:
    """A durable consumer created before the retry window (max_deliver 6) is raised to cover it;
    left alone, the server would stop redelivering a message after 6 tries, silently."""
    old = Consumer(
        bus.js,
        bus.publisher,
        kind="outcomes",
        model=JobOutcome,
        durable="rec",
        handler=lambda m, d: None,  # type: ignore[arg-type,return-value]
        settings=bus.settings,
    )
    await old.start()
    stream = stream_name(bus.subjects, "outcomes")
    assert (await bus.js.consumer_info(stream, "rec")).config.max_deliver == bus.settings.max_deliver + 1
    await old.close()
    new = _consumer(bus, None, bus.settings.model_copy(update={"retry_window_s": 60.0}))
    await new.start()
    assert (await bus.js.consumer_info(stream, "rec")).config.max_deliver == new.attempts + 1 > 6
