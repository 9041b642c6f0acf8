"""The prioritizer service: each FeatureMatrix becomes a PriorityVector.

The model comes from ``HYLO_MODEL_PATH`` at start-up and from ``ModelVersion`` announcements on the
models subject afterwards (hot reload: the next matrix uses the new model; a matrix in flight
finishes with the one it started with). Every replica must see every announcement, so the models
route has a consumer per replica. With no model, a model that fails, or a missed deadline, the
base policy decides and the vector says why (``fallback``); the metrics count those by reason.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from services.prioritizer.models import ModelHolder, checkpoint_sha256
from services.prioritizer.settings import PrioritizerSettings
from services.prioritizer.stage import PrioritizerStage
from shared.bus.consumer import Delivery
from shared.bus.snapshots import SnapshotCache
from shared.schemas.messages import FeatureMatrix, ModelVersion, PriorityVector
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait

log = logging.getLogger("hylo.prioritizer")


class ModelStatus(BaseModel):
    version: str | None
    base_policy: str
    deadline_ms: float


def _reason_class(fallback: str) -> str:
    """A low-cardinality label for the metrics: the reason up to its first colon or digit."""
    head = fallback.split(":", 1)[0]
    return "".join(c for c in head if not c.isdigit()).strip()[:60] or "other"


def startup_version(path: str, cluster: str) -> ModelVersion:
    """The ModelVersion of a checkpoint given at start-up, named after its card's hash."""
    digest = checkpoint_sha256(path)
    return ModelVersion(
        cluster=cluster,
        correlation_id=f"startup-{digest[:16]}",
        version=f"file-{digest[:12]}",
        sha256=digest,
        uri=path,
        status="current",
        created_at=datetime.now(UTC),
    )


async def build(ctx: ServiceContext) -> Wiring:
    settings = PrioritizerSettings()
    holder = ModelHolder()
    if settings.model_path is not None:
        first_cluster = next(iter(ctx.specs))
        await asyncio.to_thread(holder.load, startup_version(str(settings.model_path), first_cluster))
    # a long queue's model window needs its snapshot: every snapshot is received as it is published
    # and, while a model is loaded, the newest is decoded while the featurizer works
    snapshots = SnapshotCache(
        ctx.nc, ctx.js, ctx.subjects, ctx.publisher.limits, decode_ahead=lambda: holder.loaded is not None
    )
    await snapshots.start()

    async def snapshot_of(matrix: FeatureMatrix) -> QueueSnapshot | None:
        return await snapshots.get(matrix.cluster, matrix.correlation_id, matrix.snapshot_seq)

    stage = PrioritizerStage(
        base_policy=ctx.settings.base_policy,
        deadline_ms=settings.deadline_ms,
        holder=holder,
        specs=ctx.specs,
        limits=ctx.publisher.limits,
        snapshots=snapshot_of,
    )
    fallbacks = ctx.metrics.fallbacks

    async def on_features(matrix: FeatureMatrix, delivery: Delivery) -> PriorityVector:
        wait = queue_wait_ms(delivery)
        if matrix.cluster not in ctx.specs:  # every service serves the same cluster map
            raise StageError(f"unknown cluster {matrix.cluster!r}: HYLO_CLUSTERS lists {sorted(ctx.specs)}")
        vector = await stage.handle(matrix)
        if vector.fallback:
            fallbacks.labels(ctx.name, _reason_class(vector.fallback)).inc()
        return with_wait(vector, "prioritize", wait)

    async def on_model(version: ModelVersion, _delivery: Delivery) -> None:
        current = holder.current
        if version.status == "current":
            try:
                await asyncio.to_thread(holder.load, version)
            except Exception as err:  # the previous model stays; the announcement is not retried
                log.error("model %s not loaded: %s", version.version, err)
        elif version.status == "retired" and current is not None and current[0] == version.version:
            holder.clear()

    router = APIRouter()

    @router.get("/v1/model", response_model=ModelStatus, summary="The model this replica uses now")
    async def model_status() -> ModelStatus:
        current = holder.current
        return ModelStatus(
            version=current[0] if current else None,
            base_policy=ctx.settings.base_policy,
            deadline_ms=settings.deadline_ms,
        )

    routes: list[Route[Any]] = [
        Route(
            kind="features",
            model=FeatureMatrix,
            durable="prioritizer",
            handle=on_features,
            reject=(StageError,),
        ),
        Route(
            kind="models", model=ModelVersion, durable="prioritizer-models", handle=on_model, per_replica=True
        ),
    ]
    return Wiring(routes=routes, router=router, on_stop=snapshots.close)


DEFINITION = ServiceDefinition(
    name="prioritizer",
    default_port=8102,
    build=build,
    description="FeatureMatrix -> PriorityVector (PPO actor, base-policy fallback under a deadline)",
)
