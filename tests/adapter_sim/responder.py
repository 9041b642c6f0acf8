"""Test scaffolding for the bus round trip: a stand-in pipeline answering snapshots over real NATS.

It is not a mock of the bus: it reads the adapter's snapshots from JetStream with a durable
consumer, as the featurizer will, and publishes ``PlacementDecision``s on the placements subject,
as the placer will. Its order is written here from the policies' definitions (docs/simulator.md),
independently of ``shared.policies``: FCFS by submit time, SJF by whole seconds of estimate then
fewer GPUs; ties by the snapshot's pending order (arrival).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from shared.bus import Consumer, Delivery
from shared.domain.cluster import ClusterSpec
from shared.schemas import (
    JobPlacement,
    PendingJob,
    PlacementDecision,
    Placements,
    QueueSnapshot,
    snapshot_views,
)
from shared.schemas.stage_error import StageError
from tests.conftest_services import Bus


def _fcfs(job: PendingJob) -> tuple[float, ...]:
    return (job.submit_s,)


def _sjf(job: PendingJob) -> tuple[float, ...]:
    return (math.floor(job.est_runtime_s), job.gpus)


ORDERS = {"fcfs": _fcfs, "sjf": _sjf}


@dataclass
class Responder:
    """Answers every snapshot of ``cluster`` with the jobs ordered by ``order`` (all ranked).

    ``spec`` set: every snapshot is also converted with ``snapshot_views`` (the featurizer's own
    reading of a snapshot), so a snapshot the services could not read fails the test.
    ``extra_job`` set: each decision also ranks a job id that is not pending (must be ignored).
    ``reject_every`` = k: every k-th snapshot is refused with ``StageError`` (dead-lettered by the
    bus layer, as a stage refuses a snapshot that contradicts the cluster spec).
    """

    order: str
    spec: ClusterSpec | None = None
    extra_job: str | None = None
    reject_every: int = 0
    snapshots: list[QueueSnapshot] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def handle(self, snapshot: QueueSnapshot, _: Delivery, bus: Bus) -> None:
        self.snapshots.append(snapshot)
        if self.reject_every and len(self.snapshots) % self.reject_every == 0:
            raise StageError("nodes do not fit")
        if self.spec is not None:
            try:
                snapshot_views(snapshot, self.spec)
            except ValueError as err:
                self.errors.append(str(err))
        key = ORDERS[self.order]
        pending = list(enumerate(snapshot.pending))
        pending.sort(key=lambda kj: (*key(kj[1]), kj[0]))
        n = len(pending)
        placements = [
            JobPlacement(job_id=job.job_id, rank=r, priority=float(n - r))
            for r, (_, job) in enumerate(pending)
        ]
        if self.extra_job is not None:
            placements.insert(0, JobPlacement(job_id=self.extra_job, rank=0, priority=1e9))
        decision = PlacementDecision(
            cluster=snapshot.cluster,
            correlation_id=snapshot.correlation_id,
            snapshot_time=snapshot.time,
            sequence=snapshot.sequence,
            policy=self.order,
            fallback="no model loaded",
            placements=Placements.of(placements),
        )
        await bus.publisher.publish(decision)


@contextlib.asynccontextmanager
async def responding(bus: Bus, cluster: str, responder: Responder) -> AsyncIterator[Responder]:
    """Run ``responder`` on ``cluster``'s snapshots while the block runs."""

    async def handler(snapshot: QueueSnapshot, delivery: Delivery) -> None:
        await responder.handle(snapshot, delivery, bus)

    consumer = Consumer(
        bus.js,
        bus.publisher,
        kind="snapshots",
        model=QueueSnapshot,
        durable=f"responder-{cluster}",
        handler=handler,
        settings=bus.settings,
        cluster=cluster,
        latest_wins=True,
        reject=(StageError,),
    )
    await consumer.start()
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield responder
    finally:
        stop.set()
        await task
        await consumer.close()
