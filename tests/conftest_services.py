"""Real NATS (JetStream) and PostgreSQL servers for integration tests: never mocks.

Imported by ``tests/bus/conftest.py`` and ``tests/store/conftest.py``. Each fixture uses the server
already running on the machine (NATS 127.0.0.1:4222, PostgreSQL 127.0.0.1:5432, or the URLs in
``HYLO_TEST_NATS_URL`` / ``HYLO_TEST_PG_ADMIN_URL``) and otherwise (or with
``HYLO_TEST_THROWAWAY=1``) starts a throwaway one on a free port in a temporary directory:
``nats-server -js`` from the virtual environment, PostgreSQL through ``bench/support/postgres.py``
(``initdb``/``pg_ctl`` from ``/usr/lib/postgresql/*/bin``). A test is skipped, with the reason, only
when no server can be reached or started.

Isolation for parallel workers (pytest-xdist): every test gets its own NATS subject root (so its own
streams), and every test session its own PostgreSQL database with a random name, dropped at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js import JetStreamContext

from bench.support.postgres import PostgresUnavailable, ThrowawayPostgres
from services.adapter_sim.stack import free_port
from shared.bus import BusSettings, Publisher, connect, ensure_streams, stream_plans
from shared.schemas import Limits, Subjects

VENV_BIN = Path(sys.executable).parent
#: set HYLO_TEST_THROWAWAY=1 to ignore the machine's servers and start private ones
FORCE_THROWAWAY = os.environ.get("HYLO_TEST_THROWAWAY") == "1"


def _reachable(host: str, port: int, timeout: float = 0.3) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        if _reachable("127.0.0.1", port):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not open port {port} within {timeout} s")


# --- NATS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a NATS server with JetStream: the machine's, or a throwaway one."""
    given = os.environ.get("HYLO_TEST_NATS_URL")
    if given:
        yield given
        return
    if not FORCE_THROWAWAY and _reachable("127.0.0.1", 4222):
        yield "nats://127.0.0.1:4222"
        return
    binary = VENV_BIN / "nats-server"
    if not binary.exists():
        found = shutil.which("nats-server")
        if found is None:
            pytest.skip("no NATS server on 127.0.0.1:4222 and no nats-server binary to start one")
        binary = Path(found)
    port = free_port()
    store = tmp_path_factory.mktemp("nats-js")
    proc = subprocess.Popen(
        [str(binary), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, "nats-server")
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Bus:
    """One test's private corner of the bus: its own subject root and streams."""

    nc: Client
    js: JetStreamContext
    subjects: Subjects
    settings: BusSettings
    limits: Limits
    publisher: Publisher


def bus_settings(url: str, **overrides: object) -> BusSettings:
    """Settings for tests: memory streams, short redelivery so crash tests run in about a second."""
    values: dict[str, object] = {
        "nats_url": url,
        "nats_name": "hylo-tests",
        "storage": "memory",
        "stream_max_bytes": 64 << 20,
        "dead_max_bytes": 64 << 20,
        "ack_wait_s": 1.0,
        "max_deliver": 3,
        "nak_delay_s": 0.05,
        "fetch_timeout_s": 0.2,
        "fetch_batch": 100,
    }
    values.update(overrides)
    return BusSettings.model_validate(values)


@pytest_asyncio.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    """A connected client with this test's streams created (and deleted afterwards)."""
    settings = bus_settings(nats_url)
    subjects = Subjects(root=f"t{uuid.uuid4().hex[:12]}")
    limits = Limits(max_message_bytes=256 * 1024, max_jobs=64, max_running=256, max_nodes=256)
    nc = await connect(settings)
    js = nc.jetstream()
    await ensure_streams(js, subjects, settings)
    try:
        yield Bus(nc, js, subjects, settings, limits, Publisher(js, subjects, limits))
    finally:
        await delete_namespace(js, subjects.root, settings)
        await nc.close()


async def delete_namespace(js: JetStreamContext, root: str, settings: BusSettings) -> None:
    """Delete the streams of subject root ``root`` (tests share one server: leave nothing behind)."""
    for plan in stream_plans(Subjects(root), settings):
        with contextlib.suppress(Exception):
            await js.delete_stream(plan.config.name or "")


def drop_streams(nats_url: str, root: str) -> None:
    """``delete_namespace`` from synchronous code (services started as processes created them)."""

    async def delete() -> None:
        settings = bus_settings(nats_url)
        nc = await connect(settings)
        try:
            await delete_namespace(nc.jetstream(), root, settings)
        finally:
            await nc.close()

    asyncio.run(delete())


# --- PostgreSQL ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _throwaway_postgres() -> Iterator[str]:
    """A private server (``bench/support/postgres.py``) for the session; yields an admin DSN."""
    try:
        server = ThrowawayPostgres()
    except PostgresUnavailable as err:
        pytest.skip(f"no PostgreSQL on 127.0.0.1:5432, and no throwaway one: {err}")
    with server:
        yield server.dsn


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """asyncpg DSN of a PostgreSQL superuser: the machine's server, or a throwaway one."""
    admin = os.environ.get("HYLO_TEST_PG_ADMIN_URL")
    if admin is not None:
        yield admin
    elif not FORCE_THROWAWAY and _reachable("127.0.0.1", 5432):
        yield "postgresql://postgres@127.0.0.1:5432/postgres"
    else:
        with _throwaway_postgres() as dsn:
            yield dsn


@contextlib.contextmanager
def new_database(admin: str) -> Iterator[str]:
    """A database with a random name; yields its SQLAlchemy async URL and drops it afterwards."""
    name = f"hylo_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(admin, f'CREATE DATABASE "{name}"'))
    try:
        base = admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
        yield f"{base}/{name}"
    finally:
        asyncio.run(_admin(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def postgres_url(pg_admin_dsn: str) -> Iterator[str]:
    """A database for this test session (each xdist worker has its own); tests use unique clusters."""
    with new_database(pg_admin_dsn) as url:
        yield url


@pytest.fixture
def fresh_postgres_url(pg_admin_dsn: str) -> Iterator[str]:
    """An empty database for one test (migration tests)."""
    with new_database(pg_admin_dsn) as url:
        yield url
