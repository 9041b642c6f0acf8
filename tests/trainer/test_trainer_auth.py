"""The trainer's routes behind the API guard: ``POST /v1/retrain`` needs scope admin, ``GET
/v1/status`` scope read, probes stay open; a trainer on a non-loopback address without tokens does not
start; ``hylo retrain`` sends its token.

The routes are the service's own (``trainer_router``) mounted by the runtime's ``create_app`` over a
migrated SQLite store with no jobs, so an accepted run ends at once as skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import typer
import uvicorn
from fastapi import FastAPI
from typer.testing import CliRunner

from services.adapter_sim.stack import free_port
from services.trainer.service import DEFINITION, Trainer, trainer_router
from services.trainer.settings import TrainerSettings
from shared.cli.retrain import retrain_command
from shared.service import ServiceRuntime, ServiceSettings
from shared.service.api_auth import ApiAuthError, ApiSecuritySettings, api_guard
from shared.service.api_tokens import add_token
from shared.service.app import create_app
from shared.service.metrics import ServiceMetrics
from shared.store import StoreSettings, create_engine, upgrade
from tests.conftest_services import Bus
from tests.trainer.trainer_helpers import spec_file


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "tokens"
    return path, add_token(path, "viewer", "read"), add_token(path, "ops", "admin")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def trainer_app(engine_url: str, tmp_path: Path, tokens_file: Path) -> tuple[FastAPI, Trainer]:
    """The trainer's HTTP app as the runtime builds it, over the store at ``engine_url``."""
    engine = create_engine(engine_url)
    settings = TrainerSettings(out_dir=tmp_path / "out")
    trainer = Trainer(engine, None, settings, "c1", str(spec_file(tmp_path)), "fcfs")
    guard = api_guard(ApiSecuritySettings(api_tokens_file=tokens_file), "127.0.0.1", "the trainer")
    app = create_app(
        "trainer", "t1", ServiceMetrics("trainer"), [], 1.0, router=trainer_router(trainer, guard)
    )
    return app, trainer


@asynccontextmanager
async def served(tmp_path: Path, tokens_file: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Trainer]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    engine = create_engine(url)
    await upgrade(engine)
    await engine.dispose()
    app, trainer = trainer_app(url, tmp_path, tokens_file)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://trainer"
        ) as http:
            yield http, trainer
    finally:
        if trainer.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(trainer.task, 60)
        await trainer.engine.dispose()


@pytest.mark.asyncio
async def test_retrain_needs_admin_status_needs_read(tmp_path: Path, tokens: tuple[Path, str, str]) -> None:
    path, read, admin = tokens
    async with served(tmp_path, path) as (http, trainer):
        anonymous = await http.post("/v1/retrain", json={"reason": "x"})
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
        assert (await http.get("/v1/status")).status_code == 401
        refused = await http.post("/v1/retrain", json={"reason": "x"}, headers=bearer(read))
        assert refused.status_code == 403
        assert refused.json()["detail"] == "the token 'viewer' has scope 'read'; this route needs 'admin'"
        assert 'error="insufficient_scope", scope="admin"' in refused.headers["www-authenticate"]
        assert trainer.task is None  # nothing started
        status = await http.get("/v1/status", headers=bearer(read))
        assert status.status_code == 200 and status.json()["runs"] == []
        accepted = await http.post("/v1/retrain", json={"reason": "auth-test"}, headers=bearer(admin))
        assert accepted.status_code == 202, accepted.text
        assert accepted.json()["trigger"] == "auth-test"
        assert trainer.task is not None
        report = await asyncio.wait_for(trainer.task, 60)
        assert report.status == "skipped"
        runs = (await http.get("/v1/status", headers=bearer(admin))).json()["runs"]
        assert [r["run_id"] for r in runs] == [accepted.json()["run_id"]]
        for probe in ("/healthz", "/readyz", "/metrics"):
            assert (await http.get(probe)).status_code == 200, probe


@pytest.mark.asyncio
async def test_a_trainer_on_0_0_0_0_without_tokens_does_not_start(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("HYLO_API_TOKENS_FILE", "HYLO_API_AUTH"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HYLO_CONFIG", str(tmp_path / "none.toml"))
    settings = ServiceSettings(
        http_host="0.0.0.0", http_port=free_port(), clusters={"c1": str(spec_file(tmp_path))}, replica="a1"
    )
    bus_settings = bus.settings.model_copy(update={"subject_root": bus.subjects.root})
    store = StoreSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    runtime = ServiceRuntime(DEFINITION, settings, bus_settings, store)
    try:
        with pytest.raises(
            ApiAuthError, match=r"the trainer would serve on 0\.0\.0\.0 without authentication"
        ):
            await runtime.start()
    finally:
        await runtime.close()


@contextlib.contextmanager
def trainer_on_a_port(tmp_path: Path, tokens_file: Path) -> Iterator[str]:
    """The trainer's app served by uvicorn in a thread (its own event loop), for ``hylo retrain``."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    port = free_port()
    servers: list[uvicorn.Server] = []

    async def main() -> None:
        engine = create_engine(url)
        await upgrade(engine)
        await engine.dispose()
        app, trainer = trainer_app(url, tmp_path, tokens_file)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        servers.append(server)
        try:
            await server.serve()
        finally:
            if trainer.task is not None:
                with contextlib.suppress(BaseException):
                    await trainer.task
            await trainer.engine.dispose()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name=f"trainer-{uuid.uuid4().hex[:6]}")
    thread.start()
    deadline = time.monotonic() + 30
    while not (servers and servers[0].started):
        assert time.monotonic() < deadline and thread.is_alive(), "the trainer did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        servers[0].should_exit = True
        thread.join(60)


def test_hylo_retrain_sends_its_token(tmp_path: Path, tokens: tuple[Path, str, str]) -> None:
    path, read, admin = tokens
    app = typer.Typer()
    app.command("retrain")(retrain_command)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    with trainer_on_a_port(tmp_path, path) as url:
        args = ["retrain", "--url", url, "--timeout", "60"]
        anonymous = runner.invoke(app, args, env={"HYLO_API_TOKEN": ""})
        assert anonymous.exit_code == 2 and "refused the request (401" in anonymous.output
        viewer = runner.invoke(app, [*args, "--token", read])
        assert viewer.exit_code == 2 and "(403: the token 'viewer' has scope 'read'" in viewer.output
        assert "HYLO_API_TOKEN" in " ".join(viewer.output.split())
        ops = runner.invoke(app, args, env={"HYLO_API_TOKEN": admin})
        assert ops.exit_code == 1, ops.output  # skipped: the store has no jobs
        assert "skipped" in ops.output and admin not in ops.output
