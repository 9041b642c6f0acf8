"""``hylo models shadow VERSION [--off]`` on a real PostgreSQL and NATS, configured by HYLO_* variables."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from typer.testing import CliRunner

from shared.cli.common import console
from shared.cli.models import models_app
from tests.conftest_services import drop_streams
from tests.registry.registry_helpers import BSLD_MODEL, WAIT_MODEL, unique_cluster
from tests.registry.test_registry_cli import _announced, _versions

runner = CliRunner()


def test_models_shadow_command(nats_url: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, root = unique_cluster(), f"t{uuid.uuid4().hex[:12]}"
    cur, cand = f"{cluster}-cur", f"{cluster}-cand"
    env = {
        "HYLO_DATABASE_URL": postgres_url,
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": root,
        "HYLO_STORAGE": "memory",
        "HYLO_REGISTRY_CLUSTER": cluster,
        "HYLO_REGISTRY_ACTOR": "ops",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(console, "width", 400)
    try:
        for path, name in ((WAIT_MODEL, cur), (BSLD_MODEL, cand)):
            done = runner.invoke(models_app, ["register", str(path), "--version", name])
            assert done.exit_code == 0, done.output
        done = runner.invoke(models_app, ["promote", cur, "--force"])
        assert done.exit_code == 0, done.output

        done = runner.invoke(models_app, ["shadow", cur])
        assert done.exit_code == 2 and "only a candidate can run in shadow mode" in done.output

        done = runner.invoke(models_app, ["shadow", cand])
        assert done.exit_code == 0, done.output
        assert f"{cand} is in shadow mode on cluster {cluster}" in done.output
        done = runner.invoke(models_app, ["list"])
        assert done.exit_code == 0 and "candidate (shadow)" in done.output
        assert asyncio.run(_versions(postgres_url, cluster))[cand].shadow is True

        done = runner.invoke(models_app, ["shadow", cand, "--off"])
        assert done.exit_code == 0, done.output
        assert f"{cand} is out of shadow mode" in done.output
        assert asyncio.run(_versions(postgres_url, cluster))[cand].shadow is False

        messages = asyncio.run(_announced(nats_url, root, cluster))
        assert [(m.version, m.status, m.shadow) for m in messages] == [
            (cur, "current", False),
            (cand, "candidate", True),
            (cand, "candidate", False),
        ]
    finally:
        drop_streams(nats_url, root)
