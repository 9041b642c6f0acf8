"""What the registry tests share: real checkpoints, a tiny gate, a migrated store, the models stream."""

from __future__ import annotations

import uuid
from pathlib import Path

from nats.js.api import ConsumerConfig, DeliverPolicy
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.registry import GateSettings
from shared.schemas import ModelVersion, decode
from shared.store import create_engine, upgrade
from tests.conftest_services import Bus

RUNS = Path(__file__).parents[2] / "docs/results/runs"
#: real trained checkpoints (read-only): the prioritizer's own reload test uses the first
WAIT_MODEL = RUNS / "philly-easy-fcfs-wait/checkpoint"
BSLD_MODEL = RUNS / "philly-easy-fcfs-bsld/checkpoint"

#: a gate small enough for 2 shared cores (6 windows of 64 jobs on a generated workload, about 0.5 s)
#: whose windows do queue on the small slurm-testbed cluster, so the wait metric is not all zeros
TINY_GATE = GateSettings(
    trace="embedded",
    cluster="slurm-testbed",
    jobs=2000,
    windows=6,
    window_size=64,
    warmup=64,
    train_fraction=0.7,
    n_boot=500,
    margin=0.02,
)


def unique_cluster() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def store_url(dialect: str, tmp_path: Path, postgres_url: str) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}" if dialect == "sqlite" else postgres_url


async def migrated(url: str) -> AsyncEngine:
    engine = create_engine(url)
    await upgrade(engine)
    return engine


async def announced(bus: Bus, cluster: str) -> list[ModelVersion]:
    """Every message on the cluster's models subject, in stream order, read back from JetStream."""
    subject = bus.subjects.of(cluster, "models")
    sub = await bus.js.pull_subscribe(
        subject,
        durable=None,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0),
    )
    out: list[ModelVersion] = []
    try:
        while True:
            try:
                batch = await sub.fetch(50, timeout=0.5)
            except TimeoutError:
                break
            for msg in batch:
                out.append(decode(ModelVersion, msg.data))
                await msg.ack()
    finally:
        await sub.unsubscribe()
    return out
