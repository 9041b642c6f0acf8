"""Routes sharded by cluster: each cluster's messages go to the one replica that owns the cluster.

Why: see ``shared.bus.membership`` (work done ahead for a cluster pays off only on the replica that
handles its next message). A sharded route has one durable consumer per cluster
(``<durable>-<cluster>``, filtered on that cluster's subject) instead of one over all clusters; the
replica that owns a cluster fetches from its consumer, the others leave it alone. When the owners
change (a replica starts, stops or dies), a replica stops fetching for the clusters it lost (the
batch in flight is finished and acked first) and starts for those it gained; the consumers are
durable, so messages published meanwhile wait in the stream, and one delivered but not acked by a
replica that died is redelivered after ``ack_wait`` as before.

Clusters without a spec: the stage refuses their messages (dead letters with the reason). With a
consumer per known cluster nobody would fetch them, so the replica first in the member order looks
every ``sweep_s`` for subjects of unknown clusters holding messages in the route's stream and runs a
consumer for each, whose handler refuses them as before: late (up to ``sweep_s``), never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from shared.bus.consumer import Consumer, short
from shared.bus.membership import Membership, assign, members_subject
from shared.bus.streams import stream_name
from shared.schemas.subjects import Kind, SubjectError, Subjects

__all__ = ["ClusterShards", "ShardedRoute"]

log = logging.getLogger("hylo.service.shards")


class ClusterShards:
    """Which known clusters this replica owns in its group, kept current by its ``Membership``."""

    def __init__(
        self,
        nc: Client,
        subjects: Subjects,
        group: str,
        clusters: Collection[str],
        heartbeat_s: float = 1.0,
        expiry_s: float = 5.0,
    ) -> None:
        self.clusters = frozenset(clusters)
        self.membership = Membership(
            nc,
            members_subject(subjects, group),
            heartbeat_s=heartbeat_s,
            expiry_s=expiry_s,
            on_change=self._changed,
        )
        self._owners = assign(self.clusters, self.membership.members)
        self._listeners: list[asyncio.Event] = []
        self.joined = False

    @property
    def me(self) -> str:
        return self.membership.me

    def owns(self, cluster: str) -> bool:
        """Whether this replica handles ``cluster``'s messages now (every cluster before it joins:
        a replica that does not shard works ahead for all, as before)."""
        if not self.joined:
            return True
        return self._owners.get(cluster) == self.me

    def owned(self) -> frozenset[str]:
        return frozenset(c for c, m in self._owners.items() if m == self.me)

    def leads(self) -> bool:
        """Whether this replica is first in the member order (it sweeps for unknown clusters)."""
        members = self.membership.members
        return bool(members) and members[0] == self.me

    def listen(self) -> asyncio.Event:
        """An event set whenever the owners change (the listener clears it)."""
        event = asyncio.Event()
        self._listeners.append(event)
        return event

    async def join(self) -> None:
        """Start announcing this replica; from now on it owns only its share."""
        if self.joined:
            return
        await self.membership.start()
        self.joined = True
        self._changed()

    async def leave(self) -> None:
        """Say goodbye: the others take this replica's clusters over at once."""
        if self.joined:
            await self.membership.close()

    def _changed(self) -> None:
        self._owners = assign(self.clusters, self.membership.members)
        for event in self._listeners:
            event.set()


