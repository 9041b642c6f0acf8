"""The prioritizer service: each FeatureMatrix becomes a PriorityVector.

The model comes from ``HYLO_MODEL_PATH`` at start-up (then from what the registry names, in
registry mode) and from ``ModelVersion`` announcements on the models subject afterwards (hot reload:
the next matrix uses the new model; a matrix in flight finishes with the one it started with). An
announcement is applied only if the registry confirms it or it is signed (``trust.py``,
``HYLO_MODEL_TRUST``); any other is dead-lettered with the reason. Every replica must see every
announcement, so the models route has a consumer per replica. With no model, a model that fails,
or a missed deadline, the base policy decides and the vector says why (``fallback``); the metrics
count those by reason.

**Shadow mode.** A ``ModelVersion`` announced as a ``candidate`` with ``shadow`` set is loaded into a
second holder (the shadow). For every matrix, once the real vector is computed, the shadow scores
the same matrix in a background task with a stage of its own (its own model thread, the same base
policy, one matrix at a time, under ``HYLO_SHADOW_DEADLINE_MS``) and the result is published
as ``ShadowPriorities`` on the ``shadows`` subject; the placer's recorder stores it. The real vector
never depends on the shadow: it is computed first, from the real holder only, and the handler
returns it without waiting for the shadow. Best-effort: a replica that stops or crashes loses the
shadow scores of the matrices in flight (at most ``MAX_SHADOW_TASKS``; beyond that a matrix is not
shadow-scored), and the shadow shares the replica's CPU with the real model. The shadow is dropped
when its version is announced as a candidate without ``shadow``, retired, or promoted to current
(it is then the real model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from nats.js.api import DeliverPolicy
from prometheus_client import Counter
from pydantic import BaseModel
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from services.prioritizer.models import ModelHolder, checkpoint_sha256
from services.prioritizer.settings import PrioritizerSettings
from services.prioritizer.stage import PrioritizerStage
from services.prioritizer.trust import ModelRefused, ModelTrust, registry_state
from shared.bus.consumer import Delivery, short
from shared.bus.signing import SigningSettings
from shared.bus.snapshots import SnapshotCache
from shared.schemas.codec import RECEIVED
from shared.schemas.messages import FeatureMatrix, MatrixRef, ModelVersion, PriorityVector, ShadowPriorities
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.store.engine import create_engine
from shared.store.outage import store_unavailable

log = logging.getLogger("hylo.prioritizer")

#: shadow scorings in flight per replica; a matrix arriving beyond this is not shadow-scored
MAX_SHADOW_TASKS = 4


class ModelStatus(BaseModel):
    version: str | None
    base_policy: str
    deadline_ms: float
    shadow_version: str | None = None


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


def shadow_message(
    matrix: FeatureMatrix,
    applied: PriorityVector,
    scored: PriorityVector | None,
    version: str,
    reason: str | None,
    elapsed_ms: float,
) -> ShadowPriorities:
    """The ShadowPriorities of ``matrix``: the shadow's priorities when its model scored (``scored``
    decided by ``model``), else its fallback reason and no priorities."""
    by_model = scored is not None and scored.policy == "model"
    if not by_model and reason is None:
        reason = (scored.fallback if scored is not None else None) or "the shadow model did not score"
    return ShadowPriorities(
        cluster=matrix.cluster,
        correlation_id=matrix.correlation_id,
        snapshot_time=matrix.snapshot_time,
        sequence=matrix.sequence,
        model_version=version,
        applied_policy=applied.policy,
        applied_model_version=applied.model_version,
        job_ids=matrix.job_ids,
        priorities=scored.priorities if by_model and scored is not None else (),
        fallback=None if by_model or reason is None else reason[:1024],
        latencies_ms={"shadow": round(elapsed_ms, 3)},  # the rest is in the applied decision
    )


def _may_score(holder: ModelHolder, shadow: ModelHolder) -> bool:
    """Whether a model, real or shadow, is loaded: only then may a long queue's window need its snapshot."""
    return holder.loaded is not None or shadow.loaded is not None


