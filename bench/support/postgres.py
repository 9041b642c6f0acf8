"""A throwaway PostgreSQL server that can be stopped and started again: for tests and benchmarks.

Why a private server and not the machine's (127.0.0.1:5432): other tests and sessions use that one,
so it can neither be stopped (an outage test) nor filled with a million rows (a benchmark). This one
is made with ``initdb`` in a temporary directory, listens on a free port of 127.0.0.1 (and on a
socket in its own directory), and is removed by ``cleanup``. ``stop`` and ``start`` keep the port
and the data, so a caller can take the database away and bring it back: a real outage.

The binaries come from the system's PostgreSQL (the newest ``/usr/lib/postgresql/*/bin``, else
``initdb`` on ``PATH``). ``initdb`` refuses to run as root, so as root the server runs as the
``postgres`` user (through ``runuser``), which owns the directory.

What to do when no server can be made is the caller's choice: ``PostgresUnavailable`` says why, a
test turns it into ``pytest.skip`` and a benchmark into an exit with that message.

    with ThrowawayPostgres() as pg:      # started; stopped and deleted on the way out
        engine = create_engine(pg.url)
        pg.stop(); pg.start()            # an outage, same port and data
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

#: fsync off: a throwaway server need not survive a power cut, and writes get much cheaper
DEFAULT_SETTINGS: Mapping[str, str] = {"fsync": "off"}


class PostgresUnavailable(RuntimeError):
    """No throwaway PostgreSQL can be started here (no binaries, or root without ``runuser``)."""


def postgres_bindir() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: the newest system PostgreSQL, else ``PATH``; None if none."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ThrowawayPostgres:
    """A private server in ``root`` (a new temporary directory by default), initialized but not started.

    A ``root`` that already holds a data directory (a server kept with ``stop`` instead of
    ``cleanup``) is reused as it is: its port is chosen anew, its data kept.

    ``settings`` are server settings (``-c name=value``) on top of ``DEFAULT_SETTINGS``. Raises
    ``PostgresUnavailable`` when no server can be made here; ``subprocess.CalledProcessError`` when
    ``initdb`` itself fails.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        settings: Mapping[str, str] | None = None,
        prefix: str = "hylo-pg-",
    ) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            raise PostgresUnavailable("no initdb/pg_ctl (install PostgreSQL's server package)")
        run_as: list[str] = []
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # initdb refuses root
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root without runuser: cannot run initdb")
            run_as = ["runuser", "-u", "postgres", "--"]
        self.bindir = bindir
        self.run_as = run_as
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix=prefix))
        self.root.mkdir(parents=True, exist_ok=True)
        if run_as:
            shutil.chown(self.root, "postgres")
        self.data = self.root / "data"
        self.log = self.root / "log"
        self.port = free_port()
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.running = False
        #: the data directory was there already (a kept server, started again)
        self.reused = (self.data / "PG_VERSION").exists()
        if self.reused:
            return
        try:
            self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def url(self) -> str:
        """SQLAlchemy async URL of the ``postgres`` database (superuser ``postgres``, no password)."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def dsn(self) -> str:
        """libpq/asyncpg DSN of the same database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run([*self.run_as, str(self.bindir / tool), *args], check=True, capture_output=True)

    def start(self) -> None:
        """Start the server (again) on its port, with its data; returns once it accepts connections."""
        opts = [f"-p {self.port}", f"-k {self.root}", "-h 127.0.0.1"]
        opts += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._pg("pg_ctl", "-D", str(self.data), "-o", " ".join(opts), "-w", "-l", str(self.log), "start")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` cuts open sessions (a failover or a restart), ``immediate`` aborts."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    def cleanup(self) -> None:
        """Stop the server if it runs and delete its directory (never raises)."""
        if self.running:
            try:
                self.stop("immediate")
            except (subprocess.CalledProcessError, OSError):
                self.running = False
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
