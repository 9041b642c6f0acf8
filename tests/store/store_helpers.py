"""Engines for both dialects and a small seeded history of decisions and outcomes."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from shared.schemas import ShadowPriorities
from shared.store import (
    create_engine,
    record_decision,
    record_jobs,
    record_model_version,
    record_outcome,
    record_shadow,
    upgrade,
)
from tests.schemas.message_factories import decision, model_version, outcome, snapshot


def url_for(dialect: str, tmp_path: Path, postgres_url: str) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}" if dialect == "sqlite" else postgres_url


async def migrated(url: str) -> AsyncEngine:
    engine = create_engine(url)
    await upgrade(engine)
    return engine


async def seed(engine: AsyncEngine, cluster: str) -> None:
    """Two snapshots of 4 jobs: the first decided by a model, the second by the FCFS fallback.

    j0 and j1 start after the first decision, j2 after the second; j3 is still waiting. A shadow
    model ``<cluster>-shadow`` ranked the first snapshot j3 j2 j1 j0 (shadow mode).
    """
    async with engine.begin() as conn:
        await record_jobs(conn, snapshot(cluster=cluster, correlation_id=f"{cluster}-s1", n_jobs=4))
        await record_model_version(conn, model_version(cluster=cluster, version=f"{cluster}-m1"))
        await record_decision(
            conn, decision(cluster, f"{cluster}-s1", ("j0", "j1", "j2", "j3"), f"{cluster}-m1", 1)
        )
        await record_decision(conn, decision(cluster, f"{cluster}-s2", ("j2", "j3"), None, 2))
        await record_shadow(
            conn,
            ShadowPriorities(
                cluster=cluster,
                correlation_id=f"{cluster}-s1",
                snapshot_time=101.0,
                sequence=1,
                model_version=f"{cluster}-shadow",
                applied_policy="model",
                applied_model_version=f"{cluster}-m1",
                job_ids=("j0", "j1", "j2", "j3"),
                priorities=(1.0, 2.0, 3.0, 4.0),
            ),
        )
        for job, corr in (("j0", "s1"), ("j1", "s1"), ("j2", "s2")):
            await record_outcome(
                conn, outcome(cluster=cluster, job_id=job, correlation_id=f"{cluster}-{corr}")
            )
