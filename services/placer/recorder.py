"""The recorder: every decision, job, outcome, model version and shadow score lands in the store.

Why it is its own part, off the deciding path: a decision is a pure function of a vector and its
snapshot (``stage.py``), and writing its rows (1,024 for a 1,024-job queue, as columns in one
statement: ``shared.store.bulk``, ``docs/results/recorder-cost.md``) is work the next decision need
not wait for. Each write is a durable consumer of its own stream that acks after its write commits,
so a crash anywhere redelivers and every row lands exactly once (every write is insert-or-ignore on a
natural key), across restarts too. The recorder runs in the placer's process
(``HYLO_PLACER_ROLE=all``) or in processes of its own (``record``), shared by all replicas through
the durable consumers' queue groups.

When the database is unavailable (down, restarting, unreachable, locked), a write's error is told
apart from a bad write (``shared.store.outage.store_unavailable``): the message goes back to
JetStream with a delay that doubles up to ``HYLO_RETRY_BACKOFF_MAX_S`` and is retried for
``HYLO_RETRY_WINDOW_S`` (15 minutes) before it is dead-lettered, ``/readyz`` says "store
unavailable, N messages waiting" meanwhile, and ``hylo deadletters replay`` re-applies what was
dead-lettered through the same writes (``apply_record``).

The jobs of a queue are stored from the feature matrices (``recorder-jobs``): a matrix carries every
featurized job of its snapshot. This used to be the deciding placer's work after each decision,
where a restart between the decision and the write lost the rows.

What the recorder does not trust (issue 20, item 2): a model announcement never changes a status in
the registry (``record_announced_model``: a version the registry does not know is kept as a
candidate; the registry alone promotes and retires), and an outcome that disagrees with the one
already stored for its job is not dropped silently: it is logged and dead-lettered as a conflict
(``OutcomeConflict``), and the first stays. Which sender is right cannot be told until senders are
authenticated (NATS accounts, item 1); the conflict makes the disagreement visible meanwhile.

Each cluster's spec (what its services run with) is stored in ``clusters.spec`` with the first write
of the cluster in this process (``ClusterSpecs``), so that the report and analysts know its capacity
whoever started the services (issue 21: ``hylo run`` and ``hylo up`` left it NULL).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shared.bus.consumer import Delivery
from shared.domain.cluster import ClusterSpec
from shared.schemas.base import Message
from shared.schemas.messages import (
    FeatureMatrix,
    JobOutcome,
    ModelVersion,
    PlacementDecision,
    ShadowPriorities,
)
from shared.schemas.stage_error import StageError
from shared.schemas.subjects import Kind
from shared.service import Route
from shared.store.outage import store_unavailable
from shared.store.writes import (
    outcome_conflict,
    record_announced_model,
    record_decision,
    record_outcome,
    record_pending,
    record_shadow,
    store_cluster_spec,
)

__all__ = ["RECORDED", "KnownJobs", "OutcomeConflict", "apply_record", "recorder_routes"]

log = logging.getLogger("hylo.recorder")


class OutcomeConflict(Exception):
    """An outcome that disagrees with the one stored for the same job (dead-lettered, not stored)."""


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


class ClusterSpecs:
    """The cluster specs to store, and which of them this process has stored (once each).

    ``store`` runs in the transaction of a write; the caller calls ``stored`` after it commits, so a
    rolled-back transaction leaves the spec to the next write."""

    def __init__(self, specs: Mapping[str, ClusterSpec]) -> None:
        self._json = {name: spec.model_dump(mode="json") for name, spec in specs.items()}
        self._done: set[str] = set()

    async def store(self, conn: AsyncConnection, cluster: str) -> bool:
        """Store ``cluster``'s spec if this process has not yet; True if it did now."""
        spec = self._json.get(cluster)
        if spec is None or cluster in self._done:
            return False
        await store_cluster_spec(conn, cluster, spec)
        return True

    def stored(self, cluster: str) -> None:
        self._done.add(cluster)


#: what each recorder durable stores, by the kind of message it reads (``hylo deadletters replay``)
RECORDED: dict[str, tuple[Kind, type[Message]]] = {
    "recorder-jobs": ("features", FeatureMatrix),
    "recorder-decisions": ("placements", PlacementDecision),
    "recorder-outcomes": ("outcomes", JobOutcome),
    "recorder-models": ("models", ModelVersion),
    "recorder-shadows": ("shadows", ShadowPriorities),
}


async def apply_record(conn: AsyncConnection, message: Message) -> int:
    """Store one recorded message in ``conn``'s transaction; returns the rows that were new.

    The recorder's handlers and ``hylo deadletters replay`` write through this one function, so a
    replayed dead letter is stored exactly as the live message would have been (insert-or-ignore:
    a row already there is left alone)."""
    if isinstance(message, FeatureMatrix):
        return await record_pending(conn, message.cluster, message.jobs)
    if isinstance(message, PlacementDecision):
        return await record_decision(conn, message)
    if isinstance(message, JobOutcome):
        return int(await record_outcome(conn, message))
    if isinstance(message, ModelVersion):
        return int(await record_announced_model(conn, message))
    if isinstance(message, ShadowPriorities):
        return await record_shadow(conn, message)
    raise TypeError(f"the recorder stores no {type(message).__name__}")


def recorder_routes(
    engine: AsyncEngine, clusters: Collection[str] | Mapping[str, ClusterSpec]
) -> list[Route[Any]]:
    """The recorder's durable consumers, each writing one kind of message to the store. A matrix
    of a cluster not in ``clusters`` is refused (dead-lettered), as the deciding stages refuse it.
    ``clusters`` given as specs (name -> spec) also stores each cluster's spec (module docstring)."""
    known = KnownJobs()
    specs = ClusterSpecs(clusters if isinstance(clusters, Mapping) else {})

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
            spec_now = await specs.store(conn, matrix.cluster)
            await record_pending(conn, matrix.cluster, matrix.jobs.take(rows))
        known.add(matrix.cluster, new)
        if spec_now:
            specs.stored(matrix.cluster)

    async def on_record(message: Message, _delivery: Delivery) -> None:
        async with engine.begin() as conn:
            spec_now = await specs.store(conn, message.cluster)
            new = await apply_record(conn, message)
            if isinstance(message, JobOutcome) and not new:
                conflict = await outcome_conflict(conn, message)
                if conflict is not None:
                    text = (
                        f"outcome of job {message.job_id!r} on {message.cluster!r} conflicts with the one "
                        f"stored (kept): {conflict}"
                    )
                    log.warning("%s", text)
                    raise OutcomeConflict(text)
        if spec_now:
            specs.stored(message.cluster)

    routes: list[Route[Any]] = [
        Route(
            kind="features",
            model=FeatureMatrix,
            durable="recorder-jobs",
            handle=on_matrix,
            reject=(StageError,),
            transient=store_unavailable,
        )
    ]
    for durable, (kind, model) in RECORDED.items():
        if durable != "recorder-jobs":
            routes.append(
                Route(
                    kind=kind,
                    model=model,
                    durable=durable,
                    handle=on_record,
                    transient=store_unavailable,
                    reject=(OutcomeConflict,),
                )
            )
    return routes
