"""The placer service: each PriorityVector becomes a PlacementDecision; it also records outcomes.

Order of effects for one vector: decide, publish the decision, store it (one row per job, insert-or-
ignore), then ack. A crash anywhere before the ack redelivers the vector: the republished decision
has the same ``Nats-Msg-Id`` (dropped by the stream's duplicate window) and the rows already stored
are ignored, so every decision lands exactly once. Publishing before storing keeps the database out
of the decision latency the adapter waits for.

Why the placer records outcomes and model versions too: it is the one pipeline service that owns
the database connection; the ``recorder-*`` consumers are shared by all placer replicas.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.placer.settings import PlacerServiceSettings
from services.placer.stage import PlacerStage
from shared.bus.consumer import Delivery
from shared.schemas.messages import JobOutcome, ModelVersion, PriorityVector
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.store.writes import record_decision, record_jobs, record_model_version, record_outcome


async def build(ctx: ServiceContext) -> Wiring:
    settings = PlacerServiceSettings()
    stage = PlacerStage(ctx.specs, placement=settings.placement)
    engine = ctx.engine
    assert engine is not None, "the placer needs the database (needs_store=True)"
    latency = ctx.metrics.decision_seconds

    async def on_priorities(vector: PriorityVector, _delivery: Delivery) -> None:
        decision = await asyncio.to_thread(stage.handle, vector)
        await ctx.publisher.publish(decision)
        latency.labels(ctx.name, decision.cluster).observe(sum(decision.latencies_ms.values()) / 1000.0)
        async with engine.begin() as conn:
            await record_jobs(conn, vector.matrix.snapshot)
            await record_decision(conn, decision)

    async def on_outcome(outcome: JobOutcome, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_outcome(conn, outcome)

    async def on_model(version: ModelVersion, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_model_version(conn, version)

    routes: list[Route[Any]] = [
        Route(
            kind="priorities",
            model=PriorityVector,
            durable="placer",
            handle=on_priorities,
            reject=(StageError,),
        ),
        Route(kind="outcomes", model=JobOutcome, durable="recorder-outcomes", handle=on_outcome),
        Route(kind="models", model=ModelVersion, durable="recorder-models", handle=on_model),
    ]
    return Wiring(routes=routes)


DEFINITION = ServiceDefinition(
    name="placer",
    default_port=8103,
    build=build,
    needs_store=True,
    description="PriorityVector -> PlacementDecision (CP-SAT or best-fit); stores decisions and outcomes",
)
