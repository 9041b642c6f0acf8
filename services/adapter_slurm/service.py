"""The Slurm adapter service: polls Slurm into snapshots and outcomes, applies placement decisions.

Inputs and outputs (``docs/slurm-adapter.md``): every ``HYLO_SLURM_POLL_INTERVAL_S`` (30 s), on
``POST /v1/poll`` and, with ``HYLO_SLURM_EVENTS_LISTEN``, at once on slurmctld's push events
(``events.py``: submissions and job ends, relayed on ``<root>.v1.<cluster>.events``) it publishes a
QueueSnapshot and the JobOutcomes of finished jobs; it consumes the
``placements`` of its cluster (durable ``adapter-slurm-<cluster>``, so adapters of different clusters
never take each other's decisions) and writes priorities with ``scontrol``. ``/readyz`` is false while
the last poll failed (slurmctld unreachable, malformed output), with the reason.

Why decisions raise on an unreachable controller: the runtime then naks the message and JetStream
redelivers it, so a decision made while slurmctld restarts is applied when it is back. The same
holds for a fail-safe lease that cannot be written (``lease.py``).

On stop, with ``HYLO_SLURM_RESTORE_ON_STOP``, the jobs Hylo prioritized are handed back at once;
without it (a restart), they keep Hylo's order, and the fail-safe watchdog hands them back if no
adapter decides again within ``HYLO_SLURM_FAILSAFE_AFTER_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import APIRouter, HTTPException
from nats.js.api import DeliverPolicy

from services.adapter_slurm.adapter import SlurmAdapter
from services.adapter_slurm.commands import SlurmCommandError
from services.adapter_slurm.events import EventPoller, PushEvents, events_subject
from services.adapter_slurm.poll_loop import PollLoop
from services.adapter_slurm.settings import SlurmAdapterSettings
from shared.bus.consumer import Delivery
from shared.schemas import Message, PlacementDecision, QueueSnapshot
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.cluster_adapter import SequenceJump, WrongCluster

log = logging.getLogger(__name__)


async def build(ctx: ServiceContext) -> Wiring:
    settings = SlurmAdapterSettings()
    cluster = settings.slurm_cluster
    spec = ctx.specs.get(cluster)
    if spec is None:
        raise ValueError(
            f"HYLO_SLURM_CLUSTER={cluster!r} has no spec in HYLO_CLUSTERS (it lists {sorted(ctx.specs)})"
        )
    adapter = SlurmAdapter(settings, spec)

    async def publish(message: Message) -> None:
        await ctx.publisher.publish(message)
        if isinstance(message, QueueSnapshot):
            adapter.timing.published(message.correlation_id)

    loop = PollLoop(
        adapter,
        publish,
        interval_s=settings.slurm_poll_interval_s,
        retry_max_s=settings.slurm_retry_max_s,
        min_gap_s=min(settings.slurm_min_poll_gap_s, settings.slurm_poll_interval_s),
    )
    events: PushEvents | None = None
    address = settings.events_address()
    if address is not None:
        poller = EventPoller(
            loop.poll_once,
            lambda: {job_id: job.state for job_id, job in adapter.jobs.items()},
            min_gap_s=settings.slurm_event_min_gap_s,
            on_event=lambda event: adapter.timing.event(event.received_at),
        )
        events = PushEvents(ctx.nc, events_subject(ctx.subjects, cluster), cluster, address, poller)
        await events.start()  # before the poll task: a taken port fails the start with nothing left running
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop), name=f"adapter-slurm-{cluster}-poll")

    async def on_decision(decision: PlacementDecision, _delivery: Delivery) -> None:
        if decision.cluster != cluster:
            return  # another cluster's decision: not ours to apply
        adapter.timing.received(decision.correlation_id)
        result = await loop.apply(decision)
        if result.report.sent:
            loop.poll_soon()  # show the new priorities (and starts) in the next snapshot promptly

    async def ready() -> str | None:
        return loop.problem()

    router = APIRouter()

    @router.post("/v1/poll", summary="Poll Slurm now and publish the snapshot")
    async def poll_now() -> dict[str, Any]:
        try:
            result = await loop.poll_once()
        except SlurmCommandError as err:
            raise HTTPException(status_code=503, detail=str(err)) from None
        snap = result.snapshot
        return {
            "cluster": snap.cluster,
            "correlation_id": snap.correlation_id,
            "pending": len(snap.pending),
            "running": len(snap.running),
            "nodes": len(snap.nodes),
            "outcomes": len(result.outcomes),
            "layout": result.layout,
            "seconds": round(result.seconds, 4),
        }

    async def on_stop() -> None:
        if events is not None:
            await events.close()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=settings.slurm_command_timeout_s * 2 + 1)
        if settings.slurm_restore_on_stop:
            try:
                count = await loop.hand_back()
            except Exception as err:  # slurmctld unreachable, lease unwritable: the watchdog remains
                log.error("could not hand jobs back on stop (%s); the fail-safe watchdog will", err)
            else:
                log.info("handed %d jobs back to Slurm's own priority", count)

    route = Route(
        kind="placements",
        model=PlacementDecision,
        durable=f"adapter-slurm-{cluster}",
        handle=on_decision,
        # a new adapter starts from the decisions made from now on, not a day of old ones; an
        # existing durable consumer resumes where it stopped (unacked decisions come back)
        deliver_policy=DeliverPolicy.NEW,
        cluster=cluster,
        # a decision whose sequence jumps beyond HYLO_MAX_SEQUENCE_JUMP (or another cluster's) is
        # well-formed but must never be applied: dead-lettered at once with its reason, not retried
        # max_deliver times first
        reject=(SequenceJump, WrongCluster),
    )
    return Wiring(routes=[route], router=router, readiness=[ready], on_stop=on_stop)


DEFINITION = ServiceDefinition(
    name="adapter_slurm",
    default_port=8105,
    build=build,
    description="Slurm (squeue/sinfo/sacct) -> QueueSnapshot, JobOutcome; PlacementDecision -> scontrol",
)
