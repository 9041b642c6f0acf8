"""Test scaffolding for the bus round trip: a stand-in pipeline answering snapshots over real NATS.

It is not a mock of the bus: it reads the adapter's snapshots from JetStream with a durable
consumer, as the featurizer will, and publishes ``PlacementDecision``s on the placements subject,
as the placer will. Its order is written here from the policies' definitions (docs/simulator.md),
independently of ``shared.policies``: FCFS by submit time, SJF by whole seconds of estimate then
fewer GPUs; ties by the snapshot's pending order (arrival). It places as the placer does: the
simulator's cycle (``cycle_on``) on the cluster the snapshot describes, in that order, answering
with the nodes and the exact per-node allocations.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.bus import Consumer, Delivery
from shared.domain.cluster import ClusterSpec, load_cluster_spec
from shared.schemas import (
    JobPlacement,
    PendingJob,
    PlacementDecision,
    Placements,
    QueueSnapshot,
    snapshot_views,
)
from shared.schemas.snapshot_cluster import allocation_fields, describe_cluster
from shared.schemas.stage_error import StageError
from shared.schemas.views import bind_pending
from shared.sim.config import SimConfig
from shared.sim.cycle_on import PendingRequest, cycle_on
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
        starts = _place(snapshot, [k for k, _ in pending], self.spec or PLACE_ON)
        placements = [
            JobPlacement(job_id=job.job_id, rank=r, priority=float(n - r), **starts.get(k, {}))
            for r, (k, job) in enumerate(pending)
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


#: the cluster the adapter tests replay on, where a responder is given no spec
PLACE_ON = load_cluster_spec(str(Path(__file__).with_name("small_cluster.toml")))


def _place(snapshot: QueueSnapshot, ranked: list[int], spec: ClusterSpec) -> dict[int, dict[str, Any]]:
    """The placer's starts for the pending jobs in ``ranked`` order (positions in the snapshot):
    position -> the ``JobPlacement`` fields of its nodes and allocation."""
    pending = snapshot.pending
    binding = bind_pending(pending, spec)
    kept = {row: k for k, row in enumerate(binding.kept)}
    order = [row for row in ranked if row in kept]
    requests = [
        PendingRequest(
            pending.gpus[row],
            pending.gpu_milli[row],
            binding.cpus_milli[kept[row]],
            binding.mem_mib[kept[row]],
            binding.groups[kept[row]],
            pending.est_runtime_s[row],
        )
        for row in order
    ]
    cluster = describe_cluster(snapshot, spec)
    out = cycle_on(spec, snapshot.time, cluster.running, requests, SimConfig(), blocked=cluster.blocked)
    fields: dict[int, dict[str, Any]] = {}
    for k, a in out.starts.items():
        alloc = allocation_fields(a)
        fields[order[k]] = {"nodes": cluster.names_of(a), **alloc}
    return fields


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
