"""The bus side of the simulated cluster: publish snapshots and outcomes, match decisions to them.

Why a bridge between a thread and the event loop: the simulator is synchronous and fast, the bus
is asyncio. The simulator runs in a worker thread and, at each cycle, blocks on
``asyncio.run_coroutine_threadsafe(...).result()`` while the loop publishes the snapshot and waits
for the placement decision with the same correlation id. Decisions are read by a durable pull
consumer on this cluster's ``placements`` subject (explicit acks, like every service), created for
this run with deliver-policy ``new`` (a run never replays the decisions of an earlier run) and
deleted when the run ends.

In accelerated mode nothing waits: ``send`` publishes and returns, and ``latest`` is the decision of
the newest snapshot answered so far, whichever cycle it was for.

What every cluster adapter does on the bus comes from ``shared.service.cluster_adapter``: a waiting
cycle takes only the decision that ``answers`` its snapshot (same cluster, correlation id and
sequence; any other is counted late), and outcomes go out through an ``OutcomeOutbox``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Sequence

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from services.adapter_sim.errors import AdapterError
from services.adapter_sim.stats import AdapterStats
from shared.bus import BusSettings, Consumer, Delivery, Publisher, stream_name
from shared.schemas import DeadLetter, JobOutcome, MessageError, PlacementDecision, QueueSnapshot, decode
from shared.service.cluster_adapter import OutcomeOutbox, answers

__all__ = ["AdapterError", "PipelineBridge"]


class PipelineBridge:
    """Publishes a cluster's snapshots and outcomes; hands each decision to the cycle waiting for it."""

    def __init__(
        self,
        js: JetStreamContext,
        publisher: Publisher,
        settings: BusSettings,
        cluster: str,
        *,
        decision_timeout_s: float,
        stats: AdapterStats,
    ) -> None:
        if decision_timeout_s <= 0:
            raise ValueError(f"decision_timeout_s must be > 0, got {decision_timeout_s}")
        self.js = js
        self.publisher = publisher
        self.cluster = cluster
        self.decision_timeout_s = decision_timeout_s
        self.stats = stats
        self.durable = f"adapter-sim-{cluster}-{uuid.uuid4().hex[:8]}"
        self.consumer: Consumer[PlacementDecision] = Consumer(
            js,
            publisher,
            kind="placements",
            model=PlacementDecision,
            durable=self.durable,
            handler=self._on_decision,
            settings=settings,
            cluster=cluster,
            deliver_policy=DeliverPolicy.NEW,  # never the decisions of an earlier run
            inactive_threshold_s=3600.0,  # a run that crashed leaves nothing behind for long
        )
        #: correlation id -> (the snapshot, the cycle waiting for its decision)
        self._waiting: dict[str, tuple[QueueSnapshot, asyncio.Future[PlacementDecision | None]]] = {}
        self.outbox = OutcomeOutbox()
        # accelerated mode: snapshots sent without waiting (correlation id -> send time), the newest
        # decision received for any of them, and the publishes still in flight
        self._sent_at: dict[str, float] = {}
        self._latest: PlacementDecision | None = None
        self._in_flight: list[concurrent.futures.Future[None]] = []
        self._dead: JetStreamContext.PushSubscription | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Create the decision consumer and start reading; call from the event loop."""
        self.loop = asyncio.get_running_loop()
        await self.consumer.start()
        # a stage that rejects a snapshot dead-letters it: no decision will come, say why at once
        self._dead = await self.js.subscribe(
            self.publisher.subjects.of(self.cluster, "dead"),
            cb=self._on_dead,
            stream=stream_name(self.publisher.subjects, "dead"),  # no stream lookup by subject
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        self._task = asyncio.create_task(self.consumer.run(self._stop), name=f"{self.durable}-reader")

    async def close(self) -> None:
        """Stop reading and delete this run's consumer."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        await self.consumer.close()
        if self._dead is not None:
            with contextlib.suppress(Exception):
                await self._dead.unsubscribe()
        with contextlib.suppress(Exception):
            await self.js.delete_consumer(stream_name(self.publisher.subjects, "placements"), self.durable)

    async def _on_decision(self, decision: PlacementDecision, _: Delivery) -> None:
        sent = self._sent_at.pop(decision.correlation_id, None)
        if sent is not None:  # accelerated mode: the newest decision wins, whenever it comes
            self.stats.latencies_ms.append((time.perf_counter() - sent) * 1000.0)
            if self._latest is None or decision.sequence > self._latest.sequence:
                self._latest = decision
            return
        snapshot, waiter = self._waiting.get(decision.correlation_id, (None, None))
        if snapshot is None or waiter is None or waiter.done() or not answers(decision, snapshot):
            self.stats.late_decisions += 1
            return
        waiter.set_result(decision)

    async def _on_dead(self, msg: Msg) -> None:
        try:
            letter = decode(DeadLetter, msg.data)
        except MessageError:
            return  # not ours to judge: the dead subject is only watched for our snapshots
        _, waiter = self._waiting.get(letter.correlation_id or "", (None, None))
        if waiter is None or waiter.done():
            return
        reason = letter.reason if letter.stage in letter.reason else f"{letter.stage}: {letter.reason}"
        self.stats.reject(reason)
        waiter.set_result(None)

    async def publish_outcomes(self, outcomes: Sequence[JobOutcome]) -> None:
        """Publish finished jobs' outcomes (concurrently; each awaits JetStream's ack)."""
        self.outbox.add(outcomes)
        try:
            await self.outbox.flush(self.publisher.publish)
        except Exception as err:
            raise AdapterError(f"publishing job outcomes failed: {type(err).__name__}: {err}") from err

    async def round_trip(
        self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]
    ) -> PlacementDecision | None:
        """Publish the outcomes and the snapshot; its decision, or None after the timeout or when a
        stage dead-lettered the snapshot (counted in ``stats.rejected``)."""
        await self.publish_outcomes(outcomes)
        loop = asyncio.get_running_loop()
        cid = snapshot.correlation_id
        waiter: asyncio.Future[PlacementDecision | None] = loop.create_future()
        self._waiting[cid] = (snapshot, waiter)
        try:
            t0 = time.perf_counter()
            try:
                await self.publisher.publish(snapshot)
            except Exception as err:
                raise AdapterError(
                    f"publishing snapshot {snapshot.sequence} failed: {type(err).__name__}: {err}"
                ) from err
            try:
                decision = await asyncio.wait_for(waiter, self.decision_timeout_s)
            except TimeoutError:
                return None
            if decision is not None:
                self.stats.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
            return decision
        finally:
            del self._waiting[cid]

    async def _send(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> None:
        await self.publish_outcomes(outcomes)
        self._sent_at[snapshot.correlation_id] = time.perf_counter()
        try:
            await self.publisher.publish(snapshot)
        except Exception as err:
            raise AdapterError(
                f"publishing snapshot {snapshot.sequence} failed: {type(err).__name__}: {err}"
            ) from err

    async def flush(self) -> None:
        """Wait for the publishes still in flight (accelerated mode); raise the first failure."""
        pending, self._in_flight = self._in_flight, []
        for future in pending:
            await asyncio.wrap_future(future)

    # -- the simulator thread's view (DecisionChannel) -------------------------------------------

    def decide(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> PlacementDecision | None:
        """Blocking ``round_trip`` for the simulator thread."""
        assert self.loop is not None, "PipelineBridge.start() was not awaited"
        future = asyncio.run_coroutine_threadsafe(self.round_trip(snapshot, outcomes), self.loop)
        # the coroutine times out by itself; this bound only catches a bus that hangs on publish
        return future.result(timeout=self.decision_timeout_s + 60.0)

    def send(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> None:
        """Publish without waiting for anything (accelerated mode); a failed earlier publish raises."""
        assert self.loop is not None, "PipelineBridge.start() was not awaited"
        still: list[concurrent.futures.Future[None]] = []
        for future in self._in_flight:
            if not future.done():
                still.append(future)
            elif future.exception() is not None:
                raise AdapterError(str(future.exception()))
        still.append(asyncio.run_coroutine_threadsafe(self._send(snapshot, outcomes), self.loop))
        self._in_flight = still

    def latest(self) -> PlacementDecision | None:
        """The decision of the newest snapshot answered so far (accelerated mode), if any."""
        return self._latest
