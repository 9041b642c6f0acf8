"""A private PostgreSQL server a test can stop and start again: a real database outage.

Why not the shared server (127.0.0.1:5432): other tests and sessions use it; stopping it would fail
them. This one lives in a temporary directory on a free port, is started with ``initdb``/``pg_ctl``
(as the ``postgres`` user when the tests run as root, since ``initdb`` refuses root) and is removed
afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.adapter_sim.stack import free_port
from tests.conftest_services import _pg_bin


class OutagePostgres:
    """``stop()`` takes the database away (connections are cut, new ones refused); ``start()``
    brings it back on the same port with the same data."""

    def __init__(self, root: Path) -> None:
        bindir = _pg_bin()
        if bindir is None:
            pytest.skip("no initdb/pg_ctl to start a throwaway PostgreSQL")
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.run_as: list[str] = []
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # initdb refuses root
            if shutil.which("runuser") is None:
                pytest.skip("running as root without runuser: cannot start a throwaway PostgreSQL")
            shutil.chown(root, "postgres")
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.up = False

    @property
    def url(self) -> str:
        """SQLAlchemy async URL of its ``postgres`` database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run([*self.run_as, str(self.bindir / tool), *args], check=True, capture_output=True)

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -h 127.0.0.1 -F"
        self._pg("pg_ctl", "-D", str(self.data), "-o", opts, "-w", "-l", str(self.root / "log"), "start")
        self.up = True

    def stop(self) -> None:
        """A fast shutdown: open sessions are terminated, as in a failover or a restart."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        self.up = False


@contextmanager
def outage_postgres() -> Iterator[OutagePostgres]:
    """A started throwaway server, stopped and deleted on the way out."""
    root = Path(tempfile.mkdtemp(prefix="hylo-outage-pg-"))
    server = OutagePostgres(root)
    try:
        server.start()
        yield server
    finally:
        if server.up:
            subprocess.run(
                [
                    *server.run_as,
                    str(server.bindir / "pg_ctl"),
                    "-D",
                    str(server.data),
                    "-m",
                    "immediate",
                    "stop",
                ],
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)
