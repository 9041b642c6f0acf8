"""The recorder: every decision, job, outcome, model version and shadow score lands in the store.

Why it is its own part, off the deciding path: a decision is a pure function of a vector and its
snapshot (``stage.py``), and writing its rows (1,024 for a 1,024-job queue) costs more CPU than
deciding. Each write is a durable consumer of its own stream that acks after its write commits, so
a crash anywhere redelivers and every row lands exactly once (every write is insert-or-ignore on a
natural key), across restarts too. The recorder runs in the placer's process
(``HYLO_PLACER_ROLE=all``) or in processes of its own (``record``), shared by all replicas through
the durable consumers' queue groups.

The jobs of a queue are stored from the feature matrices (``recorder-jobs``): a matrix carries every
featurized job of its snapshot. This used to be the deciding placer's work after each decision,
where a restart between the decision and the write lost the rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.bus.consumer import Delivery
from shared.schemas.messages import (
    FeatureMatrix,
    JobOutcome,
    ModelVersion,
    PlacementDecision,
    ShadowPriorities,
)
from shared.schemas.stage_error import StageError
from shared.service import Route
from shared.store.writes import (
    record_decision,
    record_model_version,
    record_outcome,
    record_pending,
    record_shadow,
)

__all__ = ["KnownJobs", "recorder_routes"]


class KnownJobs:
    """Jobs this replica has stored (most recent ``capacity``), so a queue is not re-inserted per matrix.

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


def recorder_routes(engine: AsyncEngine, clusters: Collection[str]) -> list[Route[Any]]:
    """The recorder's durable consumers, each writing one kind of message to the store. A matrix
    of a cluster not in ``clusters`` is refused (dead-lettered), as the deciding stages refuse it."""
    known = KnownJobs()

    async def on_matrix(matrix: FeatureMatrix, _delivery: Delivery) -> None:
        if matrix.cluster not in clusters:
            listed = ", ".join(sorted(clusters)) or "none"
            raise StageError(
                f"unknown cluster {matrix.cluster!r}: no cluster spec configured (known: {listed})"
            )
        new = known.unknown(matrix.cluster, list(matrix.job_ids))
        if not new:
            return
        rows = [i for i, j in enumerate(matrix.jobs.job_id) if j in new]
        async with engine.begin() as conn:
            await record_pending(conn, matrix.cluster, matrix.jobs.take(rows))
        known.add(matrix.cluster, new)

    async def on_decision(decision: PlacementDecision, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_decision(conn, decision)

    async def on_outcome(outcome: JobOutcome, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_outcome(conn, outcome)

    async def on_model(version: ModelVersion, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_model_version(conn, version)

    async def on_shadow(shadow: ShadowPriorities, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            await record_shadow(conn, shadow)

    return [
        Route(
            kind="features",
            model=FeatureMatrix,
            durable="recorder-jobs",
            handle=on_matrix,
            reject=(StageError,),
        ),
        Route(kind="placements", model=PlacementDecision, durable="recorder-decisions", handle=on_decision),
        Route(kind="outcomes", model=JobOutcome, durable="recorder-outcomes", handle=on_outcome),
        Route(kind="models", model=ModelVersion, durable="recorder-models", handle=on_model),
        Route(kind="shadows", model=ShadowPriorities, durable="recorder-shadows", handle=on_shadow),
    ]
