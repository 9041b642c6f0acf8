"""A private nats-server for tests that stop it or limit its storage (never the machine's server)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.adapter_sim.stack import free_port
from tests.conftest_services import VENV_BIN, _wait_port


def nats_binary() -> Path:
    binary = VENV_BIN / "nats-server"
    if binary.exists():
        return binary
    found = shutil.which("nats-server")
    if found is None:
        pytest.skip("no nats-server binary to start a private server")
    return Path(found)


@contextlib.contextmanager
def private_nats(
    tmp_path: Path, jetstream: str = "", includes: tuple[Path, ...] = ()
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start nats-server with JetStream in ``tmp_path``; ``jetstream``: extra lines of its block;
    ``includes``: configuration files under ``tmp_path`` to include (authorization, TLS)."""
    port = free_port()
    store = tmp_path / "js"
    conf = tmp_path / "nats.conf"
    extra = "".join(f'include "{path.relative_to(tmp_path)}"\n' for path in includes)
    conf.write_text(
        f'listen: 127.0.0.1:{port}\njetstream {{\n  store_dir: "{store}"\n{jetstream}\n}}\n{extra}'
    )
    proc = subprocess.Popen(
        [str(nats_binary()), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_port(port, proc, "nats-server")
        yield f"nats://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="session", name="nats_url")
def private_nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``nats_url`` for suites that must not touch the machine's server (security, faults, bombs):
    a private nats-server with JetStream for the session (each xdist worker has its own)."""
    with private_nats(tmp_path_factory.mktemp("private-nats")) as (url, _):
        yield url
