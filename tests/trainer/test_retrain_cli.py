"""``hylo retrain`` (``shared.cli.retrain.retrain_command``): ``--local`` runs one retraining against a
real PostgreSQL and NATS; without it, an unreachable service is a clear error (exit 2)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from services.adapter_sim.stack import free_port
from shared.cli.retrain import retrain_command
from shared.registry import Registry
from shared.store import create_engine, upgrade
from tests.conftest_services import drop_streams
from tests.trainer.test_trainer_service import TINY_ENV
from tests.trainer.trainer_helpers import history, record_history, spec_file

app = typer.Typer()
app.command("retrain")(retrain_command)
app.command("noop")(lambda: None)  # two commands: typer then expects the command name
runner = CliRunner()


def test_local_run_registers_and_gates_a_candidate(
    postgres_url: str, nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = f"cli-{uuid.uuid4().hex[:8]}"

    async def seed() -> None:
        engine = create_engine(postgres_url)
        await upgrade(engine)
        await record_history(engine, cluster, history(400, seed=5))
        await engine.dispose()

    asyncio.run(seed())
    for key, value in TINY_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HYLO_TRAINER_OUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("HYLO_CLUSTERS", json.dumps({cluster: str(spec_file(tmp_path))}))
    root = f"cli{uuid.uuid4().hex[:8]}"
    args = [
        "retrain",
        "--local",
        "--database-url",
        postgres_url,
        "--nats-url",
        nats_url,
        "--subject-root",
        root,
    ]
    try:
        result = runner.invoke(app, [*args, "--reason", "cli-test"])
    finally:
        drop_streams(nats_url, root)
    assert result.exit_code in (0, 1), result.output
    assert "(cli-test) on " + cluster in result.output
    assert ("promoted" in result.output) == (result.exit_code == 0)

    async def versions() -> list[str]:
        engine = create_engine(postgres_url)
        try:
            registry = Registry(engine)
            found = await registry.versions(cluster)
            events = await registry.history(cluster=cluster)
        finally:
            await engine.dispose()
        assert any(e.event.startswith("gate-") for e in events)
        return [v.version for v in found]

    assert len(asyncio.run(versions())) == 1


def test_unreachable_service_and_bad_options() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["retrain", "--url", url])
    assert result.exit_code == 2 and "cannot reach the trainer" in result.output
    bad = runner.invoke(app, ["retrain", "--timeout", "0"])
    assert bad.exit_code == 2 and "--timeout must be > 0" in bad.output


def test_local_with_an_unknown_cluster_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYLO_CLUSTERS", json.dumps({"a": "embedded"}))
    result = runner.invoke(app, ["retrain", "--local", "--cluster", "nope"])
    assert result.exit_code == 2 and "'nope' is not in HYLO_CLUSTERS" in result.output
