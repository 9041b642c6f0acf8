"""The query API when the database is missing or unmigrated, and ``python -m shared.query`` for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.adapter_sim.stack import free_port
from tests.query.query_helpers import client, migrated, seed, unique_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.asyncio
async def test_unmigrated_database_is_not_ready_and_answers_503(tmp_path: Path) -> None:
    async with client(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}") as http:
        assert (await http.get("/healthz")).status_code == 200  # alive, just not ready
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "not ready"
        assert ready.json()["database"] == "reachable, not migrated"
        listing = await http.get("/v1/clusters")
        assert listing.status_code == 503
        assert listing.json()["detail"].startswith("database unavailable or not migrated (OperationalError)")


@pytest.mark.asyncio
async def test_unreachable_database_is_not_ready_and_answers_503() -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing"  # nobody listens there
    async with client(url) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["database"].startswith("unreachable: ")
        models = await http.get("/v1/models")
        assert models.status_code == 503
        assert "Traceback" not in models.text
        assert models.json()["detail"].startswith("database unavailable or not migrated (")


def serve_env(tmp_path: Path, port: int, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYLO_", "OTEL_"))}
    env.update(
        {"HYLO_CONFIG": str(tmp_path / "none.toml"), "HYLO_HTTP_PORT": str(port), "HYLO_DATABASE_URL": url}
    )
    return env


@pytest.mark.asyncio
async def test_python_m_shared_query_serves_on_the_configured_port(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    engine = await migrated(url)
    cluster = unique_cluster()
    await seed(engine, cluster)
    await engine.dispose()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.query"],
        cwd=ROOT,
        env=serve_env(tmp_path, port, url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            while True:
                assert proc.poll() is None, "the query API exited early"
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the query API did not answer within 60 s"
                time.sleep(0.2)
            assert (await http.get("/readyz")).json()["status"] == "ready"
            clusters = (await http.get("/v1/clusters")).json()["clusters"]
            assert [c["name"] for c in clusters] == [cluster]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    # SIGTERM is a clean shutdown (uvicorn re-raises the signal once the app has stopped)
    assert proc.returncode in (0, -15), out
    assert "Application shutdown complete." in out
    assert f"Uvicorn running on http://127.0.0.1:{port}" in out


def test_invalid_settings_exit_2_naming_the_setting(tmp_path: Path) -> None:
    env = serve_env(tmp_path, 70000, "sqlite+aiosqlite:///unused.db")
    result = subprocess.run(
        [sys.executable, "-m", "shared.query"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "invalid settings" in result.stderr and "http_port" in result.stderr
    assert "Traceback" not in result.stderr
