"""The fail-safe's logic without a cluster: the lease (fresh, stale, clock skew, untrustworthy
files), what is still Hylo's after a poll, ``scontrol release`` batches and errors, and the
watchdog's check, races with a recovering adapter included.

Slurm is not needed here: the check is run against two small stand-in programs (``squeue`` prints a
queue from a file, ``scontrol`` records its arguments) through ``HYLO_SLURM_BIN_DIR``, so that the
moment an adapter renews its lease can be placed exactly between the watchdog's reading of the
queue and its release. The same behaviour on the real Slurm is ``test_failsafe_live.py``.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.adapter_slurm.commands import CommandRunner, SlurmCommandError
from services.adapter_slurm.failsafe import check_once, main
from services.adapter_slurm.handback import release, release_errors
from services.adapter_slurm.lease import (
    Lease,
    LeaseError,
    read_lease,
    reconcile,
    still_hylos,
    write_lease,
)
from services.adapter_slurm.model import SlurmJob
from services.adapter_slurm.settings import SlurmAdapterSettings

CLUSTER = "slurm-unit"


def job(job_id: str, priority: int | None, state: str = "PENDING", reason: str = "Priority") -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        state=state,
        priority=priority,
        partition="gpu",
        qos="normal",
        user="u",
        submit_s=0.0,
        start_s=None,
        end_s=None,
        time_limit_s=60.0,
        cpus=1,
        mem_mib=1024,
        node_count=1,
        nodes=(),
        gpus=1,
        gpu_types=(),
        reason=reason,
    )


def lease(renewed_at: float, jobs: dict[str, set[int]] | None = None, cluster: str = CLUSTER) -> Lease:
    return Lease(cluster, renewed_at, "host:1", {j: frozenset(v) for j, v in (jobs or {}).items()})


# -- the lease file -------------------------------------------------------------------------------


def test_lease_round_trip_and_a_missing_lease(tmp_path: Path) -> None:
    path = tmp_path / "state" / "slurm.lease.json"
    assert read_lease(path, CLUSTER) is None  # no adapter has decided with this path yet
    written = lease(1_700_000_000.5, {"12": {1_000_000}, "13_4": {999_999, 999_998}})
    write_lease(path, written)
    assert read_lease(path, CLUSTER) == written
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ("[]", "JSON object"),
        ('{"version": 2, "cluster": "slurm-unit", "renewed_at": 1, "owner": "h", "jobs": {}}', "version 2"),
        ('{"version": 1, "cluster": "elsewhere", "renewed_at": 1, "owner": "h", "jobs": {}}', "elsewhere"),
        ('{"version": 1, "cluster": "slurm-unit", "renewed_at": "1", "owner": "h", "jobs": {}}', "epoch"),
        ('{"version": 1, "cluster": "slurm-unit", "renewed_at": 1, "owner": "h", "jobs": []}', "'jobs'"),
        (
            '{"version":1,"cluster":"slurm-unit","renewed_at":1,"owner":"h","jobs":{"1;rm -rf /":[5]}}',
            "job id",
        ),
        ('{"version":1,"cluster":"slurm-unit","renewed_at":1,"owner":"h","jobs":{"7":[]}}', "non-empty"),
        ('{"version":1,"cluster":"slurm-unit","renewed_at":1,"owner":"h","jobs":{"7":[0]}}', "positive"),
        ('{"version":1,"cluster":"slurm-unit","renewed_at":1,"owner":"h","jobs":{"7":[true]}}', "positive"),
    ],
)
def test_a_lease_that_cannot_be_trusted_is_an_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "lease.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LeaseError) as err:
        read_lease(path, CLUSTER)
    assert str(path) in str(err.value) and message in str(err.value)


def test_a_failed_write_keeps_the_previous_lease(tmp_path: Path) -> None:
    path = tmp_path / "lease.json"
    first = lease(100.0, {"5": {10}})
    write_lease(path, first)
    (tmp_path / f".lease.json.{os.getpid()}.tmp").mkdir()  # the temporary file cannot be created
    with pytest.raises(LeaseError, match="cannot write"):
        write_lease(path, lease(200.0))
    assert read_lease(path, CLUSTER) == first


def test_fresh_stale_and_a_clock_that_jumped() -> None:
    renewed = 1_000.0
    held = lease(renewed)
    assert not held.expired(renewed, 60.0)
    assert not held.expired(renewed + 59.9, 60.0)
    assert held.expired(renewed + 60.0, 60.0)  # not renewed for the whole limit: stale
    assert held.expired(renewed + 3_600.0, 60.0)
    assert not held.expired(renewed - 59.0, 60.0)  # a little skew between hosts is tolerated
    assert held.expired(renewed - 61.0, 60.0)  # stamped far in the future: never silences the watchdog
    assert held.age_s(renewed + 5.0) == 5.0


# -- what is still Hylo's --------------------------------------------------------------------------


def test_reconcile_keeps_only_priorities_still_in_place() -> None:
    written = {
        "1": frozenset({500, 400}),  # the update to 400 went through
        "2": frozenset({500}),  # someone (an admin, a hand-back) set another value
        "3": frozenset({500}),  # started
        "4": frozenset({500}),  # left the queue
        "5": frozenset({500}),  # a user held it
        "6": frozenset({300, 200}),  # priority not shown by this poll: kept as it was
    }
    jobs = {
        "1": job("1", 400),
        "2": job("2", 1_270),
        "3": job("3", 500, state="RUNNING"),
        "5": job("5", 0, reason="JobHeldUser"),
        "6": job("6", None),
    }
    assert reconcile(written, jobs) == {"1": frozenset({400}), "6": frozenset({300, 200})}


def test_only_pending_unheld_jobs_with_hylos_value_are_due() -> None:
    written = {"1": frozenset({900}), "2": frozenset({900}), "3": frozenset({900})}
    assert still_hylos(job("1", 900), written)
    assert not still_hylos(job("1", 901), written)
    assert not still_hylos(job("2", 900, reason="JobHeldAdmin"), written)
    assert not still_hylos(job("3", 900, state="RUNNING"), written)
    assert not still_hylos(job("4", 900), written)  # never Hylo's


# -- scontrol release -----------------------------------------------------------------------------


def test_release_errors_come_per_job() -> None:
    # what Slurm 22.05.8 printed for "scontrol release 4,99998,5" (99998 unknown)
    stderr = "Invalid job id specified for job 99998\nslurm_suspend error: No error\n"
    assert release_errors(stderr) == {"99998": "Invalid job id specified"}


def test_release_goes_in_batches_and_stops_when_no_longer_due() -> None:
    runner = CommandRunner(dry_run=True)  # records the commands instead of running them
    ids = [str(i) for i in range(1, 121)]
    done = release(runner, ids, chunk=50)
    assert done.released == ids and not done.stopped
    assert [a[:2] for a in runner.would_run] == [("scontrol", "release")] * 3
    assert runner.would_run[0][2] == ",".join(ids[:50])

    # the adapter renews its lease after the first batch: the rest is left to it
    runner = CommandRunner(dry_run=True)
    answers = iter([True, False])
    done = release(runner, ids, chunk=50, still_due=lambda: next(answers))
    assert done.stopped and done.released == ids[:50] and len(runner.would_run) == 1


# -- the watchdog's check, on stand-in squeue/scontrol ---------------------------------------------


@pytest.fixture
def fake_slurm(tmp_path: Path) -> Path:
    """A bin dir whose ``squeue`` prints ``queue.txt`` (after running ``before-squeue`` when present)
    and whose ``scontrol`` appends its arguments to ``scontrol.log``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "squeue": '#!/bin/sh\nd="$(dirname "$0")"\n[ -x "$d/before-squeue" ] && "$d/before-squeue"\n'
        'cat "$d/queue.txt"\n',
        "scontrol": '#!/bin/sh\necho "$@" >>"$(dirname "$0")/scontrol.log"\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(stat.S_IRWXU)
    (bin_dir / "queue.txt").write_text("", encoding="utf-8")
    return bin_dir