def _stages(
    ctx: ServiceContext, settings: PrioritizerSettings, holder: ModelHolder, shadow: ModelHolder
) -> tuple[PrioritizerStage, PrioritizerStage, SnapshotCache]:
    """The real stage, the shadow's stage, and the snapshot cache both take long queues' windows from."""

    def make_stage(model_holder: ModelHolder, deadline_ms: float) -> PrioritizerStage:
        return PrioritizerStage(
            base_policy=ctx.settings.base_policy,
            deadline_ms=deadline_ms,
            holder=model_holder,
            specs=ctx.specs,
            limits=ctx.publisher.limits,
            snapshots=snapshot_of,
            candidates=settings.model_candidates,
        )

    def prepare(snapshot: QueueSnapshot) -> None:
        """A long queue's model window, computed while the featurizer works (both stages)."""
        stage.prepare(snapshot)
        shadow_stage.prepare(snapshot)

    def scoring() -> bool:
        return _may_score(holder, shadow)

    # a long queue's model window needs its snapshot: while a model is loaded, every snapshot is
    # received as it is published and the newest is decoded and its window prepared while the
    # featurizer works; without a model none is received (the base policy needs none, and each
    # 0.5 MB copy would compete for the cores with the featurizer and the placer)
    snapshots = SnapshotCache(
        ctx.nc,
        ctx.js,
        ctx.subjects,
        ctx.publisher.limits,
        decode_ahead=scoring,
        prepare=prepare,
        large=ctx.publisher.large,
        accept=ctx.shards.owns,
    )

    async def snapshot_of(matrix: FeatureMatrix) -> QueueSnapshot | None:
        return await snapshots.get(matrix.cluster, matrix.correlation_id, matrix.snapshot_seq)

    stage = make_stage(holder, settings.deadline_ms)
    # its own model thread (never queues behind the real model), one matrix at a time
    shadow_stage = make_stage(shadow, settings.shadow_deadline_ms)
    return stage, shadow_stage, snapshots


