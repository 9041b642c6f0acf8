"""Messages with distinct rows, a recorder process in a test, and the store's counts."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from services.adapter_sim.stack import free_port
from shared.bus import BusSettings
from shared.schemas import FeatureMatrix, Message
from shared.schemas.snapshot import PendingJob, PendingJobs
from shared.service import ServiceRuntime, ServiceSettings
from shared.store import create_engine
from shared.store.settings import StoreSettings
from tests.schemas.message_factories import SPEC_DOC, decision, features, outcome, snapshot

CLUSTER = "c1"


def matrix(tag: str, n_jobs: int = 3) -> FeatureMatrix:
    """A feature matrix whose jobs (``<tag>-0``...) are its own: each stores ``n_jobs`` jobs rows."""
    pending = PendingJobs.of(
        PendingJob(
            job_id=f"{tag}-{i}", submit_s=float(i), gpus=1, est_runtime_s=600.0, user="u", partition="a"
        )
        for i in range(n_jobs)
    )
    snap = snapshot(cluster=CLUSTER, correlation_id=tag).model_copy(update={"pending": pending})
    return features(snap)


def round_of(tag: str) -> list[Message]:
    """One scheduling round's records: a matrix (3 jobs rows), its decision (3 decisions rows), an
    outcome (1 outcomes row)."""
    fm = matrix(tag)
    return [
        fm,
        decision(cluster=CLUSTER, correlation_id=tag, jobs=tuple(fm.job_ids)),
        outcome(cluster=CLUSTER, job_id=f"{tag}-0", correlation_id=tag),
    ]


@dataclass(frozen=True)
class Counts:
    jobs: int
    decision_rows: int
    decisions: int
    outcomes: int
    model_versions: int


async def counts(url: str) -> Counts:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            async def one(sql: str) -> int:
                return int(await conn.scalar(text(sql)) or 0)

            return Counts(
                jobs=await one("SELECT COUNT(*) FROM jobs"),
                decision_rows=await one("SELECT COUNT(*) FROM decisions"),
                decisions=await one("SELECT COUNT(DISTINCT correlation_id) FROM decisions"),
                outcomes=await one("SELECT COUNT(*) FROM outcomes"),
                model_versions=await one("SELECT COUNT(*) FROM model_versions"),
            )
    finally:
        await engine.dispose()


def expected(rounds: int, models: int = 0) -> Counts:
    return Counts(
        jobs=3 * rounds, decision_rows=3 * rounds, decisions=rounds, outcomes=rounds, model_versions=models
    )


@dataclass
class Recorder:
    runtime: ServiceRuntime
    url: str  # its HTTP base


@asynccontextmanager
async def recorder(
    bus_settings: BusSettings, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Recorder]:
    """The placer service in its ``record`` role (the recorder only), in this process, serving HTTP."""
    from services.placer.service import DEFINITION as PLACER

    monkeypatch.setenv("HYLO_PLACER_ROLE", "record")
    monkeypatch.setenv("HYLO_RECORDER_NICE", "0")  # it runs in the test process: leave its priority alone
    spec = tmp_path / "c1.yaml"
    spec.write_text(json.dumps(SPEC_DOC))  # JSON is YAML
    port = free_port()
    settings = ServiceSettings(
        http_port=port, replica="recorder", clusters={CLUSTER: str(spec)}, shutdown_grace_s=5.0
    )
    runtime = ServiceRuntime(PLACER, settings, bus_settings, StoreSettings(database_url=database_url))
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    try:
        while runtime.port is None:
            await asyncio.sleep(0.02)
        yield Recorder(runtime, f"http://127.0.0.1:{port}")
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)


def recorder_stats(rec: Recorder) -> dict[str, tuple[int, int, int]]:
    """Per recorder durable: (handled, retried, dead-lettered)."""
    return {
        c.durable: (c.stats.handled, c.stats.retried, c.stats.dead_lettered) for c in rec.runtime.consumers
    }
