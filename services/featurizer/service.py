"""The featurizer service: each QueueSnapshot becomes a FeatureMatrix.

Snapshots are consumed latest-wins: when a burst queues several snapshots of one cluster, only the
newest is featurized (the older ones are acked unhandled), so decision latency stays bounded. A
snapshot that is well-formed but unusable (unknown cluster, nodes that contradict the spec) is
dead-lettered with the reason. Featurizing a large snapshot runs in a worker thread so ``/healthz``
stays responsive; one of ordinary size runs on the event loop (``shared.service.offload``).

Outcomes feed the live runtime predictor (``shared.prediction.online``): every replica reads every
outcome (a consumer per replica, from the start of the stream, so a new replica learns from the
outcomes the stream still holds), because each replica predicts the snapshots it featurizes. A
due refit runs in a worker thread, one at a time. ``GET /v1/predictor`` reports what each cluster's
predictor has learned and the last snapshot's predicted columns.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from fastapi import APIRouter
from nats.js.api import DeliverPolicy

from services.featurizer.stage import FeaturizerStage
from shared.bus.consumer import Delivery
from shared.schemas.messages import FeatureMatrix, JobOutcome
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.service.offload import run_stage, snapshot_rows


async def build(ctx: ServiceContext) -> Wiring:
    stage = FeaturizerStage(ctx.specs, limits=ctx.publisher.limits)
    fitting: set[str] = set()

    async def on_outcome(outcome: JobOutcome, _delivery: Delivery) -> None:
        if stage.record_outcome(outcome) and outcome.cluster not in fitting:
            fitting.add(outcome.cluster)
            try:
                await asyncio.to_thread(stage.refit, outcome.cluster)
            finally:
                fitting.discard(outcome.cluster)

    async def on_snapshot(snapshot: QueueSnapshot, delivery: Delivery) -> FeatureMatrix:
        wait = queue_wait_ms(delivery)
        seq = delivery.stream_seq or None
        matrix = await run_stage(snapshot_rows(snapshot), stage.handle, snapshot, seq)
        return with_wait(matrix, "featurize", wait)

    route = Route(
        kind="snapshots",
        model=QueueSnapshot,
        durable="featurizer",
        handle=on_snapshot,
        latest_wins=True,
        sharded=True,
        reject=(StageError,),
    )
    routes: list[Route[Any]] = [route]
    if stage.predictor_settings.live:
        routes.append(
            Route(
                kind="outcomes",
                model=JobOutcome,
                durable="featurizer-outcomes",
                handle=on_outcome,
                per_replica=True,
                deliver_policy=DeliverPolicy.ALL,
            )
        )
    return Wiring(routes=routes, router=_status_router(stage))


def _status_router(stage: FeaturizerStage) -> APIRouter:
    """``GET /v1/predictor``: per cluster, the live predictor's state and the last snapshot's views."""
    router = APIRouter()

    @router.get("/v1/predictor", summary="What the live runtime predictors learned")
    async def predictor_status() -> dict[str, Any]:
        out: dict[str, Any] = {"live": stage.predictor_settings.live, "clusters": {}}
        for cluster, predictor in list(stage.predictors.items()):
            entry: dict[str, Any] = {"predictor": predictor.status()}
            views = stage.last_views.get(cluster)
            if views is not None:
                predicted = views.queue.predicted_s
                entry["last_snapshot"] = {
                    "jobs": len(views.job_ids),
                    "finite_predictions": int(np.isfinite(predicted).sum()),
                    "predicted_s_first": dict(zip(views.job_ids[:20], predicted[:20].tolist(), strict=True)),
                }
            out["clusters"][cluster] = entry
        return out

    return router


DEFINITION = ServiceDefinition(
    name="featurizer",
    default_port=8101,
    build=build,
    description="QueueSnapshot -> FeatureMatrix (the paper's job and cluster features, in [0, 1])",
)
