"""A small cluster history written through the store's real writes, and the same history in Python.

Ten jobs of three users on two partitions, submitted over two days (one a quarter second before
midnight, where a cast that rounds would put it on the wrong day), decided in three snapshots: by a
registered model, by a model given by path (``external``), and by the FCFS fallback. Outcomes say
where each job ran (V100 or T4 nodes, or not reported); one job was started by the cluster's own
cycle (its correlation id has no decision), one is still waiting. ``History`` keeps the messages, so
tests compute every expected answer from them, independently of SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.schemas import (
    JobOutcome,
    JobPlacement,
    ModelVersion,
    PendingJob,
    PendingJobs,
    PlacementDecision,
    Placements,
)
from shared.store import (
    record_decision,
    record_external_model,
    record_model_version,
    record_outcome,
    record_pending,
    store_cluster_spec,
)
from tests.schemas.message_factories import SPEC_DOC

DAY = 86_400.0

#: job -> (submit_s, gpus, user, partition)
JOBS = {
    "j0": (100.0, 1, "u0", "a"),
    "j1": (200.0, 2, "u0", "a"),
    "j2": (300.0, 4, "u1", "b"),
    "j3": (DAY - 0.25, 1, "u1", "a"),
    "j4": (DAY + 50.0, 8, "u2", "b"),
    "j5": (DAY + 60.0, 1, "u2", "b"),
    "j6": (DAY + 70.0, 2, "u0", "b"),
    "j7": (DAY + 80.0, 1, "u1", "a"),
    "j8": (DAY + 90.0, 4, "u2", "a"),
    "j9": (DAY + 100.0, 1, "u0", "a"),
}

#: one decision: (snapshot time, policy, model version, fallback, rows), a row being
#: (job, score, nodes, reserved_s, pool_gpus)
DECISIONS = {
    "s1": (
        DAY + 200.0,
        "model",
        "m-{cluster}",
        None,
        [
            ("j3", 2.5, ("v0",), None, 16.0),
            ("j2", 1.25, (), DAY + 900.0, 16.0),
            ("j0", -0.5, ("t0",), None, 24.0),
            ("j1", None, (), None, 24.0),
        ],
    ),
    "s2": (
        DAY + 1000.0,
        "model",
        "file-{cluster}",
        None,
        [
            ("j2", 0.75, ("v0", "v1"), None, 16.0),
            ("j1", 0.5, (), None, 24.0),
            ("j4", -1.0, (), DAY + 5000.0, 16.0),
            ("j5", 0.25, ("t1",), None, 8.0),
        ],
    ),
    "s3": (
        DAY + 3000.0,
        "fcfs",
        None,
        "no model loaded",
        [
            ("j1", None, ("t0",), None, 24.0),
            ("j4", None, (), DAY + 5000.0, 16.0),
            ("j6", None, ("v1",), None, 16.0),
            ("j7", None, (), None, 24.0),
            ("j8", None, (), None, 24.0),
        ],
    ),
}

#: job -> (correlation of the snapshot that started it, start, end, nodes, GPUs per node, GPU type)
OUTCOMES = {
    "j3": ("s1", DAY + 200.0, DAY + 800.0, ("v0",), (1,), "V100"),
    "j0": ("s1", DAY + 200.0, DAY + 4000.0, ("t0",), (1,), "T4"),
    "j2": ("s2", DAY + 1000.0, DAY + 9000.0, ("v0", "v1"), (2, 2), "V100"),
    "j5": ("s2", DAY + 1000.0, DAY + 1100.0, ("t1",), (1,), "T4"),
    "j1": ("s3", DAY + 3000.0, DAY + 3600.0, ("t0",), (2,), "T4"),
    "j6": ("s3", DAY + 3000.0, DAY + 7000.0, ("v1",), (2,), "V100"),
    "j4": ("s4", DAY + 5000.0, DAY + 6000.0, (), (), None),  # the cluster's own cycle, not reported
    "j7": ("s4", DAY + 5000.0, DAY + 5100.0, ("t1",), (1,), "T4"),
    "j9": ("s4", DAY + 5200.0, DAY + 5300.0, ("v0",), (1,), "V100"),
}
# j8 is still waiting


@dataclass
class History:
    """What was written: the messages, and the model versions' statuses."""

    cluster: str
    jobs: PendingJobs
    decisions: dict[str, PlacementDecision] = field(default_factory=dict)
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    model_status: dict[str, str] = field(default_factory=dict)

    def corr(self, name: str) -> str:
        return f"{self.cluster}-{name}"