def queue_line(job_id: str, priority: int, partition: str = "gpu", reason: str = "Priority") -> str:
    return f"{job_id}|PENDING|{priority}|{partition}|normal|u|1795370913|N/A|N/A|5:00|1|4G|1|gres:gpu:1||{reason}"


def watchdog_settings(bin_dir: Path, after_s: float = 60.0) -> SlurmAdapterSettings:
    return SlurmAdapterSettings(
        slurm_cluster=CLUSTER,
        slurm_bin_dir=bin_dir,
        slurm_poll_interval_s=1.0,
        slurm_failsafe_after_s=after_s,
        slurm_failsafe_lease=bin_dir.parent / "lease.json",
        slurm_partitions=("gpu",),
    )


def released(bin_dir: Path) -> list[str]:
    log = bin_dir / "scontrol.log"
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def test_no_lease_or_a_fresh_one_asks_slurm_nothing(tmp_path: Path) -> None:
    # a squeue that does not exist: any call to Slurm would raise
    settings = watchdog_settings(tmp_path / "no-such-bin")
    runner = CommandRunner(bin_dir=settings.slurm_bin_dir)
    assert check_once(settings, runner).state == "no-lease"
    write_lease(settings.failsafe_lease_path(), lease(time.time(), {"7": {1_000_000}}))
    assert check_once(settings, runner).state == "fresh"
    write_lease(settings.failsafe_lease_path(), lease(time.time() - 600))  # stale, nothing recorded
    assert check_once(settings, runner).state == "stale"
    write_lease(settings.failsafe_lease_path(), lease(time.time() - 600, {"7": {1_000_000}}))
    with pytest.raises(SlurmCommandError, match="not found"):  # now it must read the queue
        check_once(settings, runner)


