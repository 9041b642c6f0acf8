"""The placer service: each PriorityVector becomes a PlacementDecision; its recorder (``recorder.py``)
stores decisions, jobs, outcomes, model versions and shadow models' priorities.

Order of effects for one vector: decode it (it names its matrix, which was decoded ahead as the
featurizer published it, ``shared.bus.ahead``, or is read from the features stream), find its
snapshot (``shared.bus.snapshots``: every snapshot reaches every placer replica as it is published
and the newest is decoded and described while the featurizer and the prioritizer work; one not in
memory is read from the snapshots stream), decide (``stage.py``: one scheduling cycle of the
simulator), publish the decision, ack. Deciding writes nothing to the database. A vector whose
snapshot is gone (superseded in the snapshots stream, which keeps the newest per cluster) is stale:
it is acked without a decision and counted, as latest-wins skips stale snapshots. A republished
decision has the same ``Nats-Msg-Id`` and is dropped by the stream's duplicate window.

Why the recorder lives here: the placer is the pipeline service that owns the database connection;
the ``recorder-*`` consumers are shared by all placer replicas. ``HYLO_PLACER_ROLE`` splits deciding
and recording into separate processes (``decide`` and ``record`` replicas), so that writing a
1,024-row decision never holds the GIL of the process that is placing the next one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import Counter

from services.niceness import lower_priority
from services.placer.recorder import recorder_routes
from services.placer.settings import PlacerServiceSettings
from services.placer.stage import SERVICE_SETTINGS, PlacerStage
from shared.bus.ahead import DecodeAhead, fetch_stored
from shared.bus.consumer import Delivery
from shared.bus.snapshots import SnapshotCache
from shared.schemas.codec import RECEIVED, MissingReference
from shared.schemas.messages import (
    FeatureMatrix,
    PriorityVector,
)
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.service.offload import run_stage, snapshot_rows

log = logging.getLogger("hylo.placer")


async def build(ctx: ServiceContext) -> Wiring:
    settings = PlacerServiceSettings()
    if settings.placer_role == "record" and settings.recorder_nice:
        # off the decision path: the deciding replica and the other stages get the cores first
        nice = lower_priority(settings.recorder_nice)
        log.info("record-role replica: nice %d (HYLO_RECORDER_NICE=%d)", nice, settings.recorder_nice)
    placer_settings = SERVICE_SETTINGS.model_copy(update={"solve_when_all_fit": settings.cpsat_always_solve})
    stage = PlacerStage(
        ctx.specs,
        placement=settings.placement,
        settings=placer_settings,
        limits=ctx.publisher.limits,
        config=settings.sim_config(),
    )
    engine = ctx.engine
    assert engine is not None, "the placer needs the database (needs_store=True)"
    latency = ctx.metrics.decision_seconds

    in_hand = [0]  # vectors this replica is handling now (``placer_decode_ahead`` idle)
    mode = settings.placer_decode_ahead

    def ahead() -> bool:
        return mode == "on" or (mode == "idle" and in_hand[0] == 0)

    snapshots = SnapshotCache(
        ctx.nc,
        ctx.js,
        ctx.subjects,
        ctx.publisher.limits,
        settings.snapshot_cache,
        decode_ahead=ahead,
        prepare=stage.prepare,
        large=ctx.publisher.large,
        accept=ctx.shards.owns,
    )
    stale = Counter(
        "hylo_stale_vectors",
        "Priority vectors acked without a decision: their snapshot was superseded",
        ["service", "cluster"],
        registry=ctx.metrics.registry,
    )

    async def on_priorities(vector: PriorityVector, delivery: Delivery) -> None:
        in_hand[0] += 1
        try:
            await place(vector, delivery)
        finally:
            in_hand[0] -= 1

    async def place(vector: PriorityVector, delivery: Delivery) -> None:
        wait = queue_wait_ms(delivery)
        matrix = vector.matrix
        stage.spec_of(vector.cluster)  # an unknown cluster is refused (dead letter), not stale
        t_lookup = time.perf_counter()
        snapshot = await snapshots.get(vector.cluster, vector.correlation_id, matrix.snapshot_seq)
        lookup_ms = (time.perf_counter() - t_lookup) * 1e3
        if snapshot is None:
            stale.labels(ctx.name, vector.cluster).inc()
            log.info(
                "vector %s/%s: its snapshot is superseded, no decision", vector.cluster, vector.correlation_id
            )
            return
        prepared = snapshots.take_prepared(vector.cluster, vector.correlation_id)
        decided = await run_stage(snapshot_rows(snapshot), stage.handle, vector, snapshot, None, prepared)
        decision = with_wait(decided, "place", wait)
        # finding the snapshot (memory, decoding, or the stream) is part of the placer's time
        latencies = {**decision.latencies_ms, "place_snapshot": round(lookup_ms, 3)}
        decision = decision.model_copy(update={"latencies_ms": latencies})
        await ctx.publisher.publish(decision)
        latency.labels(ctx.name, decision.cluster).observe(sum(decision.latencies_ms.values()) / 1000.0)

    async def fetch_matrix(missing: MissingReference) -> bool:
        """A vector's matrix not decoded yet: still waiting to be decoded ahead (the vector came
        first), else read from the features stream by the sequence the vector names (this replica
        started later, missed it or evicted it)."""
        limits = ctx.publisher.limits
        await matrices.decode_named(missing.sha256)
        if RECEIVED.with_digest(missing.sha256, FeatureMatrix, limits) is not None:
            return True
        return await fetch_stored(ctx.js, ctx.subjects, FeatureMatrix, missing, limits, ctx.publisher.large)

    decide: list[Route[Any]] = [
        Route(
            kind="priorities",
            model=PriorityVector,
            durable="placer",
            handle=on_priorities,
            sharded=True,
            reject=(StageError,),
            fetch_missing=fetch_matrix,
        ),
    ]
    record = recorder_routes(engine, ctx.specs)
    role = settings.placer_role
    routes = (decide if role != "record" else []) + (record if role != "decide" else [])
    # every matrix is decoded as the featurizer publishes it, while the prioritizer works: its
    # vector, which nests it unchanged, then decodes without it (``shared.bus.ahead``)
    matrices = DecodeAhead(
        ctx.nc,
        ctx.subjects,
        "features",
        FeatureMatrix,
        ctx.publisher.limits,
        decode_ahead=ahead,
        large=ctx.publisher.large,
        accept=ctx.shards.owns,
    )
    if role != "record" and mode != "off":  # off: a vector's snapshot is read from the stream
        await snapshots.start()
        await matrices.start()

    async def on_stop() -> None:
        await matrices.close()
        await snapshots.close()

    return Wiring(routes=routes, on_stop=on_stop)


DEFINITION = ServiceDefinition(
    name="placer",
    default_port=8103,
    build=build,
    needs_store=True,
    description="PriorityVector -> PlacementDecision (the simulator's cycle); records decisions and jobs",
)
