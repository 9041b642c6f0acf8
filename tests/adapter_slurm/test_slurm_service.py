"""The adapter as a service on the shared runtime: real NATS JetStream, real Slurm.

A snapshot of submitted jobs is published on the cluster's subject; a PlacementDecision published on
``placements`` ends up as the priority squeue shows; ``/readyz`` is false, naming the command, while
slurmctld cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from services.adapter_sim.stack import free_port
from services.adapter_slurm.poll_loop import PollLoop
from services.adapter_slurm.service import DEFINITION
from shared.schemas import JobOutcome, JobPlacement, PlacementDecision, Placements, QueueSnapshot, decode
from shared.schemas.base import Message
from shared.service import ServiceRuntime, ServiceSettings
from shared.store.settings import StoreSettings
from tests.adapter_slurm.conftest import SlurmCluster
from tests.conftest_services import Bus

CLUSTER = "slurm-test"


@pytest_asyncio.fixture
async def service(
    bus: Bus, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[Path], object]]:
    """Start the adapter service against ``conf``; stopped at the end."""
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    async def _start(conf: Path) -> str:
        monkeypatch.setenv("HYLO_SLURM_CLUSTER", CLUSTER)
        monkeypatch.setenv("HYLO_SLURM_CONF", str(conf))
        monkeypatch.setenv("HYLO_CLUSTERS", json.dumps({CLUSTER: str(slurm.spec)}))
        monkeypatch.setenv("HYLO_SLURM_POLL_INTERVAL_S", "1")
        monkeypatch.setenv("HYLO_SLURM_PARTITIONS", '["gpu"]')
        # the fail-safe lease of this adapter alone (not the user's state dir)
        lease = slurm.state_dir / "leases" / f"{uuid.uuid4().hex}.json"
        monkeypatch.setenv("HYLO_SLURM_FAILSAFE_LEASE", str(lease))
        port = free_port()
        settings = ServiceSettings(http_port=port, replica="r1", clusters={CLUSTER: str(slurm.spec)})
        bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
        runtime = ServiceRuntime(DEFINITION, settings, bus_settings, StoreSettings())
        await runtime.start()
        stop = asyncio.Event()
        running.append((stop, asyncio.create_task(runtime.run(stop))))
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            for _ in range(200):
                with contextlib.suppress(httpx.TransportError):
                    await client.get(f"{url}/healthz")
                    break
                await asyncio.sleep(0.05)
        return url

    yield _start
    for stop, task in running:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)


async def eventually(check: Callable[[], object], timeout_s: float, what: str) -> None:
    """Wait for ``check()`` (a plain function, run in a thread, or a coroutine function) to be true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if asyncio.iscoroutinefunction(check):
            ok = await check()
        else:
            ok = await asyncio.to_thread(check)
        if ok:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.mark.asyncio
async def test_service_publishes_snapshots_and_applies_decisions(
    bus: Bus, slurm: SlurmCluster, service: Callable[[Path], object]
) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:2", "-t", "5", "--begin=now+3600")
    try:
        snapshots: list[QueueSnapshot] = []

        async def on_msg(msg: object) -> None:
            snapshots.append(decode(QueueSnapshot, msg.data))  # type: ignore[attr-defined]

        sub = await bus.nc.subscribe(bus.subjects.of(CLUSTER, "snapshots"), cb=on_msg)
        url: str = await service(slurm.conf)  # type: ignore[misc]
        await eventually(
            lambda: any(job in {p.job_id for p in s.pending} for s in snapshots),
            20,
            "a snapshot with the job",
        )
        snap = next(s for s in reversed(snapshots) if job in {p.job_id for p in s.pending})
        pending = {p.job_id: p for p in snap.pending}[job]
        assert (pending.gpus, pending.gpu_types, pending.partition) == (2, ("P100",), "gpu")
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"{url}/readyz")
            assert ready.status_code == 200, ready.text
            polled = (await client.post(f"{url}/v1/poll")).json()
            assert polled["cluster"] == CLUSTER and polled["layout"] == "v0.0.38" and polled["pending"] >= 1
        decision = PlacementDecision(
            cluster=CLUSTER,
            correlation_id=snap.correlation_id,
            snapshot_time=snap.time,
            sequence=snap.sequence + 10**9,  # newer than any snapshot the service has seen
            policy="test",
            placements=Placements.of([JobPlacement(job_id=job, rank=0, priority=1.0)]),
        )
        await bus.publisher.publish(decision)

        def priority() -> bool:
            return slurm.run("squeue", "-h", "-j", job, "-o", "%Q").strip() == "1000000"

        await eventually(priority, 20, "squeue to show the priority Hylo wrote")
        await sub.unsubscribe()
    finally:
        slurm.cancel(job)


@pytest.mark.asyncio
async def test_readyz_false_while_slurmctld_is_unreachable(
    slurm: SlurmCluster, service: Callable[[Path], object], tmp_path: Path
) -> None:
    dead = tmp_path / "slurm.conf"  # the same cluster, but a controller port nobody listens on
    dead.write_text(
        "\n".join(
            "SlurmctldPort=6999" if line.startswith("SlurmctldPort=") else line
            for line in slurm.conf.read_text().splitlines()
        )
        + "\n"
    )
    url: str = await service(dead)  # type: ignore[misc]
    async with httpx.AsyncClient(timeout=30) as client:

        async def not_ready() -> bool:
            answer = await client.get(f"{url}/readyz")
            return answer.status_code == 503 and "slurm: squeue --json" in answer.text

        await eventually(not_ready, 40, "/readyz to report the unreachable controller")
        problems = (await client.get(f"{url}/readyz")).json()["problems"]
        assert any("Slurm reported errors" in p for p in problems), problems
        polled = await client.post(f"{url}/v1/poll")
        assert polled.status_code == 503 and polled.json()["detail"].startswith("squeue --json")


@pytest.mark.asyncio
async def test_outcomes_survive_a_failed_publish_and_backoff_grows(slurm: SlurmCluster) -> None:
    job = slurm.submit("-p", "gpu", "--gres=gpu:p100:1", "-t", "1", command="true")
    try:
        await eventually(
            lambda: "COMPLETED" in slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T"),
            60,
            "completion",
        )
        sent: list[Message] = []
        fail = [True]

        async def publish(message: Message) -> None:
            if fail[0]:
                raise ConnectionError("bus down")
            sent.append(message)

        loop = PollLoop(slurm.adapter(), publish, interval_s=30.0, retry_max_s=8.0)
        with pytest.raises(ConnectionError):
            await loop.poll_once()  # the outcome was computed, the publish failed
        assert any(o.job_id == job for o in loop.unsent)
        fail[0] = False
        await loop.poll_once()
        assert isinstance(sent[0], QueueSnapshot)
        assert [m.job_id for m in sent[1:] if isinstance(m, JobOutcome) and m.job_id == job] == [job]
        assert loop.unsent == [] and loop.problem() is None
        # while Slurm fails: 1, 2, 4, 8, 8 s between retries; a good poll goes back to the interval
        delays = []
        for failures in range(1, 6):
            loop.failures = failures
            delays.append(loop._delay())
        assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
        loop.failures = 0
        assert loop._delay() == 30.0
    finally:
        slurm.cancel(job)
