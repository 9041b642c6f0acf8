"""The placer service: each PriorityVector becomes a PlacementDecision; it also records decisions,
jobs, outcomes and model versions.

Order of effects for one vector: decide, store the jobs seen for the first time, publish the
decision, ack. Storing the decision itself (one row per ranked job: 1,024 rows for a 1,024-job
queue) is the ``recorder-decisions`` route's work, a separate durable consumer on the placements
stream: the next vector does not wait for the previous decision's rows. Every write is
insert-or-ignore and every consumer acks after its write, so a crash anywhere redelivers and every
decision, job and outcome lands exactly once, also across restarts (a republished decision has the
same ``Nats-Msg-Id`` and is dropped by the stream's duplicate window).

Why the placer records: it is the one pipeline service that owns the database connection; the
``recorder-*`` consumers are shared by all placer replicas. ``HYLO_PLACER_ROLE`` splits deciding
and recording into separate processes (``decide`` and ``record`` replicas), so that writing a
1,024-row decision never holds the GIL of the process that is placing the next one.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from services.placer.settings import PlacerServiceSettings
from services.placer.stage import PlacerStage
from shared.bus.consumer import Delivery
from shared.schemas.messages import JobOutcome, ModelVersion, PlacementDecision, PriorityVector
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.store.writes import record_decision, record_jobs, record_model_version, record_outcome


class KnownJobs:
    """Jobs this replica has stored (most recent ``capacity``), so a queue is not re-inserted per decision.

    Forgetting is harmless (the insert is ignored); remembering is only done after a committed write.
    """

    def __init__(self, capacity: int = 500_000) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def unknown(self, cluster: str, job_ids: list[str]) -> set[str]:
        return {j for j in job_ids if (cluster, j) not in self._seen}

    def add(self, cluster: str, job_ids: set[str]) -> None:
        for j in job_ids:
            self._seen[(cluster, j)] = None
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)


async def build(ctx: ServiceContext) -> Wiring:
    settings = PlacerServiceSettings()
    stage = PlacerStage(ctx.specs, placement=settings.placement)
    engine = ctx.engine
    assert engine is not None, "the placer needs the database (needs_store=True)"
    latency = ctx.metrics.decision_seconds

    known = KnownJobs()

    async def on_priorities(vector: PriorityVector, delivery: Delivery) -> None:
        wait = queue_wait_ms(delivery)
        decision = with_wait(await asyncio.to_thread(stage.handle, vector), "place", wait)
        snapshot = vector.matrix.snapshot
        new = known.unknown(snapshot.cluster, [j.job_id for j in snapshot.pending])
        if new:
            fresh = snapshot.model_copy(
                update={"pending": tuple(j for j in snapshot.pending if j.job_id in new)}
            )
            async with engine.begin() as conn:
                await record_jobs(conn, fresh)
            known.add(snapshot.cluster, new)
        await ctx.publisher.publish(decision)
        latency.labels(ctx.name, decision.cluster).observe(sum(decision.latencies_ms.values()) / 1000.0)

    async def on_decision(decision: PlacementDecision, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_decision(conn, decision)

    async def on_outcome(outcome: JobOutcome, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_outcome(conn, outcome)

    async def on_model(version: ModelVersion, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_model_version(conn, version)

    decide: list[Route[Any]] = [
        Route(
            kind="priorities",
            model=PriorityVector,
            durable="placer",
            handle=on_priorities,
            reject=(StageError,),
        ),
    ]
    record: list[Route[Any]] = [
        Route(kind="placements", model=PlacementDecision, durable="recorder-decisions", handle=on_decision),
        Route(kind="outcomes", model=JobOutcome, durable="recorder-outcomes", handle=on_outcome),
        Route(kind="models", model=ModelVersion, durable="recorder-models", handle=on_model),
    ]
    role = settings.placer_role
    routes = (decide if role != "record" else []) + (record if role != "decide" else [])
    return Wiring(routes=routes)


DEFINITION = ServiceDefinition(
    name="placer",
    default_port=8103,
    build=build,
    needs_store=True,
    description="PriorityVector -> PlacementDecision (CP-SAT or best-fit); stores decisions and outcomes",
)
