"""The trainer service against a real PostgreSQL and NATS JetStream, with a tiny workload.

On demand: ``POST /v1/retrain`` -> a run -> a candidate registered and its gate decision recorded,
visible in ``GET /v1/status``. On drift: once a model trained on the first period is current, jobs
that run 20x longer arrive; the drift check sees it and starts a run that fine-tunes the current
model (not an imitation from scratch).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.adapter_sim.stack import free_port
from services.trainer.service import DEFINITION, choose_cluster
from services.trainer.settings import TrainerSettings
from shared.registry import Registry
from shared.service import ServiceRuntime, ServiceSettings
from shared.store import create_engine, upgrade
from shared.store.settings import StoreSettings
from tests.conftest_services import Bus
from tests.trainer.trainer_helpers import history, record_history, spec_file

TINY_ENV = {
    "HYLO_TRAINER_EPOCHS": "1",
    "HYLO_TRAINER_WINDOWS_PER_EPOCH": "2",
    "HYLO_TRAINER_WINDOW_SIZE": "64",
    "HYLO_TRAINER_WARMUP": "32",
    "HYLO_TRAINER_IMITATION_EPOCHS": "2",
    "HYLO_TRAINER_IMITATION_WINDOWS": "2",
    "HYLO_TRAINER_GATE_WINDOWS": "3",
    "HYLO_TRAINER_MIN_JOBS": "100",
    "HYLO_TRAINER_HOLDOUT_FRACTION": "0.25",
    "HYLO_GATE_MIN_WINDOWS": "2",
    "HYLO_GATE_N_BOOT": "200",
}


async def wait_for_runs(
    client: httpx.AsyncClient, url: str, count: int, timeout: float = 240.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status: dict[str, Any] = (await client.get(f"{url}/v1/status")).json()
        if len(status["runs"]) >= count and status["running"] is None:
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"fewer than {count} runs finished in {timeout} s")


@pytest.mark.asyncio
async def test_retrain_on_demand_then_on_drift(
    postgres_url: str, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in TINY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HYLO_TRAINER_OUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("HYLO_TRAINER_DRIFT_CHECK_S", "0.5")
    monkeypatch.setenv("HYLO_TRAINER_DRIFT_RECENT_S", "1e9")
    cluster = f"svc-{uuid.uuid4().hex[:8]}"
    engine = create_engine(postgres_url)
    await upgrade(engine)
    first = history(400, seed=3)
    await record_history(engine, cluster, first)

    port = free_port()
    settings = ServiceSettings(http_port=port, clusters={cluster: str(spec_file(tmp_path))}, replica="t1")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    runtime = ServiceRuntime(DEFINITION, settings, bus_settings, StoreSettings(database_url=postgres_url))
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(100):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
            assert (await client.get(f"{url}/healthz")).status_code == 200
            assert (await client.get(f"{url}/readyz")).status_code == 200
            # no current model: the drift check gives no verdict
            assert (await client.get(f"{url}/v1/status")).json()["cluster"] == cluster

            accepted = await client.post(f"{url}/v1/retrain", json={"reason": "test"})
            assert accepted.status_code == 202, accepted.text
            run_id = accepted.json()["run_id"]
            busy = await client.post(f"{url}/v1/retrain", json={})
            assert busy.status_code == 409 and run_id in busy.text
            status = await wait_for_runs(client, url, 1)
            run = status["runs"][0]
            assert run["run_id"] == run_id and run["trigger"] == "test"
            assert run["status"] in ("promoted", "refused"), run
            assert run["imitation"] is not None and run["fine_tuned_from"] is None
            drift = status["last_drift"]
            assert drift is None or drift["drifted"] is False

            registry = Registry(engine, bus.publisher, actor="test")
            events = await registry.history(version=run["version"])
            assert [e.event for e in events][:2] in (
                ["registered", "gate-passed"],
                ["registered", "gate-refused"],
            )
            if run["status"] == "refused":  # make it current anyway, so drift has a reference
                await registry.promote(run["version"], force=True)
            assert (await registry.current(cluster)).version == run["version"]  # type: ignore[union-attr]

            # the workload changes: later jobs run 20x longer; the drift check starts a run
            offset = first[-1]["submit"] + 10_000.0
            shifted = [
                {**j, "submit": j["submit"] * 20 + offset}
                for j in history(200, seed=4, load=1.1, runtime_scale=20)
            ]
            await record_history(engine, cluster, shifted, prefix="k")
            status = await wait_for_runs(client, url, 2)
            drifted = status["runs"][0]
            assert drifted["trigger"] == "drift", status
            assert status["last_drift"]["drifted"] is True
            assert status["last_drift"]["per_feature"]["runtime"] >= 0.25
            assert drifted["fine_tuned_from"] == run["version"] and drifted["imitation"] is None
            assert drifted["recorded_jobs"] == 600
            assert drifted["status"] in ("promoted", "refused", "failed"), drifted
            if drifted["status"] != "failed":
                later = await registry.history(version=drifted["version"])
                assert any(e.event.startswith("gate-") for e in later)
            metrics = (await client.get(f"{url}/metrics")).text
            assert 'hylo_trainer_runs_total{service="trainer",status="' in metrics
            assert 'trigger="drift"' in metrics and 'trigger="test"' in metrics
            assert 'hylo_trainer_drift_psi{feature="runtime",service="trainer"}' in metrics
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)
        await engine.dispose()


def test_cluster_choice_and_bad_settings_are_named() -> None:
    assert choose_cluster(TrainerSettings(), {"a": "p1", "b": "p2"}) == ("a", "p1")
    assert choose_cluster(TrainerSettings(cluster="b"), {"a": "p1", "b": "p2"}) == ("b", "p2")
    with pytest.raises(ValueError, match="HYLO_TRAINER_CLUSTER"):
        choose_cluster(TrainerSettings(cluster="z"), {"a": "p1"})
    with pytest.raises(ValueError, match="metric"):
        TrainerSettings(metric="speed")


@pytest.mark.asyncio
async def test_hylo_retrain_asks_the_running_service(
    postgres_url: str, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hylo retrain --url`` starts a run on the service and prints its report when it is over."""
    import typer
    from typer.testing import CliRunner

    from shared.cli.retrain import retrain_command

    for key, value in TINY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HYLO_TRAINER_OUT_DIR", str(tmp_path / "out"))
    cluster = f"svc-{uuid.uuid4().hex[:8]}"
    engine = create_engine(postgres_url)
    await upgrade(engine)
    await record_history(engine, cluster, history(300, seed=8))
    await engine.dispose()
    port = free_port()
    settings = ServiceSettings(http_port=port, clusters={cluster: str(spec_file(tmp_path))}, replica="t2")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    runtime = ServiceRuntime(DEFINITION, settings, bus_settings, StoreSettings(database_url=postgres_url))
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    app = typer.Typer()
    app.command("retrain")(retrain_command)
    app.command("noop")(lambda: None)
    try:
        url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        result = await asyncio.to_thread(
            CliRunner().invoke, app, ["retrain", "--url", url, "--reason", "from-cli", "--timeout", "240"]
        )
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)
    assert result.exit_code in (0, 1), result.output
    assert "(from-cli) on " + cluster in result.output
    assert ("promoted" in result.output) == (result.exit_code == 0)
    assert "refused" in result.output or result.exit_code == 0


