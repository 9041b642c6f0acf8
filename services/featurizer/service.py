"""The featurizer service: each QueueSnapshot becomes a FeatureMatrix.

Snapshots are consumed latest-wins: when a burst queues several snapshots of one cluster, only the
newest is featurized (the older ones are acked unhandled), so decision latency stays bounded. A
snapshot that is well-formed but unusable (unknown cluster, nodes that contradict the spec) is
dead-lettered with the reason. Featurizing a large snapshot runs in a worker thread so ``/healthz``
stays responsive; one of ordinary size runs on the event loop (``shared.service.offload``).
"""

from __future__ import annotations

from services.featurizer.stage import FeaturizerStage
from shared.bus.consumer import Delivery
from shared.schemas.messages import FeatureMatrix
from shared.schemas.snapshot import QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.service import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.service.offload import run_stage, snapshot_rows


async def build(ctx: ServiceContext) -> Wiring:
    stage = FeaturizerStage(ctx.specs)

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
        reject=(StageError,),
    )
    return Wiring(routes=[route])


DEFINITION = ServiceDefinition(
    name="featurizer",
    default_port=8101,
    build=build,
    description="QueueSnapshot -> FeatureMatrix (the paper's job and cluster features, in [0, 1])",
)
