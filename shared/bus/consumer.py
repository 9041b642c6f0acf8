"""Durable pull consumers: decode, dead-letter the invalid, skip stale snapshots, handle, ack.

The guarantees, and how each is obtained:

- **At-least-once, explicit ack.** A message is acked only after its handler returned. A replica that
  dies mid-handler never acks; JetStream redelivers after ``ack_wait``. A handler that raises gets a
  ``nak`` (redelivered after ``nak_delay_s``).
- **Harmless duplicates.** Redelivery means a handler may see a message twice. Handlers must be
  idempotent, which Hylo obtains at the store: decisions are unique on (correlation_id, job_id),
  outcomes on (cluster, job_id), and writes are insert-or-ignore (``shared.store.writes``);
  re-published outputs carry the same ``Nats-Msg-Id`` and are dropped by the stream's duplicate window.
- **A dependency that is down is waited for.** A route that names its ``transient`` errors (the
  recorders: the database is unreachable, locked or read-only) gets its message back after a delay
  that doubles from ``retry_backoff_s`` to ``retry_backoff_max_s``, for ``retry_window_s`` (15
  minutes by default), before it is dead-lettered: JetStream holds the message meanwhile (a NAK with
  a delay, not a sleep in the process), and the consumer's ``max_deliver`` is raised to cover the
  window, so the server never gives up first. Once one message of a batch finds the dependency down,
  the rest of that batch goes back with its delay untried (the first message of each batch probes),
  so an outage costs the database one attempt per batch, not one per message.
- **Never lost, never looping.** A payload that fails validation is published to
  ``<root>.v1.<cluster>.dead`` with the reason and then acked: it is not retried (it would fail again).
  A handler that fails ``max_deliver`` times is dead-lettered the same way. The JetStream consumer
  allows one delivery more than ``max_deliver``, so a replica that crashed during the last attempt
  still leaves a delivery in which the message is dead-lettered instead of vanishing. If publishing
  the dead letter fails, the message is not acked and comes back.
- **Rejections.** A handler may raise one of the ``reject`` exception types for a message that is
  well-formed but unusable (e.g. a snapshot of a cluster this service has no spec for); it is
  dead-lettered at once with the exception's text, not retried.
- **Latest-wins.** With ``latest_wins=True`` (snapshots), the consumer remembers the newest
  ``latest_key()`` seen per cluster, including every message of the current batch, and acks without
  handling any message older than that. Together with the snapshot stream's ``max_msgs_per_subject=1``
  a burst costs one decision, not one per snapshot.
  A key whose sequence (its first element) lies more than ``max_sequence_jump`` away from the newest
  adopted one is dead-lettered instead of adopted (``shared.bus.sequence``), so one forged
  ``sequence=2**62`` cannot make every later real snapshot look stale. The batch's keys are
  checked in ascending order, so a forged key in the same batch as real ones is the one refused.
- **Verified senders.** A route may ``verify`` each message's subject, headers and exact payload
  (the prioritizer checks model announcements' signatures, ``shared.bus.signing``); a message it
  refuses is dead-lettered with the reason, never handled. Per-sender identity (NATS accounts,
  issue 20 item 1) plugs in at the same place.
- **Replicas share the work.** Every replica binds to the same durable pull consumer (same
  ``durable`` name); JetStream hands each message to one fetcher, which is NATS' queue-group semantics
  for pull consumers.
- **References.** A message that names another by reference (a PriorityVector its FeatureMatrix,
  ``shared.schemas.codec.MissingReference``) decodes only where that one was received; with
  ``fetch_missing`` the consumer fetches it (from its stream) and decodes again, and a message whose
  reference is nowhere to be had is dead-lettered with the reason.
- **Large payloads.** A message stored as a reference to the object store (``shared.bus.large``)
  is read back and checked before it is decoded; a reference whose object is missing, incomplete or
  corrupt is dead-lettered with the reason, one the server did not answer for is sent back with
  ``nak_delay_s`` (dead-lettered at its last delivery). Acks, redelivery and latest-wins apply to
  the reference as to any message.
- **Tracing.** Each handled message runs inside a CONSUMER span whose parent is the trace context
  found in its headers, so spans of all services for one snapshot form one trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from shared.bus.large import LargePayloadUnavailable
from shared.bus.publisher import HEADER_CORRELATION, HEADER_MSG_ID, RETRY_PAUSE_S, Publisher
from shared.bus.sequence import JumpGuard
from shared.bus.settings import BusSettings, retry_delays
from shared.bus.streams import ensure_streams, stream_name
from shared.bus.tracing import extract_context
from shared.schemas.base import Message
from shared.schemas.codec import MessageError, MissingReference, decode
from shared.schemas.deadletter import DeadLetter, FieldError
from shared.schemas.subjects import Kind, SubjectError

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

#: the server did not answer a fetch or a request: the consumer (or its stream) has no leader while
#: its raft group elects one after a NATS node died (a fetch is refused at once, 503 / no
#: responders), or the request was lost with the node. Retried every ``RETRY_PAUSE_S``.
UNANSWERED: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    ServiceUnavailableError,
)
#: how long the idle check that the durable consumer still exists waits for the server's answer
CHECK_TIMEOUT_S = 1.0
#: the same check while fetches go unanswered waits less: it delays the next fetch, which may be the
#: first one the newly elected leader answers (a deleted consumer is reported within milliseconds)
OUTAGE_CHECK_TIMEOUT_S = 0.25
#: for how long unanswered fetches are retried every ``RETRY_PAUSE_S``: a raft election ends 4-9 s
#: after the leader's last heartbeat (nats-server's fixed election timeout), and a consumer that asks
#: every 0.1 s is at most that late after it; past this the server is down for longer (no quorum, or
#: the whole cluster) and the consumer asks every ``SLOW_RETRY_S``, not to load it with requests
FAST_RETRY_FOR_S = 15.0
SLOW_RETRY_S = 1.0


@dataclass(frozen=True)
class Delivery:
    """What a handler may want besides the message: where it came from and how often it was tried."""

    subject: str
    headers: Mapping[str, str]
    message_id: str
    stream_seq: int
    num_delivered: int
    #: when JetStream stored the message (epoch seconds, the server's clock): queueing time is
    #: ``time.time() - stored_at`` (approximate across machines)
    stored_at: float = 0.0


Handler = Callable[[M, Delivery], Awaitable[None]]
#: True for an error that means a dependency is unavailable (retry for the window), not a bad message
TransientCheck = Callable[[BaseException], bool]
#: fetches a message another one names by reference (``MissingReference``) so that it decodes; True if
#: it now may (the message is then decoded again), False if it is nowhere to be had
FetchMissing = Callable[[MissingReference], Awaitable[bool]]
#: checks a message's sender before it is handled: (subject, headers, payload) -> None if accepted,
#: else why it is refused (dead-lettered with that reason)
Verify = Callable[[str, Mapping[str, str], bytes], str | None]


@dataclass
class ConsumerStats:
    """Counters of one consumer replica (exported as metrics by the services)."""

    handled: int = 0
    skipped_stale: int = 0
    dead_lettered: int = 0
    handler_errors: int = 0
    #: messages decoded after fetching the message they name by reference (``fetch_missing``)
    fetched_references: int = 0
    #: deliveries sent back with a delay because a dependency was unavailable (``transient``)
    retried: int = 0
    #: the dependency's last error while it is unavailable (None once a message went through)
    unavailable: str | None = None
    #: since when (``time.monotonic()``) it is unavailable
    unavailable_since: float | None = None
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class _Decoded(Generic[M]):
    msg: Msg
    message: M | None
    error: MessageError | None
    #: the whole payload (the object-store payload a reference names, resolved)
    data: bytes = b""
    #: why the payload could not be read now (the server did not answer): retried
    unavailable: str | None = None


class Consumer(Generic[M]):
    """One replica of a durable pull consumer on the ``kind`` stream, for messages of ``model``."""

    def __init__(
        self,
        js: JetStreamContext,
        publisher: Publisher,
        *,
        kind: Kind,
        model: type[M],
        durable: str,
        handler: Handler[M],
        settings: BusSettings,
        cluster: str | None = None,
        latest_wins: bool = False,
        tracer: trace.Tracer | None = None,
        reject: tuple[type[Exception], ...] = (),
        deliver_policy: DeliverPolicy = DeliverPolicy.ALL,
        inactive_threshold_s: float | None = None,
        fetch_missing: FetchMissing | None = None,
        transient: TransientCheck | None = None,
        verify: Verify | None = None,
        group: str | None = None,
        fetch_timeout_s: float | None = None,
    ) -> None:
        self.js = js
        #: how long an idle fetch waits (a message that arrives is returned at once whatever it is)
        self.fetch_timeout_s = fetch_timeout_s or settings.fetch_timeout_s
        #: the route's name in metrics, traces and dead letters: the durable, or for a route with a
        #: consumer per cluster (``shared.service.shards``) the name they share
        self.group = group or durable
        self.verify = verify
        self.transient = transient
        self._delays = retry_delays(settings) if transient is not None else []
        #: handler deliveries before a message is dead-lettered: the retry window's when the route
        #: waits for a dependency, else ``max_deliver``
        self.attempts = max(settings.max_deliver, len(self._delays) + 1)
        self.fetch_missing = fetch_missing
        self.publisher = publisher
        self.subjects = publisher.subjects
        self.kind = kind
        self.model = model
        self.durable = durable
        self.handler = handler
        self.settings = settings
        self.limits = publisher.limits
        self.large = publisher.large
        self.filter_subject = (
            self.subjects.of(cluster, kind) if cluster is not None else self.subjects.all_clusters(kind)
        )
        self.latest_wins = latest_wins
        self.tracer = tracer or trace.get_tracer("hylo.bus")
        self.reject = reject
        self.deliver_policy = deliver_policy
        self.inactive_threshold_s = inactive_threshold_s
        self.stats = ConsumerStats()
        self._latest: dict[str, tuple[Any, ...]] = {}
        self._jumps = JumpGuard(settings.max_sequence_jump)
        self._last_seq = 0  # highest stream sequence this replica acked
        self._sub: JetStreamContext.PullSubscription | None = None

    async def start(self, from_seq: int | None = None) -> None:
        """Create (or bind to) the durable consumer; several replicas may call this concurrently.

        ``from_seq``: create it starting at that stream sequence (used when re-creating a lost
        consumer, so messages this replica already handled are not replayed).
        """
        config = ConsumerConfig(
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if from_seq else self.deliver_policy,
            opt_start_seq=from_seq,
            inactive_threshold=self.inactive_threshold_s,
            ack_wait=self.settings.ack_wait_s,
            max_deliver=self.attempts + 1,  # one spare delivery to dead-letter, see above
            max_ack_pending=self.settings.max_ack_pending,
            filter_subject=self.filter_subject,
        )
        self._sub = await self.js.pull_subscribe(
            self.filter_subject,
            durable=self.durable,
            stream=stream_name(self.subjects, self.kind),
            config=config,
        )
        await self._align(config)

    async def _align(self, config: ConsumerConfig) -> None:
        """Bring an existing durable consumer's ``max_deliver`` to this replica's: one created before
        the retry window existed (or with a shorter one) would otherwise stop redelivering a message
        the handler still waits for, and the server drops it silently instead of a dead letter."""
        stream = stream_name(self.subjects, self.kind)
        try:
            info = await self.js.consumer_info(stream, self.durable)
            if info.config.max_deliver == config.max_deliver:
                return
            await self.js.add_consumer(stream, info.config.evolve(max_deliver=config.max_deliver))
            log.info("consumer %s: max_deliver set to %s", self.durable, config.max_deliver)
        except Exception as err:  # an older server that cannot update: keep going, say so
            log.warning("consumer %s: could not align max_deliver: %s", self.durable, err)

    async def run(self, stop: asyncio.Event, interrupt: asyncio.Event | None = None) -> None:
        """Process batches until ``stop`` is set; the batch in flight is finished first.

        ``interrupt`` (set on shutdown) also ends an idle fetch at once instead of after its
        timeout: a per-cluster consumer waits ``HYLO_SHARD_FETCH_TIMEOUT_S`` per fetch, and a
        replica stopping would otherwise wait that long. A message the server hands to the
        abandoned fetch is redelivered to another replica after the ack wait, as after a crash.

        While idle, or while the server does not answer its fetches, the consumer checks every
        ``consumer_check_s`` that its durable consumer still exists: a fetch on a deleted consumer
        (an operator's mistake, or a server restarted with memory storage) only ever times out or
        is refused, which would look like an idle queue (or an election) forever. A missing
        consumer (and stream) is re-created.
        """
        if self._sub is None:
            await self.start()
        last_check = time.monotonic()
        unanswered_since: float | None = None
        while not stop.is_set():
            try:
                if (
                    unanswered_since is not None
                    and time.monotonic() - last_check >= self.settings.consumer_check_s
                ):
                    # unanswered for a while: a deleted consumer is refused the same way as one
                    # without a leader, so check that it still exists
                    last_check = time.monotonic()
                    await self.ensure_bound(timeout_s=OUTAGE_CHECK_TIMEOUT_S)
                fetched = await self.process_batch(interrupt=interrupt)
                if unanswered_since is not None:
                    took = time.monotonic() - unanswered_since
                    log.warning("consumer %s: NATS answers again after %.1f s", self.durable, took)
                    unanswered_since = None
                if not fetched and time.monotonic() - last_check >= self.settings.consumer_check_s:
                    last_check = time.monotonic()
                    await self.ensure_bound()
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
                return
            except UNANSWERED as err:
                # the server did not answer (a stream or consumer electing its leader after a node of
                # the cluster died): one line per outage, then try again shortly, so that the first
                # fetch after the election is at most RETRY_PAUSE_S late (it used to wait
                # nak_delay_s, and a 503 was logged with a traceback per try); nothing was acked,
                # nothing is lost. See FAST_RETRY_FOR_S for longer outages.
                if unanswered_since is None:
                    unanswered_since = time.monotonic()
                    log.warning("consumer %s: NATS did not answer (%s); retrying", self.durable, short(err))
                fast = time.monotonic() - unanswered_since < FAST_RETRY_FOR_S
                await asyncio.sleep(RETRY_PAUSE_S if fast else SLOW_RETRY_S)
            except Exception:  # keep serving: a broken batch must not stop the service
                log.exception("consumer %s: batch failed", self.durable)
                await asyncio.sleep(self.settings.nak_delay_s)

    async def ensure_bound(self, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
        """Re-create the stream and durable consumer if they are gone; True if they had to be.

        The question waits ``timeout_s`` (``CHECK_TIMEOUT_S``), not the JetStream API's 5 s: while
        the consumer's raft group elects a leader nobody answers it, and the fetch loop that asks
        would sit out the whole wait after the new leader was up (up to 5 s more pause,
        bench/nats_failover.py). Unanswered, the check is simply skipped: it is asked again later."""
        stream = stream_name(self.subjects, self.kind)
        try:
            await self.js.consumer_info(stream, self.durable, timeout=timeout_s)
        except UNANSWERED:
            return False
        except NotFoundError:
            log.warning("consumer %s on %s was gone; re-creating it", self.durable, stream)
            await ensure_streams(self.js, self.subjects, self.settings)
            if self._sub is not None:
                with contextlib.suppress(Exception):
                    await self._sub.unsubscribe()
                self._sub = None
            await self.start(from_seq=self._last_seq + 1 if self._last_seq else None)
            return True
        return False

    async def close(self) -> None:
        """Unsubscribe this replica (the durable consumer and its pending messages stay)."""
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def process_batch(
        self, batch: int | None = None, timeout_s: float | None = None, interrupt: asyncio.Event | None = None
    ) -> int:
        """Fetch up to ``batch`` messages and process them; returns how many were fetched.
        ``interrupt``: once set, a fetch still waiting is abandoned (0 fetched)."""
        if self._sub is None:
            await self.start()
        assert self._sub is not None
        try:
            fetch = self._sub.fetch(
                batch or self.settings.fetch_batch, timeout=timeout_s or self.fetch_timeout_s
            )
            msgs = await fetch if interrupt is None else await _unless_set(fetch, interrupt)
        except (TimeoutError, nats.errors.TimeoutError):  # nats-py raises either when idle
            return 0
        if self.latest_wins:  # the batch's newest keys decide what is stale: decode it all first
            decoded = [await self._prepared(m) for m in msgs]
            await self._process_in_turn(self._bounded(decoded))
        else:  # each message decoded when its turn comes: a batch of big ones is never all in memory
            await self._process_in_turn(msgs)
        return len(msgs)

    async def _prepared(self, msg: Msg) -> _Decoded[M]:
        """``msg`` read (its large payload resolved), decoded, and its reference fetched if needed."""
        d = await self._read(msg)
        if self.fetch_missing is not None:
            d = await self._with_reference(d)
        return d

    async def _process_in_turn(self, items: Sequence[_Decoded[M] | Msg]) -> None:
        """Handle a fetched batch one message after another, keeping the waiting ones' leases alive.

        JetStream's ack wait runs for every message of a batch from its delivery, but the batch is
        handled in turn: a full batch of slow messages would outlive the lease of its last ones,
        which the server then redelivers to another replica while this one still handles them
        (double work, and a queue group that no longer shares it). Whenever half the ack wait has
        passed since the last lease renewal, every message still waiting is told "in progress"
        (a one-way publish, no round trip), which restarts its ack wait.
        """
        renew_after = self.settings.ack_wait_s / 2
        renewed = time.monotonic()
        down: BaseException | None = None  # the dependency's error, once a message of this batch met it
        for i, item in enumerate(items):
            if time.monotonic() - renewed >= renew_after:
                for waiting in items[i:]:
                    with contextlib.suppress(Exception):  # a lost renewal only risks a redelivery
                        await (waiting.msg if isinstance(waiting, _Decoded) else waiting).in_progress()
                renewed = time.monotonic()
            d = item if isinstance(item, _Decoded) else await self._prepared(item)
            down = await self._process(d, down)

    async def _read(self, msg: Msg) -> _Decoded[M]:
        """``msg`` decoded, after its large payload (if it is a reference) was read and checked."""
        try:
            data = await self.large.resolve(msg.data, self.limits.max_message_bytes)
        except MessageError as err:
            return _Decoded(msg, None, err)
        except LargePayloadUnavailable as err:
            return _Decoded(msg, None, None, unavailable=str(err))
        return self._decode(msg, data)

    async def _with_reference(self, d: _Decoded[M]) -> _Decoded[M]:
        """``d`` decoded again once the message it names by reference was fetched; as it was if that
        message is nowhere to be had (it is then dead-lettered with the reason) or ``d`` is fine."""
        if not isinstance(d.error, MissingReference) or self.fetch_missing is None:
            return d
        try:
            fetched = await self.fetch_missing(d.error)
        except MessageError as err:  # the stored message is invalid or not the one named
            reason = f"{d.error.reason}; fetched from its stream: {err.reason}"
            return _Decoded(d.msg, None, MessageError(reason))
        except Exception as err:  # the server did not answer: the message comes back, unacked...
            if d.msg.metadata.num_delivered < self.settings.max_deliver:
                raise
            # ...until its last delivery, where it is dead-lettered rather than dropped by the server
            reason = f"{d.error.reason}; fetching it failed: {type(err).__name__}: {err}"
            return _Decoded(d.msg, None, MessageError(reason))
        if not fetched:
            return _Decoded(d.msg, None, MessageError(f"{d.error.reason}, nor in its stream"))
        self.stats.fetched_references += 1
        return self._decode(d.msg, d.data)

    def _decode(self, msg: Msg, data: bytes) -> _Decoded[M]:
        try:
            message = decode(self.model, data, self.limits)
        except MessageError as err:
            return _Decoded(msg, None, err, data)
        try:
            cluster, _ = self.subjects.parse(msg.subject)
        except SubjectError as err:
            return _Decoded(msg, None, MessageError(str(err)))
        if cluster != message.cluster:
            reason = f"message for cluster {message.cluster!r} on subject of cluster {cluster!r}"
            return _Decoded(msg, None, MessageError(reason))
        if self.verify is not None:
            refused = self.verify(msg.subject, dict(msg.headers or {}), data)
            if refused is not None:
                return _Decoded(msg, None, MessageError(f"refused: {refused}"))
        return _Decoded(msg, message, None, data)

    def _key(self, message: M) -> tuple[Any, ...] | None:
        key = getattr(message, "latest_key", None)
        return tuple(key()) if callable(key) else None

    def _bounded(self, decoded: list[_Decoded[M]]) -> list[_Decoded[M]]:
        """Remember the newest key of each cluster in the batch, refusing (as a decode error, so it is
        dead-lettered) every message whose sequence jumps beyond the window; checked in ascending key
        order, so the baseline is the lowest plausible sequence, not a forged huge one."""
        out = list(decoded)
        keyed = [(self._key(d.message), i) for i, d in enumerate(out) if d.message is not None]
        for key, i in sorted((k, i) for k, i in keyed if k is not None):
            message = out[i].message
            assert message is not None
            known = self._latest.get(message.cluster)
            if isinstance(key[0], int) and not isinstance(key[0], bool):
                newest = known[0] if known is not None and isinstance(known[0], int) else None
                verdict = self._jumps.check(message.cluster, key[0], newest)
                if verdict.reason is not None:
                    out[i] = _Decoded(out[i].msg, None, MessageError(f"refused: {verdict.reason}"))
                    continue
                if verdict.rebase:
                    self._latest[message.cluster] = key
                    continue
            if known is None or key > known:
                self._latest[message.cluster] = key
        return out

    async def _process(self, d: _Decoded[M], down: BaseException | None = None) -> BaseException | None:
        """Handle one message; returns the dependency's error if it was (or still is) unavailable.

        ``down``: a message before this one in the batch found the dependency unavailable, so this
        one goes back with its delay without being tried."""
        msg = d.msg
        meta = msg.metadata
        if d.unavailable is not None:
            await self._unreadable(msg, d.unavailable)
            return down
        if d.message is None:
            assert d.error is not None
            await self._dead(msg, d.error.reason, d.error.errors)
            return down
        message = d.message
        if self.latest_wins:
            key, known = self._key(message), self._latest.get(message.cluster)
            if key is not None and known is not None and key < known:
                self.stats.skipped_stale += 1
                await msg.ack()
                return down
        if meta.num_delivered > self.attempts:
            await self._dead(msg, f"gave up after {meta.num_delivered - 1} deliveries (handler never acked)")
            return down
        if down is not None:
            await self._retry_later(msg, down)
            return down
        headers = dict(msg.headers or {})
        delivery = Delivery(
            subject=msg.subject,
            headers=headers,
            message_id=headers.get(HEADER_MSG_ID) or message.message_id(),
            stream_seq=meta.sequence.stream,
            num_delivered=meta.num_delivered,
            stored_at=meta.timestamp.timestamp() if meta.timestamp is not None else 0.0,
        )
        ctx = extract_context(headers)
        with self.tracer.start_as_current_span(
            f"consume {self.kind}", context=ctx, kind=trace.SpanKind.CONSUMER
        ) as span:
            span.set_attribute("hylo.correlation_id", message.correlation_id)
            span.set_attribute("messaging.consumer.group.name", self.group)
            try:
                await self.handler(message, delivery)
            except self.reject as err:  # valid JSON, but unusable: retrying cannot help
                span.record_exception(err)
                span.set_status(Status(StatusCode.ERROR, str(err)[:200]))
                await self._dead(msg, f"rejected by {self.group}: {err}")
                return None
            except Exception as err:
                span.record_exception(err)
                span.set_status(Status(StatusCode.ERROR, str(err)[:200]))
                self.stats.handler_errors += 1
                if self.transient is not None and self.transient(err):
                    await self._retry_later(msg, err)
                    return err
                if meta.num_delivered >= self.settings.max_deliver:
                    reason = f"handler failed {meta.num_delivered} times: {type(err).__name__}: {err}"
                    await self._dead(msg, reason)
                else:
                    await msg.nak(delay=self.settings.nak_delay_s)
                return None
        self.stats.handled += 1
        await msg.ack()
        self._last_seq = max(self._last_seq, meta.sequence.stream)
        self._available()
        return None

    async def _unreadable(self, msg: Msg, why: str) -> None:
        """A large payload the server did not hand over: back after ``nak_delay_s``, dead-lettered at
        the last delivery (never dropped by the server's ``max_deliver``)."""
        if msg.metadata.num_delivered >= self.settings.max_deliver:
            await self._dead(msg, f"payload unreadable after {msg.metadata.num_delivered} deliveries: {why}")
            return
        self.stats.handler_errors += 1
        await msg.nak(delay=self.settings.nak_delay_s)

    async def _retry_later(self, msg: Msg, err: BaseException) -> None:
        """A dependency is unavailable: the message goes back to JetStream with its back-off delay,
        or, past the retry window, to the dead letters (``hylo deadletters replay`` re-applies it)."""
        stats = self.stats
        if stats.unavailable is None:
            stats.unavailable_since = time.monotonic()
            log.warning(
                "consumer %s: dependency unavailable, retrying with back-off: %s", self.durable, short(err)
            )
        stats.unavailable = short(err)
        n = msg.metadata.num_delivered
        if n >= self.attempts:
            window = self.settings.retry_window_s
            reason = f"unavailable for {n} deliveries (retry window {window:g} s): {short(err)}"
            await self._dead(msg, reason)
            return
        stats.retried += 1
        await msg.nak(delay=self._delays[min(n, len(self._delays)) - 1])

    def _available(self) -> None:
        """A message went through: the dependency is back (logged once per outage)."""
        stats = self.stats
        if stats.unavailable is not None:
            took = time.monotonic() - (stats.unavailable_since or time.monotonic())
            log.warning("consumer %s: dependency available again after %.1f s", self.durable, took)
            stats.unavailable = None
            stats.unavailable_since = None

    async def _dead(self, msg: Msg, reason: str, errors: tuple[FieldError, ...] = ()) -> None:
        """Publish the dead letter, then ack; if publishing fails the message stays unacked."""
        headers = dict(msg.headers or {})
        try:
            cluster, _ = self.subjects.parse(msg.subject)
        except SubjectError:
            cluster = "unknown"
        meta = msg.metadata
        correlation = headers.get(HEADER_CORRELATION)
        letter = DeadLetter.build(
            cluster=cluster,
            stage=self.group,
            reason=reason,
            subject=msg.subject,
            payload=msg.data,
            headers=headers,
            errors=errors,
            correlation_id=correlation if correlation and _valid_correlation(correlation) else None,
            stream=meta.stream,
            stream_seq=meta.sequence.stream,
            deliveries=meta.num_delivered,
        )
        await self.publisher.publish(letter)
        self.stats.dead_lettered += 1
        short = re.sub(r"\d+", "N", reason.split(":", 1)[0])[:80]
        self.stats.reasons[short] = self.stats.reasons.get(short, 0) + 1
        await msg.ack()


async def _unless_set(fetch: Coroutine[Any, Any, list[Msg]], interrupt: asyncio.Event) -> list[Msg]:
    """The fetch's messages, or none if ``interrupt`` is set while it waits (the fetch is cancelled)."""
    if interrupt.is_set():
        fetch.close()
        return []
    task = asyncio.ensure_future(fetch)
    waiter = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    return []


def short(err: BaseException, limit: int = 300) -> str:
    """``Type: first line`` of an error, bounded: a database error's text carries its whole statement
    and parameters, which belong neither in a log line nor in a readiness answer."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _valid_correlation(value: str) -> bool:
    return 0 < len(value) <= 64 and all(c.isascii() and (c.isalnum() or c in "-_") for c in value)
