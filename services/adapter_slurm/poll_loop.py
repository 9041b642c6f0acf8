"""The adapter's clock: poll Slurm every ``interval`` (and on demand), publish, back off on failure.

Why a loop of its own and not a consumer route: the adapter is the one service whose input is not a
message but a cluster; it must keep observing whether or not the pipeline sends anything.

Failure behaviour: a failed poll (slurmctld unreachable, a command timing out, malformed output)
keeps the previous good state (``SlurmAdapter.poll`` raises before changing anything), marks the
adapter not ready (``problem``), and retries after 1, 2, 4 ... seconds up to ``retry_max_s``;
the first good poll clears it. Outcomes that could not be published (bus down) are kept and sent
with the next poll, so none is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from services.adapter_slurm.adapter import DecisionResult, PollResult, SlurmAdapter
from services.adapter_slurm.commands import SlurmCommandError
from shared.schemas import JobOutcome, PlacementDecision
from shared.schemas.base import Message

log = logging.getLogger(__name__)

Publish = Callable[[Message], Awaitable[object]]


class PollLoop:
    """Owns the adapter: polls and decisions take turns (one lock), Slurm calls run in a thread."""

    def __init__(
        self,
        adapter: SlurmAdapter,
        publish: Publish,
        *,
        interval_s: float,
        retry_max_s: float,
        min_gap_s: float = 0.0,
    ) -> None:
        self.adapter = adapter
        self.publish = publish
        self.interval_s = interval_s
        self.retry_max_s = retry_max_s
        self.min_gap_s = min_gap_s
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.last_error: str | None = "no poll yet"
        self.last_ok: float | None = None
        self.last_result: PollResult | None = None
        self.failures = 0
        self.unsent: list[JobOutcome] = []

    def problem(self) -> str | None:
        """None when the last poll succeeded; else why the adapter is not ready."""
        if self.last_error is None:
            return None
        return f"slurm: {self.last_error}"

    async def poll_once(self) -> PollResult:
        """Poll now and publish the snapshot and outcomes; raises SlurmCommandError on failure."""
        async with self.lock:
            try:
                result = await asyncio.to_thread(self.adapter.poll)
            except SlurmCommandError as err:
                self.failures += 1
                self.last_error = str(err)
                raise
            self.last_error = None
            self.failures = 0
            self.last_ok = time.time()
            self.last_result = result
            self.unsent.extend(result.outcomes)
        await self.publish(result.snapshot)
        while self.unsent:
            await self.publish(self.unsent[0])
            self.unsent.pop(0)
        return result

    async def apply(self, decision: PlacementDecision) -> DecisionResult:
        async with self.lock:
            if self.adapter.last_snapshot is None:
                # a decision before the first poll (adapter restarted): learn the queue first
                await asyncio.to_thread(self.adapter.poll)
                self.last_error = None
            return await asyncio.to_thread(self.adapter.apply, decision)

    def poll_soon(self) -> None:
        """Ask for a poll now instead of at the next tick."""
        self.wake.set()

    def _delay(self) -> float:
        if self.failures == 0:
            return self.interval_s
        return float(min(self.retry_max_s, 2 ** min(self.failures - 1, 16)))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.poll_once()
            except SlurmCommandError as err:
                log.warning(
                    "poll failed (%d in a row): %s; retrying in %.0f s", self.failures, err, self._delay()
                )
            except Exception as err:  # the bus refused a publish: keep polling, report it
                self.last_error = f"publishing failed: {type(err).__name__}: {err}"
                log.warning("%s", self.last_error)
                self.failures += 1
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                waker = asyncio.create_task(self.wake.wait())
                stopper = asyncio.create_task(stop.wait())
                try:
                    await asyncio.wait(
                        {waker, stopper}, timeout=self._delay(), return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waker.cancel()
                    stopper.cancel()
            # an early poll (poll_soon) comes no sooner than min_gap_s after the previous one
            rest = self.min_gap_s - (time.monotonic() - started)
            if rest > 0 and not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), rest)
