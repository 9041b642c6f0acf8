"""Handing jobs back to Slurm's own priority: the one code path of the graceful stop and the fail-safe.

How (verified on Slurm 22.05.8, ``docs/slurm-adapter.md``, "Fail-safe"): ``scontrol release <ids>``
on a pending job that is *not* held. scontrol sends it as a priority update to the special value
INFINITE, which slurmctld answers by clearing the job's fixed priority and computing the plugin's
own at once; multifactor then keeps recomputing it (age, size, ...) like that of any other job. One
call per job, and the job keeps its eligible and accrue times, hence its age. The documented
alternative, ``scontrol hold`` then ``release``, does the same in two calls but restarts the job's
age at the release and leaves it held if the caller dies between them. ``scontrol update
Priority=0`` holds the job, ``Nice=`` does not free a fixed priority, and scontrol refuses
``Priority=INFINITE``/``4294967295``.

Why releasing only jobs that are pending, not held, and still carry a priority Hylo wrote (the
lease's record, ``lease.still_hylos``): ``release`` also lifts holds, and a user's or an admin's hold
must survive; running jobs need nothing; and a job whose priority someone else set since is theirs.

Why several jobs per call: ``scontrol release 1,2,3`` sends one request per job but starts one
process, and a fail-safe may have thousands of jobs to hand back. Errors come per job on stderr
(``Invalid job id specified for job 12``), so the others still count as released.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.adapter_slurm.apply import GONE
from services.adapter_slurm.commands import CommandRunner, validate_job_id
from services.adapter_slurm.lease import Written, still_hylos
from services.adapter_slurm.model import SlurmJob
from services.adapter_slurm.parse_text import SQUEUE_FORMAT, parse_squeue_text

#: the waiting jobs, in the parsable text layout every Slurm since 20.x prints (no JSON plugin needed)
PENDING_ARGS = ("squeue", "-h", "-r", "-t", "PENDING", "-o", SQUEUE_FORMAT)
#: job ids per ``scontrol release`` call
RELEASE_CHUNK = 50
#: scontrol's per-job error line: "<reason> for job <id>"
_JOB_ERROR = re.compile(r"^(?P<reason>.+?) for job (?P<job>\S+)$")


@dataclass
class HandBack:
    """What a hand-back did: released, gone meanwhile, refused (with the reason), and whether it
    stopped early because handing back was no longer due (the adapter renewed its lease)."""

    released: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    stopped: bool = False

    def summary(self) -> str:
        text = f"{len(self.released)} released, {len(self.gone)} gone, {len(self.failed)} failed"
        return text + (" (stopped: Hylo is deciding again)" if self.stopped else "")


def read_pending(runner: CommandRunner) -> list[SlurmJob]:
    """Every pending job as squeue shows it now (raises SlurmCommandError, unreachable or not)."""
    out = runner.run(PENDING_ARGS).stdout
    queue = parse_squeue_text(out, " ".join(PENDING_ARGS))
    return [j for j in queue.jobs if j.state == "PENDING"]


def release_argv(job_ids: Sequence[str]) -> list[str]:
    """``scontrol release <id>,<id>,...``, every id validated."""
    return ["scontrol", "release", ",".join(validate_job_id("scontrol release", j) for j in job_ids)]


def release_errors(stderr: str) -> dict[str, str]:
    """scontrol's per-job errors by job id (lines that name no job are left out)."""
    errors: dict[str, str] = {}
    for line in stderr.splitlines():
        m = _JOB_ERROR.match(line.strip())
        if m:
            errors[m["job"]] = m["reason"]
    return errors


def release(
    runner: CommandRunner,
    job_ids: Sequence[str],
    *,
    still_due: Callable[[], bool] = lambda: True,
    chunk: int = RELEASE_CHUNK,
) -> HandBack:
    """Release ``job_ids`` in chunks, asking ``still_due()`` before each; raises the runner's
    SlurmCommandError when slurmctld cannot be reached (what was released so far stays released)."""
    report = HandBack()
    for start in range(0, len(job_ids), chunk):
        if not still_due():
            report.stopped = True
            break
        part = list(job_ids[start : start + chunk])
        result = runner.mutate(release_argv(part))
        if result is None or result.returncode == 0:  # dry run, or all released
            report.released.extend(part)
            continue
        error = runner.error(result)
        if error.unreachable:
            raise error
        errors = release_errors(result.stderr)
        for job_id in part:
            reason = errors.get(job_id)
            if reason is None and errors:
                report.released.append(job_id)
            elif reason is not None and any(g in reason.lower() for g in GONE):
                report.gone.append(job_id)
            else:
                report.failed.append((job_id, reason or error.reason))
    return report


def hand_back(
    runner: CommandRunner, written: Written, *, still_due: Callable[[], bool] = lambda: True
) -> HandBack:
    """Read the queue now and release every job that still carries a priority Hylo wrote."""
    due = [j.job_id for j in read_pending(runner) if still_hylos(j, written)]
    return release(runner, due, still_due=still_due)
