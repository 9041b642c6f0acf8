"""The fail-safe watchdog: when Hylo stops deciding, hand its priorities back to Slurm's own.

    python -m services.adapter_slurm.failsafe            # check every HYLO_SLURM_FAILSAFE_EVERY_S
    python -m services.adapter_slurm.failsafe --once     # one check (cron, systemd timer, scrontab)

Why a process of its own: the priorities Hylo writes are fixed in Slurm until released, so if the
adapter, the bus or the pipeline dies they would stay above every new job's for good. Nothing of
Hylo's pipeline can be trusted to undo that, the adapter included (SIGKILL, out of memory), so this
watchdog needs only the lease file (``lease.py``), Slurm's client commands and the settings; it
imports nothing of the bus, the store or the model. ``deploy/slurm-dev/up`` runs it beside slurmctld;
``docs/slurm-adapter.md`` ("Fail-safe") shows a systemd unit and a cron line.

One check: read the lease. Renewed within ``HYLO_SLURM_FAILSAFE_AFTER_S``: nothing to do (Slurm is
not even asked). Older: read the pending jobs and release (``handback.py``) those that still carry
a priority the lease records, re-reading the lease before each batch so that an adapter that comes
back (and renews it before writing anything) is not undone. Priorities are Slurm's own again at
most ``AFTER_S + EVERY_S`` (plus the ``scontrol`` calls) after the last decision. No lease yet: no
adapter has decided with this path, nothing is Hylo's. A lease that exists but cannot be read or
belongs to another cluster is an error that must not disable the fail-safe: every pending job in
Hylo's band (``HYLO_SLURM_PRIORITY_BOTTOM``..``TOP``) of the managed partitions and QOS is
released then (for a job whose priority Slurm computed, a release only recomputes it).

Checks are idempotent and the watchdog keeps no state between them, so a crashed or restarted
watchdog, or two of them, do no harm; each check is one ``squeue`` at most while the lease is stale.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Literal

from pydantic import ValidationError

from services.adapter_slurm.commands import CommandRunner, SlurmCommandError
from services.adapter_slurm.handback import HandBack, hand_back, read_pending, release
from services.adapter_slurm.lease import Lease, LeaseError, read_lease
from services.adapter_slurm.settings import SlurmAdapterSettings
from services.adapter_slurm.snapshot import JobFilter

log = logging.getLogger("hylo.failsafe")

State = Literal["no-lease", "fresh", "stale", "unreadable"]


@dataclass(frozen=True)
class Check:
    """One check: what the lease said, its age, and what was handed back (None: nothing was due)."""

    state: State
    lease: Lease | None = None
    age_s: float | None = None
    handed_back: HandBack | None = None
    problem: str | None = None


def runner_for(settings: SlurmAdapterSettings) -> CommandRunner:
    return CommandRunner(
        slurm_conf=settings.slurm_conf,
        bin_dir=settings.slurm_bin_dir,
        timeout_s=settings.slurm_command_timeout_s,
        dry_run=settings.slurm_dry_run,
    )


def _release_band(settings: SlurmAdapterSettings, runner: CommandRunner) -> HandBack:
    """The fallback of an untrustworthy lease: every pending, unheld, managed job in Hylo's band."""
    jobs_filter = JobFilter(frozenset(settings.slurm_partitions), frozenset(settings.slurm_excluded_qos))
    lo, hi = settings.slurm_priority_bottom, settings.slurm_priority_top
    due = [
        j.job_id
        for j in read_pending(runner)
        if not j.held and j.priority is not None and lo <= j.priority <= hi and jobs_filter.managed(j)
    ]
    return release(runner, due)


