"""Which replicas of a stage are alive, and which of them owns each cluster.

Why: replicas of a stage used to share one durable consumer over every cluster, so any replica could
get any cluster's next message. Work that pays off only on the replica that handles a cluster's
next message (the placer decoding a snapshot and describing its cluster while the featurizer and
the prioritizer work, the prioritizer preparing the model's window) was then done by every replica
for every cluster: at 4 replicas the deciding placer's CPU per decision nearly doubled
(docs/results/replica-scaling.md). With an owner per cluster, a cluster's messages go to one replica
(its own durable consumer, ``shared.service.shards``) and only that replica works ahead for it.

How: each replica announces itself on a core NATS subject of its group every ``heartbeat_s``
(nothing stored on the server), says goodbye when it stops, and answers a newcomer's hello at once.
A replica not heard from for ``expiry_s`` is gone. Every replica computes the same assignment from
the same member list (``assign``): clusters sorted by a hash, dealt round-robin to the members in
sorted order, so each owns within one cluster of its share. Views can differ for a moment (a
replica joining, one dying): a cluster then has two owners (both fetch from its durable consumer,
which hands each message to one of them: nothing is handled twice) or, for at most ``expiry_s``
after a replica dies without a goodbye, none (its messages wait in the stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from shared.schemas.subjects import Subjects

__all__ = ["Membership", "assign", "member_id", "members_subject"]

log = logging.getLogger("hylo.bus.membership")


def members_subject(subjects: Subjects, group: str) -> str:
    """The core subject a group's replicas announce themselves on (three tokens: never a stream's)."""
    return f"{subjects.root}.members.{group}"


def member_id() -> str:
    """A replica's id: host, process and a random part (a restarted process is a new member)."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:24]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _rank(cluster: str) -> bytes:
    return hashlib.blake2b(cluster.encode(), digest_size=8).digest()


def assign(clusters: Iterable[str], members: Iterable[str]) -> dict[str, str]:
    """Cluster -> owning member, the same on every replica that sees the same members.

    Clusters are ordered by a hash of their name (so which clusters share a replica does not follow
    their names) and dealt in turn to the members in sorted order: every member owns
    ``len(clusters) // len(members)`` or one more. No members: no owners.
    """
    ordered_members = sorted(set(members))
    if not ordered_members:
        return {}
    ordered = sorted(set(clusters), key=lambda c: (_rank(c), c))
    return {c: ordered_members[i % len(ordered_members)] for i, c in enumerate(ordered)}


class Membership:
    """This replica's view of its group's live members; ``on_change`` runs when the view changes."""

    def __init__(
        self,
        nc: Client,
        subject: str,
        me: str | None = None,
        heartbeat_s: float = 1.0,
        expiry_s: float = 5.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        if heartbeat_s <= 0 or expiry_s <= heartbeat_s:
            raise ValueError(f"need 0 < heartbeat_s ({heartbeat_s}) < expiry_s ({expiry_s})")
        self.nc = nc
        self.subject = subject
        self.me = me or member_id()
        self.heartbeat_s = heartbeat_s
        self.expiry_s = expiry_s
        self.on_change = on_change
        self._seen: dict[str, float] = {}
        self._view: tuple[str, ...] = (self.me,)
        self._sub: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def members(self) -> tuple[str, ...]:
        """The live members, sorted, this replica included."""
        return self._view

    async def start(self, settle_s: float = 0.3) -> None:
        """Subscribe, say hello, and give the others ``settle_s`` to answer before the first view."""
        self._sub = await self.nc.subscribe(self.subject, cb=self._on_message)
        await self._announce("hello")
        await asyncio.sleep(min(settle_s, self.heartbeat_s))
        self._refresh()
        self._task = asyncio.create_task(self._beat(), name=f"members:{self.subject}")

    async def close(self) -> None:
        """Say goodbye (the others reassign this replica's clusters at once) and unsubscribe."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._announce("bye")
                await self._sub.unsubscribe()
            self._sub = None

    async def _announce(self, state: str) -> None:
        await self.nc.publish(self.subject, json.dumps({"id": self.me, "state": state}).encode())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self._announce("up")
            except Exception as err:  # the connection is down: the others will expire us, say why
                log.warning("membership %s: heartbeat not sent (%s)", self.subject, err)
            self._refresh()

    async def _on_message(self, msg: Msg) -> None:
        try:
            body = json.loads(msg.data)
            member, state = str(body["id"]), str(body["state"])
        except (ValueError, KeyError, TypeError):
            log.warning("membership %s: ignored a malformed announcement %r", self.subject, msg.data[:200])
            return
        if member == self.me:
            return
        if state == "bye":
            self._seen.pop(member, None)
        else:
            if member not in self._seen and state == "hello":
                await self._announce("up")  # the newcomer learns of us before its first view
            self._seen[member] = time.monotonic()
        self._refresh()

    def _refresh(self) -> None:
        now = time.monotonic()
        for member, at in list(self._seen.items()):
            if now - at > self.expiry_s:
                del self._seen[member]
        view = tuple(sorted({self.me, *self._seen}))
        if view != self._view:
            log.info("membership %s: %d live replica(s): %s", self.subject, len(view), ", ".join(view))
            self._view = view
            if self.on_change is not None:
                self.on_change()
