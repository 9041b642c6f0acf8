"""``hylo models`` end to end on a real PostgreSQL and NATS, configured as a deployment is (HYLO_*)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from typer.testing import CliRunner

from shared.bus import connect
from shared.cli.common import console
from shared.cli.models import models_app
from shared.registry import Registry, VersionInfo
from shared.schemas import ModelVersion, Subjects, decode
from shared.store import create_engine
from tests.conftest_services import bus_settings, drop_streams
from tests.registry.registry_helpers import WAIT_MODEL, unique_cluster

runner = CliRunner()


async def _versions(url: str, cluster: str) -> dict[str, VersionInfo]:
    engine = create_engine(url)
    try:
        return {v.version: v for v in await Registry(engine).versions(cluster)}
    finally:
        await engine.dispose()


async def _announced(nats_url: str, root: str, cluster: str) -> list[ModelVersion]:
    nc = await connect(bus_settings(nats_url))
    try:
        sub = await nc.jetstream().pull_subscribe(Subjects(root).of(cluster, "models"), durable=None)
        out = []
        with contextlib.suppress(TimeoutError):
            for msg in await sub.fetch(20, timeout=1.0):
                out.append(decode(ModelVersion, msg.data))
        await sub.unsubscribe()
        return out
    finally:
        await nc.close()


def test_models_commands(nats_url: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, root = unique_cluster(), f"t{uuid.uuid4().hex[:12]}"
    a, b = f"{cluster}-a", f"{cluster}-b"
    env = {
        "HYLO_DATABASE_URL": postgres_url,
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": root,
        "HYLO_STORAGE": "memory",  # the streams the command creates on a fresh server
        "HYLO_REGISTRY_CLUSTER": cluster,
        "HYLO_REGISTRY_ACTOR": "ops",
        "HYLO_GATE_TRACE": "embedded",
        "HYLO_GATE_CLUSTER": "slurm-testbed",
        "HYLO_GATE_JOBS": "2000",
        "HYLO_GATE_WINDOW_SIZE": "64",
        "HYLO_GATE_WARMUP": "64",
        "HYLO_GATE_TRAIN_FRACTION": "0.7",
        "HYLO_GATE_N_BOOT": "500",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(console, "width", 400)
    try:
        done = runner.invoke(models_app, ["register", str(WAIT_MODEL), "--version", a])
        assert done.exit_code == 0, done.output
        assert f"{a} registered: status candidate, cluster {cluster}" in done.output
        done = runner.invoke(models_app, ["register", str(WAIT_MODEL), "--version", b])
        assert done.exit_code == 0, done.output

        done = runner.invoke(models_app, ["promote", a, "--force"])
        assert done.exit_code == 0, done.output
        assert f"{a} is current for cluster {cluster} (forced, no gate)" in done.output

        # b is a's bytes: the gate (6 windows from the option, the rest from HYLO_GATE_*) refuses it
        done = runner.invoke(models_app, ["promote", b, "--windows", "6"])
        assert done.exit_code == 1, done.output
        assert "refused" in done.output and f"{b} stays a candidate" in done.output

        versions = asyncio.run(_versions(postgres_url, cluster))
        assert (versions[a].status, versions[a].promoted_by, versions[a].forced) == ("current", "ops", True)
        refused = versions[b]
        assert refused.status == "candidate"
        assert refused.metrics is not None and refused.metrics["n_windows"] == 6
        assert refused.reason is not None and "below the required margin" in refused.reason

        done = runner.invoke(models_app, ["list"])
        assert done.exit_code == 0, done.output
        assert f"model versions of {cluster}" in done.output
        assert "current" in done.output and "candidate" in done.output
        assert f"wait +0.0% [+0.0%, +0.0%] vs model:{a}, 6 w" in done.output
        assert "by ops (forced)" in done.output

        done = runner.invoke(models_app, ["rollback"])
        assert done.exit_code == 2
        assert "first model made current" in done.output

        done = runner.invoke(models_app, ["history"])
        assert done.exit_code == 0, done.output
        for event in ("registered", "promoted", "gate-refused"):
            assert event in done.output

        done = runner.invoke(models_app, ["promote", "no-such-version", "--force"])
        assert done.exit_code == 2 and "no model version 'no-such-version'" in done.output
        done = runner.invoke(models_app, ["promote", b, "--margin", "-1"])
        assert done.exit_code == 2 and "gate settings" in done.output

        messages = asyncio.run(_announced(nats_url, root, cluster))
        assert [(m.version, m.status) for m in messages] == [(a, "current")]
    finally:
        drop_streams(nats_url, root)


def test_a_command_without_a_cluster_says_how_to_name_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYLO_REGISTRY_CLUSTER", raising=False)
    monkeypatch.setattr(console, "width", 400)
    done = runner.invoke(models_app, ["register", str(WAIT_MODEL)])
    assert done.exit_code == 2
    assert "no cluster: pass --cluster NAME or set HYLO_REGISTRY_CLUSTER" in done.output
    done = runner.invoke(models_app, ["rollback", "--cluster", "bad name!"])
    assert done.exit_code == 2 and "cluster name 'bad name!'" in done.output