def check_once(
    settings: SlurmAdapterSettings, runner: CommandRunner, *, now: Callable[[], float] = time.time
) -> Check:
    """One check (module docstring); raises SlurmCommandError when Slurm cannot be read or reached."""
    path, cluster, after = (
        settings.failsafe_lease_path(),
        settings.slurm_cluster,
        settings.slurm_failsafe_after_s,
    )
    try:
        lease = read_lease(path, cluster)
    except LeaseError as err:
        return Check("unreadable", handed_back=_release_band(settings, runner), problem=str(err))
    if lease is None:
        return Check("no-lease")
    checked_at = now()
    age = lease.age_s(checked_at)
    if not lease.expired(checked_at, after):
        return Check("fresh", lease, age)
    if not lease.jobs:
        return Check("stale", lease, age)

    def still_due() -> bool:
        try:
            current = read_lease(path, cluster)
        except LeaseError:
            return True
        return current is None or current.expired(now(), after)

    return Check("stale", lease, age, hand_back(runner, lease.jobs, still_due=still_due))


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(check: Check, previous: State | None, settings: SlurmAdapterSettings) -> None:
    """Log what an operator needs: state changes, every hand-back, every problem."""
    path = settings.failsafe_lease_path()
    if check.problem is not None:
        log.error("%s: released every pending job in Hylo's band instead", check.problem)
    elif check.state == "no-lease" and previous != "no-lease":
        log.info("no lease at %s yet: no adapter has decided with it, nothing to hand back", path)
    elif check.state == "fresh" and previous not in (None, "fresh"):
        log.info("lease %s is being renewed: Hylo is deciding", path)
    elif check.state == "stale" and previous != "stale" and check.lease is not None:
        log.warning(
            "Hylo has not decided for %.1f s (limit %g s; lease renewed %s by %s)",
            check.age_s or 0.0,
            settings.slurm_failsafe_after_s,
            _stamp(check.lease.renewed_at),
            check.lease.owner,
        )
    back = check.handed_back
    if back is not None and (back.released or back.gone or back.failed or back.stopped):
        log.warning("handed jobs back to Slurm's own priority: %s", back.summary())
        if back.released:
            log.info("released: %s", " ".join(back.released))
        for job_id, reason in back.failed:
            log.error("job %s could not be handed back: %s", job_id, reason)


def run_loop(settings: SlurmAdapterSettings, runner: CommandRunner, stop: threading.Event) -> None:
    """Check every ``slurm_failsafe_every_s`` until ``stop``; Slurm failures are logged and retried."""
    every = settings.slurm_failsafe_every_s
    log.info(
        "fail-safe watchdog for cluster %s: lease %s, hand back after %g s without a decision, "
        "checking every %g s",
        settings.slurm_cluster,
        settings.failsafe_lease_path(),
        settings.slurm_failsafe_after_s,
        every,
    )
    previous: State | None = None
    while not stop.is_set():
        started = time.monotonic()
        try:
            check = check_once(settings, runner)
        except SlurmCommandError as err:
            log.warning("%s; checking again in %g s", err, every)
        else:
            report(check, previous, settings)
            previous = check.state
        stop.wait(max(0.0, every - (time.monotonic() - started)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.adapter_slurm.failsafe",
        description="Hand Hylo's Slurm priorities back to Slurm when Hylo stops deciding "
        "(settings: HYLO_SLURM_FAILSAFE_*, HYLO_SLURM_CLUSTER, HYLO_SLURM_CONF; docs/slurm-adapter.md).",
    )
    parser.add_argument("--once", action="store_true", help="check once and exit (cron, systemd timer)")
    parser.add_argument("--pid-file", type=Path, help="write this process's pid there while it runs")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        settings = SlurmAdapterSettings()
    except ValidationError as err:
        log.error("invalid settings: %s", err)
        return 2
    if not settings.failsafe_enabled:
        log.info("the fail-safe is off (HYLO_SLURM_FAILSAFE_AFTER_S=0): nothing to watch")
        return 0
    runner = runner_for(settings)
    if args.once:
        try:
            check = check_once(settings, runner)
        except SlurmCommandError as err:
            log.error("%s", err)
            return 1
        report(check, None, settings)
        return 1 if check.problem is not None else 0
    stop = threading.Event()

    def _stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.pid_file is not None:
        args.pid_file.write_text(f"{os.getpid()}\n", encoding="utf-8")
    try:
        run_loop(settings, runner, stop)
    finally:
        if args.pid_file is not None:
            with contextlib.suppress(OSError):
                args.pid_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
