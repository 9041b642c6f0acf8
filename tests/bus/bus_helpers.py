"""Small helpers for bus tests: a recording handler and a bounded processing loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from nats.js import JetStreamContext

from shared.bus import Consumer, Delivery
from shared.schemas import DeadLetter, Message, decode

M = TypeVar("M", bound=Message)


@dataclass
class Recorder(Generic[M]):
    """A handler that records what it saw (optionally sleeping, to make a replica slow)."""

    delay_s: float = 0.0
    seen: list[tuple[M, Delivery]] = field(default_factory=list)

    async def __call__(self, message: M, delivery: Delivery) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.seen.append((message, delivery))


async def process_until(
    consumers: list[Consumer[M]], done: Callable[[], bool], timeout_s: float = 10.0
) -> None:
    """Run the consumers' batches concurrently until ``done()`` or the timeout (then fail)."""
    deadline = time.monotonic() + timeout_s

    async def loop(c: Consumer[M]) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            await c.process_batch()

    await asyncio.gather(*(loop(c) for c in consumers))


async def read_all(js: JetStreamContext, subject: str, expected: int, timeout_s: float = 10.0) -> list[bytes]:
    """Every payload stored on ``subject`` (an ephemeral consumer), waiting for ``expected`` of them."""
    sub = await js.pull_subscribe(subject, durable=None)
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        try:
            msgs = await sub.fetch(min(500, expected - len(out)), timeout=0.5)
        except Exception:
            continue
        for m in msgs:
            out.append(m.data)
            await m.ack()
    await sub.unsubscribe()
    return out


async def dead_letters(js: JetStreamContext, subject: str, expected: int) -> list[DeadLetter]:
    return [decode(DeadLetter, data) for data in await read_all(js, subject, expected)]


async def wait_all_acked(js: JetStreamContext, stream: str, durable: str, timeout_s: float = 5.0) -> None:
    """Acks are fire-and-forget: poll the consumer until nothing is pending or awaiting an ack."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = await js.consumer_info(stream, durable)
        if info.num_ack_pending == 0 and info.num_pending == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{durable}: {info.num_ack_pending} unacked, {info.num_pending} pending")
        await asyncio.sleep(0.02)


async def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``cond`` (every 20 ms) while the event loop runs other tasks; fail after the timeout."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