class _ShadowScorer:
    """Scores matrices with the shadow model in background tasks and publishes ``ShadowPriorities``.

    Never in the real decision's way: ``start`` returns at once, at most ``MAX_SHADOW_TASKS`` scorings
    are in flight, and a failure is counted and logged, never raised.
    """

    def __init__(self, ctx: ServiceContext, holder: ModelHolder, stage: PrioritizerStage) -> None:
        self._ctx = ctx
        self._holder = holder
        self._stage = stage
        self._turn = asyncio.Lock()
        self._counts = Counter(
            "hylo_shadow_matrices",
            "Matrices handled while a shadow model was loaded, by what became of the shadow's scoring",
            ["service", "result"],
            registry=ctx.metrics.registry,
        )
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, matrix: FeatureMatrix, applied: PriorityVector) -> None:
        """Score ``matrix`` in the background if a shadow is loaded and there is room."""
        loaded = self._holder.loaded
        if loaded is None:
            return
        if len(self._tasks) >= MAX_SHADOW_TASKS:
            self._counts.labels(self._ctx.name, "skipped").inc()
            return
        task = asyncio.create_task(self._score(matrix, applied, loaded.version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _score(self, matrix: FeatureMatrix, applied: PriorityVector, version: str) -> None:
        """Score ``matrix`` with the shadow and publish the result (a background task; best-effort)."""
        t0 = time.perf_counter()
        scored: PriorityVector | None = None
        reason: str | None = None
        try:
            async with self._turn:  # overlapping calls would find the model busy, a fallback
                scored = await self._stage.handle(matrix)
        except StageError as err:
            reason = str(err)
        if scored is not None and scored.policy != "model" and self._holder.loaded is None:
            self._counts.labels(self._ctx.name, "cleared").inc()  # taken out of shadow mode meanwhile
            return
        name = scored.model_version if scored is not None and scored.model_version else version
        try:
            message = shadow_message(matrix, applied, scored, name, reason, (time.perf_counter() - t0) * 1e3)
            await self._ctx.publisher.publish(message)
        except Exception as err:  # never let a shadow failure surface anywhere else
            self._counts.labels(self._ctx.name, "lost").inc()
            log.warning("shadow scores of %s/%s lost: %s", matrix.cluster, matrix.correlation_id, err)
            return
        self._counts.labels(self._ctx.name, "scored" if message.fallback is None else "fallback").inc()

    async def stop(self, timeout_s: float) -> None:
        """Give the scorings in flight ``timeout_s`` to publish, cancel the rest, close the stage."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
        self._stage.close()


async def _apply_model_version(holder: ModelHolder, shadow: ModelHolder, version: ModelVersion) -> None:
    """Load, promote or drop the real model and the shadow as a ``ModelVersion`` announcement says."""
    current = holder.current
    shadowed = shadow.current
    is_shadow = shadowed is not None and shadowed[0] == version.version
    if version.status == "current":
        if is_shadow:  # promoted: it is the real model now
            shadow.clear()
        try:
            await asyncio.to_thread(holder.load, version)
        except Exception as err:  # the previous model stays; the announcement is not retried
            log.error("model %s not loaded: %s", version.version, err)
    elif version.status == "retired":
        if current is not None and current[0] == version.version:
            holder.clear()
        if is_shadow:
            shadow.clear()
    elif version.shadow:  # a candidate in shadow mode (replaces the previous shadow)
        try:
            await asyncio.to_thread(shadow.load, version)
        except Exception as err:  # the registry no longer names the previous shadow: drop it too
            shadow.clear()
            log.error("shadow model %s not loaded (no shadow now): %s", version.version, err)
    elif is_shadow:  # a candidate taken out of shadow mode
        shadow.clear()


def _status_router(
    ctx: ServiceContext, settings: PrioritizerSettings, holder: ModelHolder, shadow: ModelHolder
) -> APIRouter:
    """``GET /v1/model``: the model (and shadow) this replica uses now."""
    router = APIRouter()

    @router.get("/v1/model", response_model=ModelStatus, summary="The model this replica uses now")
    async def model_status() -> ModelStatus:
        current = holder.current
        shadowed = shadow.current
        return ModelStatus(
            version=current[0] if current else None,
            base_policy=ctx.settings.base_policy,
            deadline_ms=settings.deadline_ms,
            shadow_version=shadowed[0] if shadowed else None,
        )

    return router


def _trust(ctx: ServiceContext, settings: PrioritizerSettings) -> ModelTrust:
    """The announcement rule of ``HYLO_MODEL_TRUST`` (``trust.py``), with its own read-only use of
    the registry's database in registry mode (the prioritizer writes nothing)."""
    engine: AsyncEngine | None = None
    missing: str | None = None
    if settings.model_trust == "registry":
        missing = missing_sqlite(ctx.store.database_url)
        if missing is None:
            engine = ctx.engine or create_engine(ctx.store.database_url)
        else:
            log.warning("HYLO_MODEL_TRUST=registry: %s; every model announcement will be refused", missing)
    signer = SigningSettings().signer()
    return ModelTrust(settings.model_trust, signer, engine, settings.model_confirm_s, no_registry=missing)


def missing_sqlite(url: str) -> str | None:
    """Why a SQLite registry cannot be read (its file does not exist, or it is in memory), or None.

    Why check: opening a SQLite URL creates an empty file, and a prioritizer must not leave a
    ``hylo.db`` wherever it was started."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite"):
        return None
    database = parsed.database
    if not database or database == ":memory:":
        return f"the registry database {url!r} is in memory (no registry)"
    if not Path(database).exists():
        return f"the registry database {database!r} does not exist"
    return None


async def _from_registry(
    trust: ModelTrust, holder: ModelHolder, shadow: ModelHolder, clusters: list[str]
) -> None:
    """Registry mode, at start: load what the registry names (over ``HYLO_MODEL_PATH``); a database
    that does not answer yet leaves the start-up model, and the next announcement is checked anyway."""
    if trust.engine is None:
        return
    for cluster in clusters:
        try:
            named = await registry_state(trust.engine, cluster)
        except Exception as err:
            log.warning("registry not readable at start (%s): keeping the start-up model", short(err))
            return
        for version in named:
            await _apply_model_version(holder, shadow, version)


async def build(ctx: ServiceContext) -> Wiring:
    """The prioritizer's routes (matrices, model announcements), its status endpoint and its stop."""
    settings = PrioritizerSettings()
    trust = _trust(ctx, settings)
    holder = ModelHolder()
    shadow = ModelHolder()  # a candidate scored beside the current model, never applied
    if settings.model_path is not None:
        first_cluster = next(iter(ctx.specs))
        await asyncio.to_thread(holder.load, startup_version(str(settings.model_path), first_cluster))
    await _from_registry(trust, holder, shadow, list(ctx.specs))
    stage, shadow_stage, snapshots = _stages(ctx, settings, holder, shadow)
    await snapshots.receive(_may_score(holder, shadow))
    shadow_scorer = _ShadowScorer(ctx, shadow, shadow_stage)
    fallbacks = ctx.metrics.fallbacks

    async def on_features(matrix: FeatureMatrix, delivery: Delivery) -> PriorityVector:
        wait = queue_wait_ms(delivery)
        if matrix.cluster not in ctx.specs:  # every service serves the same cluster map
            raise StageError(f"unknown cluster {matrix.cluster!r}: HYLO_CLUSTERS lists {sorted(ctx.specs)}")
        vector = await stage.handle(matrix)  # the real decision: from the real holder only
        if vector.fallback:
            fallbacks.labels(ctx.name, _reason_class(vector.fallback)).inc()
        shadow_scorer.start(matrix, vector)  # after, and without waiting for it
        digest = RECEIVED.digest_of(matrix)
        if digest is not None:  # the vector names the matrix instead of re-sending it
            ref = MatrixRef(seq=delivery.stream_seq, sha256=digest)
            vector = vector.model_copy(update={"matrix_ref": ref})
        return with_wait(vector, "prioritize", wait)

    async def on_model(version: ModelVersion, delivery: Delivery) -> None:
        try:
            await trust.confirm(version, delivery)
        except ModelRefused as err:
            log.warning("model announcement %s refused: %s", version.version, err)
            raise
        trust.adopted(version, delivery)
        await _apply_model_version(holder, shadow, version)
        # snapshots are received only while a model may need them
        await snapshots.receive(_may_score(holder, shadow))

    async def on_stop() -> None:
        # a deadline's worth of time to publish the shadow scores in flight, then give up
        await shadow_scorer.stop(timeout_s=settings.deadline_ms / 1000 + 0.5)
        await snapshots.close()
        if trust.engine is not None and trust.engine is not ctx.engine:
            await trust.engine.dispose()

    routes: list[Route[Any]] = [
        Route(
            kind="features",
            model=FeatureMatrix,
            durable="prioritizer",
            handle=on_features,
            sharded=True,
            reject=(StageError,),
        ),
        Route(
            kind="models",
            model=ModelVersion,
            durable="prioritizer-models",
            handle=on_model,
            per_replica=True,
            reject=(ModelRefused,),
            verify=trust.verify,
            # registry mode starts from what the registry names, so old announcements are not needed
            deliver_policy=DeliverPolicy.NEW if trust.mode == "registry" else DeliverPolicy.ALL,
            transient=store_unavailable if trust.mode == "registry" else None,
        ),
    ]
    return Wiring(routes=routes, router=_status_router(ctx, settings, holder, shadow), on_stop=on_stop)


DEFINITION = ServiceDefinition(
    name="prioritizer",
    default_port=8102,
    build=build,
    description="FeatureMatrix -> PriorityVector (PPO actor, base-policy fallback under a deadline)",
)