@dataclass
class _Running:
    consumer: Consumer[Any]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: set on shutdown only: an idle fetch ends at once (a handover lets it time out, so that a
    #: message handed to it is handled, not left for redelivery)
    interrupt: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class ShardedRoute:
    """One sharded route on one replica: runs the consumers of the clusters it owns.

    ``make(cluster)`` builds the consumer of one cluster (the runtime's, with the route's handler);
    ``watch`` is told of each consumer built (metrics).
    """

    def __init__(
        self,
        shards: ClusterShards,
        js: JetStreamContext,
        subjects: Subjects,
        kind: Kind,
        make: Callable[[str], Consumer[Any]],
        watch: Callable[[Consumer[Any]], None] = lambda c: None,
        sweep_s: float = 30.0,
        name: str = "",
    ) -> None:
        #: the route's durable name, which its per-cluster consumers extend
        self.name = name or kind
        self.shards = shards
        self.js = js
        self.subjects = subjects
        self.kind = kind
        self.make = make
        self.watch = watch
        self.sweep_s = sweep_s
        self.consumers: dict[str, Consumer[Any]] = {}
        self._running: dict[str, _Running] = {}
        self._unknown: set[str] = set()
        self._changed = shards.listen()

    def running(self) -> frozenset[str]:
        """The clusters this replica fetches for now."""
        return frozenset(self._running)

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the owners until ``stop``; then stop every consumer (batches in flight finish)."""
        next_sweep = 0.0
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                self._changed.clear()
                if self.shards.leads() and loop.time() >= next_sweep:
                    next_sweep = loop.time() + self.sweep_s
                    await self._sweep()
                await self._reconcile()
                stop_wait = asyncio.ensure_future(stop.wait())
                change_wait = asyncio.ensure_future(self._changed.wait())
                timeout = max(0.05, next_sweep - loop.time()) if self.shards.leads() else self.sweep_s
                _, pending = await asyncio.wait(
                    {stop_wait, change_wait}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()
        finally:
            for running in self._running.values():
                running.interrupt.set()
            await asyncio.gather(*(self._stop(c) for c in list(self._running)), return_exceptions=True)

    def _wanted(self) -> set[str]:
        wanted = set(self.shards.owned()) if self.shards.joined else set(self.shards.clusters)
        if self.shards.leads():
            wanted |= self._unknown
        return wanted

    async def _reconcile(self) -> None:
        wanted = self._wanted()
        for cluster in sorted(set(self._running) - wanted):
            await self._stop(cluster)
        for cluster in sorted(wanted - set(self._running)):
            try:
                await self._start(cluster)
            except Exception as err:  # NATS did not answer: the next change or sweep tries again
                log.warning("shard %s/%s: could not start its consumer (%s)", self.kind, cluster, short(err))

    async def _start(self, cluster: str) -> None:
        consumer = self.consumers.get(cluster)
        if consumer is None:
            consumer = self.consumers[cluster] = self.make(cluster)
            self.watch(consumer)
        await consumer.start()
        running = _Running(consumer)
        running.task = asyncio.create_task(
            consumer.run(running.stop, running.interrupt), name=consumer.durable
        )
        self._running[cluster] = running
        log.info("shard %s/%s: this replica fetches it", self.kind, cluster)

    async def _stop(self, cluster: str) -> None:
        """Stop fetching for ``cluster``: the batch in flight (or the idle fetch, at most
        ``HYLO_SHARD_FETCH_TIMEOUT_S``) finishes first; ``running`` lists it until then."""
        running = self._running.get(cluster)
        if running is None:
            return
        running.stop.set()
        if running.task is not None:
            with contextlib.suppress(Exception):
                await running.task
        with contextlib.suppress(Exception):
            await running.consumer.close()
        self._running.pop(cluster, None)
        log.info("shard %s/%s: handed over", self.kind, cluster)

    async def _sweep(self) -> None:
        """Find clusters without a spec whose messages wait in the route's stream."""
        stream = stream_name(self.subjects, self.kind)
        try:
            info = await self.js.stream_info(stream, subjects_filter=self.subjects.all_clusters(self.kind))
        except Exception as err:
            log.warning("shard %s: could not list the stream's subjects (%s)", self.kind, short(err))
            return
        found: set[str] = set()
        for subject, count in (info.state.subjects or {}).items():
            try:
                cluster, _ = self.subjects.parse(subject)
            except SubjectError:
                continue
            if count and cluster not in self.shards.clusters:
                found.add(cluster)
        new = found - self._unknown
        if new:
            log.warning(
                "shard %s: messages of cluster(s) without a spec: %s; refusing them (dead letters)",
                self.kind,
                ", ".join(sorted(new)),
            )
        self._unknown |= found

    async def close(self) -> None:
        for cluster in list(self._running):
            await self._stop(cluster)
        for consumer in self.consumers.values():
            with contextlib.suppress(Exception):
                await consumer.close()