def test_a_stale_lease_hands_back_only_what_is_still_hylos(fake_slurm: Path) -> None:
    settings = watchdog_settings(fake_slurm)
    (fake_slurm / "queue.txt").write_text(
        "\n".join(
            [
                queue_line("1", 1_000_000),  # Hylo's value: handed back
                queue_line("2", 999_999),  # Hylo's value: handed back
                queue_line("3", 1_500),  # an admin changed it since: left alone
                queue_line("4", 0, reason="JobHeldUser"),  # a user's hold: never released
                queue_line("5", 999_000),  # never Hylo's
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    recorded = {"1": {1_000_000}, "2": {999_999, 999_998}, "3": {999_997}, "4": {999_996}}
    write_lease(settings.failsafe_lease_path(), lease(time.time() - 61, recorded))
    check = check_once(settings, CommandRunner(bin_dir=fake_slurm))
    assert check.state == "stale" and check.handed_back is not None
    assert check.handed_back.released == ["1", "2"] and not check.handed_back.stopped
    assert released(fake_slurm) == ["release", "1,2"]
    # idempotent: the next check (Slurm's values now in place) releases nothing
    (fake_slurm / "queue.txt").write_text(
        queue_line("1", 1_270) + "\n" + queue_line("2", 1_270) + "\n", encoding="utf-8"
    )
    check = check_once(settings, CommandRunner(bin_dir=fake_slurm))
    assert check.handed_back is not None and check.handed_back.released == []
    assert released(fake_slurm) == ["release", "1,2"]


def test_an_adapter_that_renews_while_the_watchdog_reads_the_queue_wins(fake_slurm: Path) -> None:
    settings = watchdog_settings(fake_slurm)
    path = settings.failsafe_lease_path()
    (fake_slurm / "queue.txt").write_text(queue_line("1", 1_000_000) + "\n", encoding="utf-8")
    write_lease(path, lease(time.time() - 61, {"1": {1_000_000}}))
    # the recovering adapter renews its lease (before writing priorities) just as squeue runs
    fresh = lease(time.time(), {"1": {1_000_000}}).to_json()
    (fake_slurm / "renewed.json").write_text(fresh, encoding="utf-8")
    hook = fake_slurm / "before-squeue"
    hook.write_text(f'#!/bin/sh\ncp "$(dirname "$0")/renewed.json" {path}\n', encoding="utf-8")
    hook.chmod(stat.S_IRWXU)
    check = check_once(settings, CommandRunner(bin_dir=fake_slurm))
    assert check.state == "stale" and check.handed_back is not None and check.handed_back.stopped
    assert released(fake_slurm) == []  # the adapter's priority stands


def test_an_untrustworthy_lease_hands_back_the_whole_band(fake_slurm: Path) -> None:
    settings = watchdog_settings(fake_slurm)
    settings.failsafe_lease_path().write_text("garbage", encoding="utf-8")
    (fake_slurm / "queue.txt").write_text(
        "\n".join(
            [
                queue_line("1", 1_000_000),  # in Hylo's band: released
                queue_line("2", 500),  # below the band: Slurm's own
                queue_line("3", 999_999, partition="debug"),  # a partition Hylo does not manage
                queue_line("4", 999_998, reason="JobHeldAdmin"),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    check = check_once(settings, CommandRunner(bin_dir=fake_slurm))
    assert check.state == "unreadable" and check.problem is not None and "not JSON" in check.problem
    assert released(fake_slurm) == ["release", "1"]


def test_the_command_line_checks_once(fake_slurm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lease_path = fake_slurm.parent / "lease.json"
    for key, value in {
        "HYLO_CONFIG": str(fake_slurm.parent / "absent.toml"),
        "HYLO_SLURM_CLUSTER": CLUSTER,
        "HYLO_SLURM_BIN_DIR": str(fake_slurm),
        "HYLO_SLURM_FAILSAFE_LEASE": str(lease_path),
        "HYLO_SLURM_FAILSAFE_AFTER_S": "60",
    }.items():
        monkeypatch.setenv(key, value)
    (fake_slurm / "queue.txt").write_text(queue_line("9", 1_000_000) + "\n", encoding="utf-8")
    write_lease(lease_path, lease(time.time() - 120, {"9": {1_000_000}}))
    assert main(["--once"]) == 0
    assert released(fake_slurm) == ["release", "9"]
    monkeypatch.setenv("HYLO_SLURM_FAILSAFE_AFTER_S", "0")  # the fail-safe turned off
    assert main(["--once"]) == 0
    monkeypatch.setenv("HYLO_SLURM_FAILSAFE_AFTER_S", "1")  # shorter than two polls (30 s)
    assert main(["--once"]) == 2


# -- settings -------------------------------------------------------------------------------------


def test_failsafe_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HYLO_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    settings = SlurmAdapterSettings(slurm_cluster="gpu-east")
    assert settings.failsafe_enabled and settings.slurm_failsafe_after_s == 300.0
    assert settings.failsafe_lease_path() == tmp_path / "state" / "hylo" / "slurm-gpu-east.lease.json"
    assert not SlurmAdapterSettings(slurm_failsafe_after_s=0).failsafe_enabled
    with pytest.raises(ValidationError, match="at least twice"):
        SlurmAdapterSettings(slurm_poll_interval_s=30, slurm_failsafe_after_s=45)
    monkeypatch.setenv("HYLO_SLURM_FAILSAFE_LEASE", str(tmp_path / "x.json"))
    assert SlurmAdapterSettings().failsafe_lease_path() == tmp_path / "x.json"
    assert json.loads(lease(1.0, {"3": {2, 1}}).to_json())["jobs"] == {"3": [1, 2]}
