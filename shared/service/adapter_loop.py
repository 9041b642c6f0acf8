"""``PollingLoop``: the clock of a cluster adapter whose cluster is polled: observe, publish, back off.

Why a loop of its own and not a consumer route: an adapter is the one service whose input is not a
message but a cluster; it must keep observing whether or not the pipeline sends anything. Any
``ClusterAdapter`` whose external system is read on demand (Slurm's ``squeue``, a Kubernetes or
Kueue API) runs under this loop; its service adds a ``placements`` route that calls ``apply`` and
``poll_soon``, and calls ``hand_back`` on stop (``services/adapter_slurm/service.py``).

Observations and decisions take turns (one lock), and the adapter's blocking calls run in a worker
thread. Failure behaviour: a failed observation (the external system unreachable, a command timing
out, malformed output) keeps the previous good state (the adapter raises before changing
anything), marks the adapter not ready (``problem``), and retries after 1, 2, 4 ... seconds up to
``retry_max_s``; the first good observation clears it. Outcomes that could not be published (bus
down) stay in the ``OutcomeOutbox`` and go out after the next observation, so none is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Generic, TypeVar

from shared.schemas.messages import JobOutcome, PlacementDecision
from shared.service.cluster_adapter import (
    AppliedDecision,
    ClusterAdapter,
    Observation,
    OutcomeOutbox,
    Publish,
)

__all__ = ["PollingLoop"]

log = logging.getLogger(__name__)

Obs = TypeVar("Obs", bound=Observation)
App = TypeVar("App", bound=AppliedDecision)


class PollingLoop(Generic[Obs, App]):
    """Owns a ``ClusterAdapter``: polls it every ``interval_s`` (and on ``poll_soon``), publishes
    what it observed, applies decisions between polls; see the module docstring.

    ``name`` prefixes ``problem()`` (``slurm: squeue --json ...``), the reason ``/readyz`` shows.
    """

    def __init__(
        self,
        adapter: ClusterAdapter[Obs, App],
        publish: Publish,
        *,
        interval_s: float,
        retry_max_s: float,
        min_gap_s: float = 0.0,
        name: str = "cluster",
    ) -> None:
        self.adapter = adapter
        self.publish = publish
        self.interval_s = interval_s
        self.retry_max_s = retry_max_s
        self.min_gap_s = min_gap_s
        self.name = name
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.last_error: str | None = "no poll yet"
        self.last_ok: float | None = None
        self.last_result: Obs | None = None
        self.failures = 0
        self.outbox = OutcomeOutbox()
        #: whether the adapter has observed its cluster at least once (decisions need that state)
        self.observed = False

    @property
    def unsent(self) -> list[JobOutcome]:
        """Outcomes observed and not yet acknowledged by the bus."""
        return self.outbox.pending

    def problem(self) -> str | None:
        """None when the last poll succeeded; else why the adapter is not ready."""
        if self.last_error is None:
            return None
        return f"{self.name}: {self.last_error}"

    def _observed(self, result: Obs) -> None:
        self.observed = True
        self.last_error = None
        self.failures = 0
        self.last_ok = time.time()
        self.last_result = result
        self.outbox.add(result.outcomes)

    async def poll_once(self) -> Obs:
        """Observe now, publish the snapshot, then every outcome not yet published; raises what the
        adapter raised (counted as a failed poll) or what the bus raised."""
        async with self.lock:
            try:
                result = await asyncio.to_thread(self.adapter.observe)
            except Exception as err:
                self.failures += 1
                self.last_error = str(err)
                raise
            self._observed(result)
        await self.publish(result.snapshot)
        await self.outbox.flush(self.publish)
        return result

    async def apply(self, decision: PlacementDecision) -> App:
        """Apply ``decision`` between polls. Before the first observation (the adapter restarted and
        a decision was waiting) it observes first: a decision is checked against the cluster's
        state; that observation's outcomes go out with the next poll."""
        async with self.lock:
            if not self.observed:
                self._observed(await asyncio.to_thread(self.adapter.observe))
            return await asyncio.to_thread(self.adapter.apply, decision)

    async def hand_back(self) -> int:
        """The adapter's ``hand_back``, in turn with polls and decisions."""
        async with self.lock:
            return await asyncio.to_thread(self.adapter.hand_back)

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
            failures = self.failures
            try:
                await self.poll_once()
            except Exception as err:
                if self.failures > failures:  # observing failed (poll_once counted it)
                    log.warning(
                        "poll failed (%d in a row): %s; retrying in %.0f s", self.failures, err, self._delay()
                    )
                else:  # the bus refused a publish: keep polling, report it
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
