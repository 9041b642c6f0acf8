"""``hylo jobs``, ``hylo job ID`` and ``hylo status`` (issue 21, item 5) on a small SQLite store.

The store holds three jobs of cluster ``demo``: ``done-1`` (decided twice, placed, completed),
``run-1`` (placed, no outcome yet: running) and ``wait-1`` (decided, never placed: pending), plus a
current model version.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert
from typer.testing import CliRunner

from shared.cli.app import app
from shared.cli.common import console
from shared.store import Cluster, Decision, Job, ModelVersionRow, Outcome, create_engine, upgrade
from shared.store.models import table_of

runner = CliRunner()


def _job(job_id: str, submit: float, user: str, types: list[str]) -> dict[str, Any]:
    return {
        "cluster": "demo",
        "job_id": job_id,
        "submit_s": submit,
        "gpus": 2,
        "gpu_milli": 1000,
        "cpus_milli": 8000,
        "mem_mib": 16384,
        "est_runtime_s": 600.0,
        "user_name": user,
        "partition": "p",
        "qos": "normal",
        "gpu_types": types,
    }


def _decision(job_id: str, seq: int, t: float, rank: int, placed: bool) -> dict[str, Any]:
    return {
        "correlation_id": f"c{seq}",
        "cluster": "demo",
        "job_id": job_id,
        "snapshot_time": t,
        "sequence": seq,
        "rank": rank,
        "priority": 0.75 - rank / 10,
        "nodes": ["n1"] if placed else [],
        "placed": placed,
        "mode": "pack" if placed else None,
        "policy": "learned/fcfs",
        "model_version": "m-1",
        "fallback": None,
        "features": {},
        "latencies_ms": {},
        "latency_ms": 3.0,
    }


async def _fill(url: str) -> None:
    engine = create_engine(url)
    await upgrade(engine)
    async with engine.begin() as conn:
        await conn.execute(insert(table_of(Cluster)).values(name="demo", spec=None))
        await conn.execute(
            insert(table_of(Job)).values(
                [
                    _job("done-1", 10.0, "ada", ["V100"]),
                    _job("run-1", 20.0, "bob", ["T4"]),
                    _job("wait-1", 30.0, "ada", []),
                ]
            )
        )
        await conn.execute(
            insert(table_of(Decision)).values(
                [
                    _decision("done-1", 1, 10.0, 0, False),
                    _decision("done-1", 2, 25.0, 0, True),
                    _decision("run-1", 2, 25.0, 1, True),
                    _decision("wait-1", 3, 40.0, 0, False),
                ]
            )
        )
        await conn.execute(
            insert(table_of(Outcome)).values(
                cluster="demo",
                job_id="done-1",
                correlation_id="c2",
                submit_s=10.0,
                start_s=25.0,
                end_s=125.0,
                wait_s=15.0,
                jct_s=115.0,
                bsld=1.15,
                gpus=2,
                status="completed",
            )
        )
        await conn.execute(
            insert(table_of(ModelVersionRow)).values(
                version="m-1",
                cluster="demo",
                sha256="0" * 64,
                uri="/models/m-1",
                card={},
                status="current",
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
            )
        )
    await engine.dispose()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("admin") / "hylo.db"
    asyncio.run(_fill(f"sqlite+aiosqlite:///{path}"))
    return str(path)


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "width", 400)


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_jobs_lists_states_oldest_first(store: str) -> None:
    rows = json.loads(_ok("jobs", "--database", store, "--json"))
    assert [(r["job_id"], r["state"]) for r in rows] == [
        ("done-1", "completed"),
        ("run-1", "running"),
        ("wait-1", "pending"),
    ]
    assert rows[0]["wait_s"] == 15.0 and rows[0]["decisions"] == 2


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--state", "pending"], ["wait-1"]),
        (["--state", "running,done"], ["done-1", "run-1"]),
        (["--state", "completed"], ["done-1"]),
        (["--user", "ada"], ["done-1", "wait-1"]),
        (["--gpu-type", "t4"], ["run-1", "wait-1"]),  # wait-1 takes any type
        (["--since", "15", "--until", "30"], ["run-1"]),
        (["--limit", "1"], ["wait-1"]),
    ],
)
def test_jobs_filters(store: str, options: list[str], expected: list[str]) -> None:
    out = _ok("jobs", "--database", store, *options, "--format", "job_id")
    assert out.split() == ["job_id", *expected]


def test_jobs_format_columns(store: str) -> None:
    out = _ok(
        "jobs", "--database", store, "--format", "job_id,state,gpus,gpu_types,wait_s", "--state", "done"
    )
    assert out.splitlines() == ["job_id|state|gpus|gpu_types|wait_s", "done-1|completed|2|V100|15.0"]
    table = _ok("jobs", "--database", store)
    assert "done-1" in table and "pending" in table


def test_job_tells_the_whole_story(store: str) -> None:
    out = _ok("job", "done-1", "--database", store)
    assert "job done-1 on cluster demo: user ada" in out
    assert "arrival: t = 10.0 s" in out and "decisions: 2" in out
    assert "learned/fcfs" in out and "m-1" in out
    assert "placed: t = 25.0 s on n1 (mode pack)" in out
    assert "start: t = 25.0 s; end: t = 125.0 s, completed; wait 15.0 s" in out
    pending = _ok("job", "wait-1", "--database", store)
    assert "pending: at its last decision (t = 40.0 s) it ranked 0 and was not placed" in pending
    assert "running: placed at t = 25.0 s" in _ok("job", "run-1", "--database", store)
    story = json.loads(_ok("job", "done-1", "--database", store, "--json", "--decisions", "1"))
    assert story["decision_count"] == 2 and len(story["decisions"]) == 1
    assert story["decisions"][0]["placed"] and story["outcome"]["status"] == "completed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job", "nope"], "no job 'nope' in the store for cluster demo"),
        (["job", "done-1", "--cluster", "other"], "--cluster 'other': not in the store (known: demo)"),
        (["jobs", "--state", "lost"], "--state 'lost': unknown state lost"),
        (["jobs", "--format", "job_id,colour"], "--format 'job_id,colour': unknown column colour"),
        (["jobs", "--since", "yesterday"], "--since 'yesterday'"),
    ],
)
def test_admin_errors_are_one_line(store: str, args: list[str], message: str) -> None:
    result = runner.invoke(app, [*args, "--database", store])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every http client answers as a ready pipeline whose prioritizer uses m-1, except port 8103."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.port == 8103:
            body = {"ready": False, "service": "placer", "replica": "r", "problems": ["bus: not connected"]}
            return httpx.Response(503, json=body)
        if request.url.path == "/v1/model":
            return httpx.Response(200, json={"version": "m-1", "base_policy": "fcfs"})
        return httpx.Response(200, json={"ready": True, "service": "x", "replica": "r", "problems": []})

    real = httpx.Client

    def client(*args: Any, **kwargs: Any) -> httpx.Client:
        return real(*args, transport=httpx.MockTransport(answer), **kwargs)

    monkeypatch.setattr(httpx, "Client", client)
    yield


def test_status_shows_readiness_model_and_queue(store: str, services: None) -> None:
    result = runner.invoke(app, ["status", "--database", store, "--json"])
    assert result.exit_code == 1  # the placer is not ready
    status = json.loads(result.output)
    ready = {s["name"]: s["ready"] for s in status["services"]}
    assert ready == {"featurizer": True, "prioritizer": True, "placer": False}
    assert [s["model"] for s in status["services"] if s["name"] == "prioritizer"] == ["m-1"]
    assert status["store"]["current_model"] == "m-1" and status["store"]["queue_depth"] == 1
    table = runner.invoke(app, ["status", "--database", store, "--url", "featurizer=http://127.0.0.1:8101"])
    assert table.exit_code == 0, table.output
    assert "current model m-1" in table.output


def test_status_without_services_or_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYLO_DATABASE_URL", raising=False)
    result = runner.invoke(app, ["status", "--url", "placer=http://127.0.0.1:1", "--timeout", "0.5"])
    assert result.exit_code == 1
    assert "unreachable" in result.output and "store: none found" in result.output
    assert list(tmp_path.iterdir()) == []
