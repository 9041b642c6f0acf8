"""Early polls (asked for after every applied decision) are rate-limited by ``min_gap_s``.

The loop's own logic only: ``poll_once`` is replaced by a recorder, so no Slurm is needed.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from services.adapter_slurm.poll_loop import PollLoop


class CountingLoop(PollLoop):
    def __init__(self, min_gap_s: float) -> None:
        super().__init__(None, None, interval_s=30.0, retry_max_s=8.0, min_gap_s=min_gap_s)  # type: ignore[arg-type]
        self.times: list[float] = []

    async def poll_once(self):  # type: ignore[no-untyped-def]
        self.times.append(time.monotonic())


@pytest.mark.asyncio
@pytest.mark.parametrize(("gap", "most"), [(0.25, 5), (0.0, 1000)])
async def test_early_polls_keep_the_minimum_gap(gap: float, most: int) -> None:
    loop = CountingLoop(gap)
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))

    async def ask() -> None:  # a decision every 10 ms, each asking for an early poll
        while not stop.is_set():
            loop.poll_soon()
            await asyncio.sleep(0.01)

    asker = asyncio.create_task(ask())
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.wait_for(task, 5)
    await asker
    gaps = [b - a for a, b in zip(loop.times, loop.times[1:], strict=False)]
    assert len(loop.times) <= most
    if gap:
        assert all(g >= gap * 0.95 for g in gaps), gaps
    else:
        assert len(loop.times) > 20  # without a gap every request polls at once
