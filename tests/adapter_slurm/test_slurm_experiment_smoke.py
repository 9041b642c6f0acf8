"""A 4-job version of ``bench/slurm_experiment.py`` against a real local Slurm (under a minute).

It proves the harness end to end: a decisions database made and migrated for the run (PostgreSQL
on 127.0.0.1:5432 when it answers, else a SQLite file), a fresh cluster, the jobs submitted at
their arrival times, Slurm deciding while Hylo's services only watch and record (dry run), a fresh
cluster again, Hylo's four services managing priorities, every job's figures read back from the
database's outcome rows, and the JSON report. Its own state dir and ports (slurmctld on 7117), so neither the
adapter tests' cluster (6917) nor a developer's (6817) is touched. Skips, with the reason, where Slurm
cannot run here (not root, not installed and no apt-get) or the traces folder is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (deploy/slurm-dev/up starts slurmd)"
    if not Path("/usr/sbin/slurmctld").exists() and shutil.which("apt-get") is None:
        return "Slurm is not installed and apt-get is missing"
    from shared.config import get_settings

    if not (get_settings().traces_dir / "rltune/slurm_workloads_256.csv").is_file():
        return "traces folder (HYLO_TRACES_DIR) lacks rltune/slurm_workloads_256.csv"
    return None


def _postgres_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1.0):
            return True
    except OSError:
        return False


def test_experiment_harness_on_real_slurm(tmp_path: Path) -> None:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "result.json"
    # a short state dir: slurmd's unix sockets live under it, and a path inside pytest-xdist's
    # tmp_path (.../popen-gw0/test_experiment_harness_on_rea0/...) is too long for a socket name
    state_dir = Path(tempfile.mkdtemp(prefix="hx-", dir="/tmp")) / "s"
    # as a command, in its own process, as people run it
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/slurm_experiment.py"),
            "--runs",
            "slurm,hylo",
            "--store",
            "postgres" if _postgres_answers() else "sqlite",
            "--rows",
            "230:",
            "--jobs",
            "4",
            "--seconds-per-epoch",
            "1",
            "--poll-interval",
            "1",
            "--base-policy",
            "sjf",
            "--placement",
            "best-fit",
            "--state-dir",
            str(state_dir),
            "--workdir",
            str(tmp_path / "work"),
            "--ctld-port",
            "7117",
            "--slurmd-port-base",
            "7130",
            "--timeout",
            "120",
            "--json",
            str(out),
            "--quick",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    runs = {run["arm"]: run for run in report["runs"]}
    assert set(runs) == {"slurm", "hylo"}
    for run in runs.values():
        jobs = run["jobs"]
        assert len(jobs) == 4
        # every job's figures came from the decisions database, and agree with Slurm's own records
        assert run["per_job_source"]["database"] == 4
        assert run["per_job_source"]["database_vs_jobcomp_over_1s"] == 0
        assert run["hylo"]["decisions"]["job_rows"] >= 1
        assert all(j["state"] == "COMPLETED" for j in jobs)
        assert all(j["start"] >= j["submit"] and j["end"] >= j["start"] for j in jobs)
        m = run["metrics"]
        assert m["makespan_s"] > 0 and 0 < m["gpu_utilization"] <= 1
    # Slurm alone never shows a priority in Hylo's band; with Hylo, every job that got one got it
    # after it was submitted
    assert all(j["hylo_priority_seen"] is None for j in runs["slurm"]["jobs"])
    assert runs["slurm"]["hylo"]["mode"].startswith("observing")
    assert all(j["time_to_priority_s"] is None or j["time_to_priority_s"] >= 0 for j in runs["hylo"]["jobs"])
    assert set(report["summary"]["arms"]) == {"slurm", "hylo"}
    assert "hylo vs slurm" in report["summary"]["paired_change_pct"]
    assert not state_dir.exists()  # the cluster was taken down
    shutil.rmtree(state_dir.parent, ignore_errors=True)
