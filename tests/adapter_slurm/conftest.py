"""A real Slurm for the adapter tests: ``deploy/slurm-dev/up`` once, ``down`` at the end.

The cluster lives in its own state dir and ports (``/tmp/hylo-slurm-test``, slurmctld on 6917), so a
developer's ``deploy/slurm-dev/up`` cluster (6817) is never touched; it runs with ``--accounting``
(slurmdbd on a private MariaDB) so QOS are real and ``sacct`` answers. Under pytest-xdist every worker
runs this session fixture: a file lock serializes ``up``, each worker registers itself, and the last
one to finish runs ``down`` (only if a test session started the cluster). Tests skip, with the
reason, only when Slurm cannot be installed or started here (no root, no apt-get).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.adapter_slurm.adapter import SlurmAdapter
from services.adapter_slurm.commands import CommandRunner
from services.adapter_slurm.settings import SlurmAdapterSettings
from shared.domain.cluster import load_cluster_spec
from tests.conftest_services import bus, nats_url  # the service tests' real NATS

__all__ = ["bus", "nats_url"]

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "deploy" / "slurm-dev" / "up"
DOWN = ROOT / "deploy" / "slurm-dev" / "down"
FIXTURES = Path(__file__).parent / "fixtures"
#: the test cluster: its own ports, accounting (slurmdbd) for real QOS and sacct, and the push-event
#: hooks addressed to the tests' cluster name (they send to udp://127.0.0.1:6997, 6917 + 80)
UP_ARGS = (
    "--ctld-port",
    "6917",
    "--slurmd-port-base",
    "6930",
    "--accounting",
    "--hylo-cluster",
    "slurm-test",
)


@dataclass(frozen=True)
class SlurmCluster:
    state_dir: Path
    conf: Path
    spec: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "SLURM_TIME_FORMAT": "%s"}

    def run(self, *argv: str, check: bool = True) -> str:
        """Run a Slurm client command against this cluster (argument list, never a shell)."""
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def submit(self, *options: str, command: str = "sleep 300") -> str:
        """``sbatch --parsable``; returns the job id."""
        out = self.run(
            "sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", *options, "--wrap", command
        )
        return out.strip().split(";")[0]

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            self.run("scancel", *job_ids, check=False)

    def settings(self, **overrides: object) -> SlurmAdapterSettings:
        values: dict[str, object] = {
            "slurm_cluster": "slurm-test",
            "clusters": {"slurm-test": str(self.spec)},
            "slurm_conf": self.conf,
            "slurm_poll_interval_s": 1.0,
            # a fail-safe lease of each adapter's own: tests side by side must not take over (and
            # hand back) each other's priorities
            "slurm_failsafe_lease": self.state_dir / "leases" / f"{uuid.uuid4().hex}.json",
        }
        values.update(overrides)
        return SlurmAdapterSettings(**values)  # type: ignore[arg-type]

    def adapter(self, **overrides: object) -> SlurmAdapter:
        settings = self.settings(**overrides)
        runner = CommandRunner(slurm_conf=self.conf, timeout_s=20.0, dry_run=settings.slurm_dry_run)
        return SlurmAdapter(settings, load_cluster_spec(settings.spec_source()), runner)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "Slurm tests need root (slurmd runs as root; deploy/slurm-dev/up installs packages)"
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and apt-get is missing to install it"
    return None


def _up(state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(UP), "--state-dir", str(state_dir), *extra],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def start_cluster(state_dir: Path, *extra: str) -> SlurmCluster:
    """Run ``up`` (idempotent); fail with its output when it cannot start Slurm."""
    proc = _up(state_dir, *extra)
    if proc.returncode != 0:
        text = (proc.stdout + proc.stderr).strip()
        if "apt-get install" in text and "failed" in text:
            pytest.skip(f"Slurm cannot be installed here: {text[-300:]}")
        raise AssertionError(f"deploy/slurm-dev/up failed ({proc.returncode}):\n{text[-2000:]}")
    return SlurmCluster(state_dir, state_dir / "slurm.conf", state_dir / "cluster.toml")


def _alive(entry: Path) -> bool:
    """A registration ``<pid>-<suffix>`` whose process still runs (a killed worker leaves one behind)."""
    pid = entry.name.split("-", 1)[0]
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def stop_cluster(state_dir: Path) -> None:
    subprocess.run([str(DOWN), "--state-dir", str(state_dir)], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    state_dir = Path(os.environ.get("HYLO_SLURM_TEST_STATE_DIR", "/tmp/hylo-slurm-test"))
    lock_path = Path(f"{state_dir}.lock")
    users = Path(f"{state_dir}.users")
    started = users / "started-by-tests"
    me = users / f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fresh = not (state_dir / "run" / "slurmctld.pid").exists()
            cluster = start_cluster(state_dir, *UP_ARGS)
            users.mkdir(exist_ok=True)
            me.touch()
            if fresh:
                started.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    try:
        yield cluster
    finally:
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                me.unlink(missing_ok=True)
                others = [p for p in users.iterdir() if p != started and _alive(p)] if users.exists() else []
                if not others and started.exists():  # the last session out stops what a session started
                    stop_cluster(state_dir)
                    shutil.rmtree(users, ignore_errors=True)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def private_slurm() -> Iterator[SlurmCluster]:
    """A small cluster of one test's own (state dir, ports), for tests that stop slurmctld."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    state_dir = Path(f"/tmp/hylo-slurm-test-{os.getpid()}")
    cluster = start_cluster(
        state_dir, "--layout", "small", "--ctld-port", "7217", "--slurmd-port-base", "7230"
    )
    try:
        yield cluster
    finally:
        stop_cluster(state_dir)


def wait_for(predicate: object, timeout_s: float, what: str, interval_s: float = 0.25) -> None:
    """Poll ``predicate()`` until true; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