def _model(cluster: str, version: str, status: str) -> ModelVersion:
    return ModelVersion(
        cluster=cluster,
        correlation_id=f"register-{version}",
        version=version,
        sha256=(version.encode().hex() * 8)[:64],
        uri=f"/models/{version}",
        status=status,  # type: ignore[arg-type]
        created_at=datetime(2026, 11, 1, tzinfo=UTC),
    )


def _decision(history: History, name: str) -> PlacementDecision:
    time, policy, version, fallback, rows = DECISIONS[name]
    version = None if version is None else version.format(cluster=history.cluster)
    n = len(rows)
    placements = [
        JobPlacement(
            job_id=job,
            rank=rank,
            priority=float(n - rank),
            nodes=nodes,
            mode="pack" if nodes else None,
            reserved_s=reserved,
            features={"wait": 0.25 * rank, "gpus": 0.5},
            score=score,
            raw_features={
                "pool_gpus": pool,
                "pool_free_gpus": 2.0,
                "pool_nodes": 4.0,
                "pool_idle_nodes": 0.0,
            },
        )
        for rank, (job, score, nodes, reserved, pool) in enumerate(rows)
    ]
    return PlacementDecision(
        cluster=history.cluster,
        correlation_id=history.corr(name),
        snapshot_time=time,
        sequence=int(name[1:]),
        policy=policy,
        model_version=version,
        fallback=fallback,
        placements=Placements.of(placements),
        placer="best-fit",
        latencies_ms={"featurize": 1.0, "prioritize": 2.0, "place": 3.0},
    )


def _outcome(history: History, job: str) -> JobOutcome:
    corr, start, end, nodes, node_gpus, gpu_type = OUTCOMES[job]
    submit, gpus, _, _ = JOBS[job]
    return JobOutcome(
        cluster=history.cluster,
        correlation_id=history.corr(corr),
        job_id=job,
        submit_s=submit,
        start_s=start,
        end_s=end,
        gpus=gpus,
        nodes=nodes,
        node_gpus=node_gpus,
        gpu_type=gpu_type,
    )


async def seed_history(
    engine: AsyncEngine, cluster: str, *, outcomes_first: bool = False, jobs_last: bool = False
) -> History:
    """Write the history of the module docstring for ``cluster``, as the recorder and ``hylo run``
    write it (``shared.store.writes``), and return it. ``outcomes_first``: the outcomes are recorded
    (in a transaction of their own) before the decisions that started them, as after an outage whose
    dead letters were replayed in another order. ``jobs_last``: the jobs' rows are recorded last, in a
    transaction of their own, after the outcomes and decisions (likewise)."""
    jobs = PendingJobs.of(
        PendingJob(job_id=j, submit_s=submit, gpus=gpus, est_runtime_s=3600.0, user=user, partition=part)
        for j, (submit, gpus, user, part) in JOBS.items()
    )
    registered, external = f"m-{cluster}", f"file-{cluster}"
    history = History(cluster, jobs, model_status={registered: "current", external: "external"})
    async with engine.begin() as conn:
        await store_cluster_spec(conn, cluster, SPEC_DOC)
        if not jobs_last:
            await record_pending(conn, cluster, jobs)
        await record_model_version(conn, _model(cluster, registered, "current"))
        # as ``hylo run --model`` records it: the prioritizer's start-up version, status external
        await record_external_model(conn, _model(cluster, external, "current"))
        history.decisions = {name: _decision(history, name) for name in DECISIONS}
        history.outcomes = {job: _outcome(history, job) for job in OUTCOMES}
        if not outcomes_first:
            for d in history.decisions.values():
                await record_decision(conn, d)
        for o in history.outcomes.values():
            await record_outcome(conn, o)
    if outcomes_first:
        async with engine.begin() as conn:
            for d in history.decisions.values():
                await record_decision(conn, d)
    if jobs_last:
        async with engine.begin() as conn:
            await record_pending(conn, cluster, jobs)
    return history