@pytest.mark.asyncio
async def test_the_schedule_starts_runs(
    postgres_url: str, bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``HYLO_TRAINER_INTERVAL_S`` a run starts every interval (here on a cluster with no jobs
    yet, so each is skipped at once, with the reason)."""
    monkeypatch.setenv("HYLO_TRAINER_INTERVAL_S", "0.3")
    monkeypatch.setenv("HYLO_TRAINER_OUT_DIR", str(tmp_path / "out"))
    cluster = f"svc-{uuid.uuid4().hex[:8]}"
    port = free_port()
    settings = ServiceSettings(http_port=port, clusters={cluster: str(spec_file(tmp_path))}, replica="t3")
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    runtime = ServiceRuntime(DEFINITION, settings, bus_settings, StoreSettings(database_url=postgres_url))
    await runtime.start()
    stop = asyncio.Event()
    task = asyncio.create_task(runtime.run(stop))
    try:
        async with httpx.AsyncClient() as client:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{url}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
            status = await wait_for_runs(client, url, 2, timeout=30)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
    assert all(r["trigger"] == "schedule" for r in status["runs"])
    assert all(r["status"] == "skipped" and "no finished jobs" in r["reason"] for r in status["runs"])
    assert status["next_run_in_s"] is not None and 0 <= status["next_run_in_s"] <= 0.3
    assert status["next_drift_check_in_s"] is None  # drift check off by default
