"""The deploy/ files do what the compose file relies on, checked with real programs: the NATS config
on nats-server, the healthcheck script against an HTTP server, the settings file and each service's
compose environment through the settings classes, the read-only role on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from services.adapter_sim.stack import free_port
from shared.bus import BusSettings, ensure_streams
from shared.bus.connection import connect, connect_options
from shared.bus.streams import stream_name
from shared.query import QuerySettings
from shared.schemas import Subjects
from shared.service import ServiceSettings
from shared.service.api_auth import ApiSecuritySettings, api_guard
from shared.service.clusters import load_specs
from shared.store import StoreSettings
from shared.telemetry import TelemetrySettings
from tests.deploy.compose_helpers import ROOT, generate_secrets, interpolate, secret_mounts, services
from tests.query.query_helpers import client, migrated, seed

DEPLOY = ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent


# --- NATS ----------------------------------------------------------------------------------------


def nats_binary() -> str:
    found = VENV_BIN / "nats-server"
    if found.exists():
        return str(found)
    other = shutil.which("nats-server")
    if other is None:
        pytest.skip("no nats-server binary")
    return other


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What deploy/secrets/generate writes, in a temporary folder (generated once per module)."""
    return generate_secrets(tmp_path_factory.mktemp("secrets"))


def nats_conf_with_secrets(folder: Path, secrets: Path) -> Path:
    """deploy/nats/nats.conf in ``folder`` with the generated files where compose mounts them
    (``hylo/`` beside it; the TLS block's /etc/nats/hylo paths moved there)."""
    mounted = folder / "hylo"
    mounted.mkdir(parents=True, exist_ok=True)
    for name in ("nats-auth.conf", "ca.pem", "server-cert.pem", "server-key.pem"):
        shutil.copy(secrets / "nats" / name, mounted / name)
    for name in ("nats-tls.conf", "nats-cluster-tls.conf"):
        block = (secrets / "nats" / name).read_text()
        (mounted / name).write_text(block.replace("/etc/nats/hylo", str(mounted)))
    conf = folder / "nats.conf"
    shutil.copy(DEPLOY / "nats" / "nats.conf", conf)
    return conf


