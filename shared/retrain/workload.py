"""The recent workload of a cluster, rebuilt from the database into a trace (a ``JobTable``).

Every job the adapters reported is in ``jobs`` (its request, as first seen pending) and every job
that finished is in ``outcomes`` (its submit, start and end on the cluster's clock). Joined on
(cluster, job_id), they are a trace the simulator can replay:

=================  ============================================================================
``JobTable``       from
=================  ============================================================================
``ids``            ``jobs.job_id``
``submit``         ``outcomes.submit_s`` (the outcome's, i.e. the time the job entered the queue),
                   rebased so the first job arrives at 0; ``TraceMeta.origin`` keeps the offset
``runtime``        ``outcomes.end_s - outcomes.start_s`` (the true runtime)
``estimate``       ``jobs.est_runtime_s`` (the time limit / estimate as recorded)
``gpus``,          ``jobs.gpus``, ``jobs.gpu_milli``, ``jobs.cpus_milli``, ``jobs.mem_mib``
``gpu_milli``, ...
``users``, ``vcs``, ``jobs.user_name``, ``jobs.partition``, ``jobs.qos`` (interned, first seen first)
``qoses``
``type_set``       the allowed GPU types: ``jobs.gpu_types`` (revision 0003); for rows written
                   before it (NULL), ``gpu_types_by_partition`` (a partition's GPU types), else
                   "any type"
=================  ============================================================================

Why ``outcomes.submit_s`` and not ``jobs.submit_s``: both come from the adapter and agree; the
outcome is written when the job ends, so a job is in the rebuilt trace exactly when it has one.
Jobs still pending or running (a ``jobs`` row without an outcome) and outcomes whose job was never
seen pending (no request recorded) are left out and counted, as trace loaders do.

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, and_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.domain.exclusions import Exclusion
from shared.domain.jobs import NUMERIC_FIELDS, CodeBook, JobTable, TraceMeta, TypeSetBook
from shared.store.models import Job, Outcome, table_of

__all__ = [
    "RebuiltWorkload",
    "RecordedJob",
    "fetch_recorded_jobs",
    "latest_submit",
    "rebuild_table",
    "rebuild_workload",
]

MAX_EXAMPLES = 5


JOBS = table_of(Job)
OUTCOMES = table_of(Outcome)


@dataclass(frozen=True)
class RecordedJob:
    """One finished job as the database holds it (request from ``jobs``, times from ``outcomes``)."""

    job_id: str
    submit_s: float
    start_s: float
    end_s: float
    gpus: int
    gpu_milli: int
    cpus_milli: int
    mem_mib: int
    est_runtime_s: float
    user: str
    partition: str
    qos: str
    status: str
    gpu_types: tuple[str, ...] = ()

    @property
    def runtime_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class RebuiltWorkload:
    """The rebuilt trace and the jobs of the time range that could not go into it."""

    table: JobTable
    jobs: list[RecordedJob]
    exclusions: list[Exclusion] = field(default_factory=list)

    @property
    def excluded_count(self) -> int:
        return sum(e.count for e in self.exclusions)


def _exclusion(reason: str, ids: Sequence[str]) -> Exclusion:
    return Exclusion(reason=reason, count=len(ids), example_ids=list(ids[:MAX_EXAMPLES]))


async def fetch_recorded_jobs(
    engine: AsyncEngine,
    cluster: str,
    *,
    since_s: float | None = None,
    until_s: float | None = None,
    statuses: Sequence[str] | None = None,
) -> tuple[list[RecordedJob], list[Exclusion]]:
    """Finished jobs of ``cluster`` submitted in ``[since_s, until_s)`` (cluster clock), by submit.

    ``statuses`` keeps only outcomes with those statuses (default: all; a failed job held its GPUs
    too). Returns the jobs and the exclusions (no outcome yet; outcome without a request).
    """
    if not cluster:
        raise ValueError("cluster: expected a cluster name, got an empty string")
    if since_s is not None and until_s is not None and until_s <= since_s:
        raise ValueError(f"until_s must be after since_s, got since_s={since_s}, until_s={until_s}")

    def in_range(col: ColumnElement[float]) -> list[ColumnElement[bool]]:
        conds: list[ColumnElement[bool]] = []
        if since_s is not None:
            conds.append(col >= since_s)
        if until_s is not None:
            conds.append(col < until_s)
        return conds

    cols = [
        JOBS.c.job_id,
        OUTCOMES.c.submit_s,
        OUTCOMES.c.start_s,
        OUTCOMES.c.end_s,
        JOBS.c.gpus,
        JOBS.c.gpu_milli,
        JOBS.c.cpus_milli,
        JOBS.c.mem_mib,
        JOBS.c.est_runtime_s,
        JOBS.c.user_name,
        JOBS.c.partition,
        JOBS.c.qos,
        OUTCOMES.c.status,
        JOBS.c.gpu_types,
    ]
    joined = JOBS.join(
        OUTCOMES, and_(JOBS.c.cluster == OUTCOMES.c.cluster, JOBS.c.job_id == OUTCOMES.c.job_id)
    )
    stmt = (
        select(*cols)
        .select_from(joined)
        .where(JOBS.c.cluster == cluster, *in_range(OUTCOMES.c.submit_s))
        .order_by(OUTCOMES.c.submit_s, OUTCOMES.c.id)
    )
    if statuses is not None:
        stmt = stmt.where(OUTCOMES.c.status.in_(list(statuses)))
    pending_stmt = (
        select(JOBS.c.job_id)
        .select_from(
            JOBS.outerjoin(
                OUTCOMES, and_(JOBS.c.cluster == OUTCOMES.c.cluster, JOBS.c.job_id == OUTCOMES.c.job_id)
            )
        )
        .where(JOBS.c.cluster == cluster, OUTCOMES.c.id.is_(None), *in_range(JOBS.c.submit_s))
        .order_by(JOBS.c.submit_s, JOBS.c.id)
    )
    orphan_stmt = (
        select(OUTCOMES.c.job_id)
        .select_from(
            OUTCOMES.outerjoin(
                JOBS, and_(JOBS.c.cluster == OUTCOMES.c.cluster, JOBS.c.job_id == OUTCOMES.c.job_id)
            )
        )
        .where(OUTCOMES.c.cluster == cluster, JOBS.c.id.is_(None), *in_range(OUTCOMES.c.submit_s))
        .order_by(OUTCOMES.c.submit_s, OUTCOMES.c.id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
        pending = [str(r[0]) for r in await conn.execute(pending_stmt)]
        orphans = [str(r[0]) for r in await conn.execute(orphan_stmt)]
    jobs = [
        RecordedJob(
            job_id=r.job_id,
            submit_s=float(r.submit_s),
            start_s=float(r.start_s),
            end_s=float(r.end_s),
            gpus=int(r.gpus),
            gpu_milli=int(r.gpu_milli),
            cpus_milli=int(r.cpus_milli),
            mem_mib=int(r.mem_mib),
            est_runtime_s=float(r.est_runtime_s),
            user=r.user_name,
            partition=r.partition,
            qos=r.qos,
            status=r.status,
            gpu_types=tuple(r.gpu_types or ()),
        )
        for r in rows
    ]
    exclusions = []
    if pending:
        exclusions.append(_exclusion("no outcome yet (still pending or running)", pending))
    if orphans:
        exclusions.append(_exclusion("outcome without a recorded request (jobs row missing)", orphans))
    return jobs, exclusions


def rebuild_table(
    jobs: Sequence[RecordedJob],
    *,
    name: str,
    gpu_types_by_partition: Mapping[str, Sequence[str]] | None = None,
) -> JobTable:
    """A submit-sorted, rebased ``JobTable`` of ``jobs`` (see the module docstring for the mapping)."""
    if not jobs:
        raise ValueError(f"{name}: no finished jobs to rebuild a workload from")
    by_partition = {k: tuple(v) for k, v in (gpu_types_by_partition or {}).items()}
    users, vcs, qoses = CodeBook(), CodeBook(), CodeBook()
    types = TypeSetBook()
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    ordered = [jobs[i] for i in order]
    submit = np.asarray([j.submit_s for j in ordered], dtype=np.float64)
    origin = float(submit[0])
    arrays: dict[str, Any] = {
        "submit": submit - origin,
        "runtime": np.asarray([j.runtime_s for j in ordered], dtype=np.float64),
        "estimate": np.asarray([j.est_runtime_s for j in ordered], dtype=np.float64),
        "gpus": np.asarray([j.gpus for j in ordered], dtype=np.int64),
        "gpu_milli": np.asarray([j.gpu_milli for j in ordered], dtype=np.int64),
        "type_set": np.asarray(
            [types.code(j.gpu_types or by_partition.get(j.partition, ())) for j in ordered], dtype=np.int64
        ),
        "cpus_milli": np.asarray([j.cpus_milli for j in ordered], dtype=np.int64),
        "mem_mib": np.asarray([j.mem_mib for j in ordered], dtype=np.int64),
        "user": np.asarray([users.code(j.user) for j in ordered], dtype=np.int64),
        "vc": np.asarray([vcs.code(j.partition) for j in ordered], dtype=np.int64),
        "qos": np.asarray([qoses.code(j.qos) for j in ordered], dtype=np.int64),
    }
    assert set(arrays) == set(NUMERIC_FIELDS)
    return JobTable(
        ids=np.asarray([j.job_id for j in ordered], dtype=np.str_),
        type_sets=types.sets,
        users=users.names or ["default"],
        vcs=vcs.names or ["default"],
        qoses=qoses.names or ["normal"],
        meta=TraceMeta(name=name, source="database", origin=origin, has_estimates=True),
        **arrays,
    )


async def rebuild_workload(
    engine: AsyncEngine,
    cluster: str,
    *,
    since_s: float | None = None,
    until_s: float | None = None,
    statuses: Sequence[str] | None = None,
    gpu_types_by_partition: Mapping[str, Sequence[str]] | None = None,
) -> RebuiltWorkload:
    """Fetch the finished jobs of ``cluster`` in the time range and rebuild them into a trace."""
    jobs, exclusions = await fetch_recorded_jobs(
        engine, cluster, since_s=since_s, until_s=until_s, statuses=statuses
    )
    window = f"[{since_s if since_s is not None else '-inf'}, {until_s if until_s is not None else 'inf'})"
    table = rebuild_table(
        jobs, name=f"{cluster} {window} (database)", gpu_types_by_partition=gpu_types_by_partition
    )
    return RebuiltWorkload(table, jobs, exclusions)


async def latest_submit(engine: AsyncEngine, cluster: str) -> float | None:
    """The newest submit time (cluster clock) among ``cluster``'s finished jobs; None if none."""
    from sqlalchemy import func

    stmt = select(func.max(OUTCOMES.c.submit_s)).where(OUTCOMES.c.cluster == cluster)
    async with engine.connect() as conn:
        value = (await conn.execute(stmt)).scalar_one_or_none()
    return None if value is None else float(value)
