"""A seeded store and an in-process client of the query API (lifespan included, no server needed)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.query import QuerySettings, create_app
from shared.store import (
    StoreSettings,
    create_engine,
    record_decision,
    record_jobs,
    record_model_version,
    record_outcome,
    upgrade,
)
from tests.schemas.message_factories import decision, model_version, outcome, snapshot

#: 701 s of JCT over a 600 s runtime (end 701 - start 101): the bounded slowdown of every outcome
BSLD = 701.0 / 600.0


def unique_cluster() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


async def migrated(url: str) -> AsyncEngine:
    engine = create_engine(url)
    await upgrade(engine)
    return engine


async def seed(engine: AsyncEngine, c: str) -> None:
    """Three snapshots of cluster ``c`` (7 decision rows), decided as follows:

    - s1 (t=101, seq 1) by model ``c-m1``: j0 j1 j2 j3 at ranks 0-3, priorities 4 3 2 1, j0 started on v0;
    - s2 (t=102, seq 2) by FCFS, fallback "no model": j2 j3 at ranks 0 1, j2 started on v0;
    - s3 (t=103, seq 3) by FCFS: j3 alone at rank 0, placed on v0.

    Outcomes: j0 and j1 started by s1, j2 by s2 (submit 0, start 101, end 701); j3 has none yet.
    """
    async with engine.begin() as conn:
        await record_jobs(conn, snapshot(cluster=c, correlation_id=f"{c}-s1", n_jobs=4))
        await record_model_version(conn, model_version(cluster=c, version=f"{c}-m1"))
        await record_decision(conn, decision(c, f"{c}-s1", ("j0", "j1", "j2", "j3"), f"{c}-m1", 1))
        s2 = decision(c, f"{c}-s2", ("j2", "j3"), None, 2).model_copy(update={"fallback": "no model"})
        await record_decision(conn, s2)
        await record_decision(conn, decision(c, f"{c}-s3", ("j3",), None, 3))
        for job, corr in (("j0", "s1"), ("j1", "s1"), ("j2", "s2")):
            await record_outcome(conn, outcome(cluster=c, job_id=job, correlation_id=f"{c}-{corr}"))


async def promote(engine: AsyncEngine, c: str) -> None:
    """Announce ``c-m1`` as current (the trainer's promotion)."""
    promoted = model_version(cluster=c, version=f"{c}-m1", status="current").model_copy(
        update={"promoted_at": datetime(2026, 11, 2, 12, 30, tzinfo=UTC)}
    )
    async with engine.begin() as conn:
        await record_model_version(conn, promoted)


@asynccontextmanager
async def client(url: str, settings: QuerySettings | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, called in-process over ASGI."""
    app = create_app(StoreSettings(database_url=url), settings or QuerySettings())
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://query") as http,
    ):
        yield http