def test_nats_config_is_valid_for_nats_server(tmp_path: Path, secrets_dir: Path) -> None:
    result = subprocess.run(
        [nats_binary(), "-c", str(nats_conf_with_secrets(tmp_path, secrets_dir)), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NATS_SERVER_NAME": "n1"},
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "is valid" in result.stderr + result.stdout


@dataclass
class Node:
    port: int
    monitor: int
    store: Path
    proc: subprocess.Popen[bytes]


def _start_node(folder: Path, secrets: Path, index: int, route_ports: list[int]) -> Node:
    """One node of compose's cluster: the shipped file with addresses, store and mounts moved."""
    port, monitor = free_port(), free_port()
    conf = nats_conf_with_secrets(folder, secrets).read_text()
    routes = ", ".join(f"nats-route://127.0.0.1:{r}" for r in route_ports)
    replaced = {
        "0.0.0.0:4222": f"127.0.0.1:{port}",
        "http_port: 8222": f"http_port: {monitor}",
        '"/data"': json.dumps(str(folder)),
        "listen: 0.0.0.0:6222": f"listen: 127.0.0.1:{route_ports[index]}",
        "routes: [nats-route://nats:6222, nats-route://nats-2:6222, nats-route://nats-3:6222]": f"routes: [{routes}]",
    }
    for old, new in replaced.items():
        assert old in conf, old
        conf = conf.replace(old, new)
    (folder / "nats.conf").write_text(conf)
    proc = subprocess.Popen(
        [nats_binary(), "-c", str(folder / "nats.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "NATS_SERVER_NAME": f"n{index + 1}"},
    )
    return Node(port, monitor, folder, proc)


def _wait_healthy(node: Node) -> None:
    url = f"http://127.0.0.1:{node.monitor}/healthz?js-enabled-only=true"  # the compose healthcheck's URL
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                assert json.loads(r.read()) == {"status": "ok"}
                return
        except OSError:
            assert node.proc.poll() is None and time.monotonic() < deadline, "nats-server did not come up"
            time.sleep(0.1)


def test_nats_config_forms_the_cluster_and_serves_jetstream(tmp_path: Path, secrets_dir: Path) -> None:
    """Three nodes from the shipped file (addresses, stores and mounts moved): each passes the health
    URL, limits are as documented, the routes verify each other over TLS and elect a JetStream leader,
    streams take three replicas, and the generated identities connect over TLS (nobody else does)."""
    route_ports = [free_port() for _ in range(3)]
    nodes: list[Node] = []
    try:
        for i in range(3):
            folder = tmp_path / f"n{i + 1}"
            folder.mkdir()
            nodes.append(_start_node(folder, secrets_dir, i, route_ports))
        for node in nodes:
            _wait_healthy(node)
        with urllib.request.urlopen(f"http://127.0.0.1:{nodes[0].monitor}/varz", timeout=2) as r:
            varz = json.loads(r.read())
        url = ",".join(f"nats://127.0.0.1:{n.port}" for n in nodes)
        replicas = asyncio.run(_streams_at_three_replicas(url, secrets_dir / "nats"))
        asyncio.run(_connects_only_with_an_identity(url, secrets_dir / "nats"))
    finally:
        for node in nodes:
            node.proc.terminate()
        for node in nodes:
            node.proc.wait(timeout=10)
    assert varz["max_payload"] == 8 * 1024 * 1024  # HYLO_MAX_MESSAGE_BYTES' default
    js = varz["jetstream"]["config"]
    assert (js["max_memory"], js["max_storage"]) == (512 * 1024**2, 20 * 1024**3)
    assert js["store_dir"] == str(nodes[0].store / "jetstream")
    assert varz["cluster"]["name"] == "hylo"
    assert replicas == 3


async def _streams_at_three_replicas(url: str, nats_dir: Path) -> int:
    """Create the streams as the admin with three replicas (as bus_init does); servers holding one."""
    admin = BusSettings(
        nats_url=url,
        nats_nkey_seed=nats_dir / "admin.nk",
        nats_tls_ca=nats_dir / "ca.pem",
        stream_replicas=3,
        subject_root="deploytest",
    )
    deadline = time.monotonic() + 30
    nc = await connect(admin)
    try:
        while True:  # the JetStream meta leader is elected once the routes are up
            try:
                await ensure_streams(nc.jetstream(), Subjects("deploytest"), admin)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        info = await nc.jetstream().stream_info(stream_name(Subjects("deploytest"), "placements"))
        assert info.cluster is not None and info.config.num_replicas == 3
        return 1 + len(info.cluster.replicas or [])
    finally:
        await nc.close()


async def _connects_only_with_an_identity(url: str, nats_dir: Path) -> None:
    base = BusSettings(nats_url=url, nats_max_reconnect_attempts=0, nats_connect_timeout_s=2.0)
    featurizer = base.model_copy(
        update={"nats_nkey_seed": nats_dir / "featurizer.nk", "nats_tls_ca": nats_dir / "ca.pem"}
    )
    nc = await connect(featurizer)
    assert nc.is_connected
    await nc.close()
    with pytest.raises(Exception) as caught:  # TLS but no identity
        await connect(base.model_copy(update={"nats_tls_ca": nats_dir / "ca.pem"}))
    assert not isinstance(caught.value, AssertionError)


# --- healthcheck script --------------------------------------------------------------------------


@contextmanager
def http_server() -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def healthcheck(port: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HYLO_HTTP_PORT": port}
    return subprocess.run(
        [sys.executable, str(DEPLOY / "healthcheck.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_healthcheck_script_exit_codes() -> None:
    with http_server() as port:
        assert healthcheck(str(port)).returncode == 0
        ready = healthcheck(str(port), "/readyz")
        assert ready.returncode == 1 and "HTTP 503" in ready.stderr
    refused = healthcheck(str(free_port()))
    assert refused.returncode == 1 and "Connection refused" in refused.stderr
    bad = healthcheck("")
    assert bad.returncode == 2 and "HYLO_HTTP_PORT must be a port number" in bad.stderr


# --- settings ------------------------------------------------------------------------------------


def compose_env(name: str) -> dict[str, str]:
    """A service's environment as Compose would pass it with no variables set in the shell."""
    env = services()[name]["environment"]
    return {k: interpolate(str(v)) for k, v in env.items() if v is not None}


@pytest.mark.parametrize("name", ["featurizer", "prioritizer", "placer", "adapter_sim", "query", "migrate"])
def test_compose_environment_and_settings_file_satisfy_the_settings(
    name: str, monkeypatch: pytest.MonkeyPatch, secrets_dir: Path
) -> None:
    for key in list(os.environ):
        if key.startswith("HYLO_"):
            monkeypatch.delenv(key)
    env = compose_env(name)
    assert env.pop("HYLO_CONFIG") == "/etc/hylo/hylo.toml"
    monkeypatch.setenv("HYLO_CONFIG", str(DEPLOY / "hylo.toml"))  # mounted there in the container
    mounts = secret_mounts(services()[name], secrets_dir)
    for key, value in env.items():
        if key.startswith("HYLO_NATS_") and name in ("query", "migrate"):
            continue  # the shared environment names the bus' CA; these two never talk to NATS
        if value.startswith("/run/secrets/"):  # a file the service must have been given as a secret
            assert value in mounts, f"{name}: {key}={value} is not one of its secrets"
            value = str(mounts[value])
        monkeypatch.setenv(key, value)

    if name not in ("query", "migrate"):
        bus = BusSettings()
        nodes = "tls://nats:4222,tls://nats-2:4222,tls://nats-3:4222"
        assert (bus.nats_url, bus.subject_root, bus.stream_replicas) == (nodes, "hylo", 3)
        options = connect_options(bus)  # the seed and CA files exist and are usable
        assert "tls" in options and options["nkeys_seed"].endswith(".nk")
    if name not in ("adapter_sim", "migrate"):  # they serve HTTP on 0.0.0.0: only with tokens
        api_guard(ApiSecuritySettings(), "0.0.0.0", name)  # ApiAuthError if the file is missing
    database_url = StoreSettings().database_url
    password = (secrets_dir / ("reader_password" if name == "query" else "postgres_password")).read_text()
    assert database_url.startswith("postgresql+asyncpg://")
    assert f":{password.strip()}@postgres" in database_url  # the password file was put into the URL
    assert TelemetrySettings().otlp_endpoint is None  # HYLO_OTLP_ENDPOINT="" means no exporter
    service = ServiceSettings()
    assert service.clusters == {"embedded": "embedded"} and service.base_policy == "fcfs"
    assert service.http_host == "0.0.0.0"
    assert set(load_specs(service.clusters)) == {"embedded"}
    if name == "query":
        assert QuerySettings().http_port == 8100
    if name == "adapter_sim":
        from services.adapter_sim.settings import AdapterSimSettings

        sim = AdapterSimSettings()
        assert (sim.sim_cluster, sim.spec_source()) == ("embedded", "embedded")


# --- the read-only role --------------------------------------------------------------------------


async def admin(dsn: str, *sql: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        for statement in sql:
            await conn.execute(statement)
    finally:
        await conn.close()


def test_reader_role_reads_everything_the_owner_migrates_and_writes_nothing(pg_admin_dsn: str) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("no psql client to run deploy/postgres/sql/reader.sql")
    tag = uuid.uuid4().hex[:10]
    owner, reader, db = f"hylo_owner_{tag}", f"hylo_reader_{tag}", f"hylo_test_{tag}"
    base = pg_admin_dsn.rsplit("/", 1)[0]
    host = base.split("@", 1)[1]
    asyncio.run(
        admin(
            pg_admin_dsn,
            f"CREATE ROLE {owner} LOGIN PASSWORD 'owner-pw'",
            f"CREATE DATABASE {db} OWNER {owner}",
        )
    )
    try:
        # as the postgres image runs it: the superuser, variables as in deploy/postgres/initdb
        for _ in range(2):  # a second run (re-initialised volume, manual re-run) changes nothing
            subprocess.run(
                [
                    psql,
                    f"{base}/{db}",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-v",
                    f"reader={reader}",
                    "-v",
                    "reader_password=it's-secret",
                    "-v",
                    f"owner={owner}",
                    "-v",
                    f"db={db}",
                    "-f",
                    str(DEPLOY / "postgres" / "sql" / "reader.sql"),
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            )
        owner_url = f"postgresql+asyncpg://{owner}:owner-pw@{host}/{db}"
        reader_url = f"postgresql+asyncpg://{reader}:it's-secret@{host}/{db}".replace("'", "%27")

        async def scenario() -> None:
            engine = await migrated(owner_url)  # the `migrate` service, as the owner
            await seed(engine, "prod-a")
            await engine.dispose()
            async with client(reader_url) as http:
                assert (await http.get("/readyz")).json()["status"] == "ready"
                page = await http.get("/v1/decisions", params={"cluster": "prod-a", "limit": 50})
                assert page.status_code == 200 and len(page.json()["items"]) == 7
                job = (await http.get("/v1/jobs/prod-a/j2")).json()
                assert job["outcome"]["wait_s"] == 101.0
                models = await http.get("/v1/models/prod-a-m1")
                assert models.json()["outcomes"]["jobs"] == 2  # the analyst view is readable too
            conn = await asyncpg.connect(f"postgresql://{reader}@{host}/{db}", timeout=5)
            try:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("INSERT INTO clusters (name) VALUES ('intruder')")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("DELETE FROM decisions")
            finally:
                await conn.close()

        asyncio.run(scenario())
    finally:
        asyncio.run(
            admin(
                pg_admin_dsn,
                f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)',
                f"DROP ROLE IF EXISTS {reader}",
                f"DROP ROLE IF EXISTS {owner}",
            )
        )


def test_postgres_init_script_is_valid_shell() -> None:
    script = DEPLOY / "postgres" / "initdb" / "10-hylo-reader.sh"
    assert os.access(script, os.X_OK), "the postgres image runs *.sh that are executable, sources others"
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    assert "-f /etc/hylo/reader.sql" in script.read_text()
    mounts = services()["postgres"]["volumes"]
    assert "./deploy/postgres/sql/reader.sql:/etc/hylo/reader.sql:ro" in mounts
