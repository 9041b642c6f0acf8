"""Sending a plan to Slurm with ``scontrol update``, one job per call.

Why one call per job: ``scontrol update JobId=1,2,3 Priority=P`` sets one value for all of them, and
every job here gets its own. Each value is validated before it becomes an argument (``commands``).
A job that finished or was cancelled between the poll and the update makes scontrol exit 1 with
"Invalid job id" or "already finished": that is the queue moving on, logged, not an error. An
unreachable controller is raised, so the decision is retried later; jobs already updated are then
skipped as unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from services.adapter_slurm.commands import (
    CommandRunner,
    SlurmValueError,
    validate_job_id,
    validate_node_name,
    validate_priority,
)
from services.adapter_slurm.priorities import Plan, Update

log = logging.getLogger(__name__)

#: scontrol's messages for a job that is gone or no longer pending
GONE = ("invalid job id", "already finished", "job has already", "not pending", "is no longer pending")


@dataclass
class ApplyReport:
    sent: dict[str, int] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    dry_run: bool = False


def update_argv(update: Update) -> list[str]:
    """``scontrol update JobId=<id> Priority=<p> [ReqNodeList=<a,b> NumNodes=<n>]``, values validated.

    With nodes, ``NumNodes`` is their count: the placer's pack or spread choice (the fewest nodes
    that hold the job, or more) becomes Slurm's node count, and the list cannot disagree with the
    count the job was submitted with (a 1-node job given two required nodes would never start).
    """
    command = "scontrol update"
    argv = [
        "scontrol",
        "update",
        f"JobId={validate_job_id(command, update.job_id)}",
        f"Priority={validate_priority(command, update.priority)}",
    ]
    if update.nodes:
        argv.append("ReqNodeList=" + ",".join(validate_node_name(command, n) for n in update.nodes))
        argv.append(f"NumNodes={len(update.nodes)}")
    return argv


def apply_plan(runner: CommandRunner, plan: Plan) -> ApplyReport:
    report = ApplyReport(dry_run=runner.dry_run)
    for update in plan.updates:
        try:
            argv = update_argv(update)
        except SlurmValueError as err:  # a value Slurm must never see: refuse this one, go on
            log.error("%s", err)
            report.failed.append((update.job_id, str(err)))
            continue
        result = runner.mutate(argv)
        if result is None:  # dry run
            report.sent[update.job_id] = update.priority
            continue
        if result.returncode == 0:
            report.sent[update.job_id] = update.priority
            continue
        error = runner.error(result)
        if error.unreachable:
            raise error
        if any(g in result.stderr.lower() for g in GONE):
            log.info("job %s left the queue before its update: %s", update.job_id, error.reason)
            report.gone.append(update.job_id)
        else:
            log.error("%s", error)
            report.failed.append((update.job_id, error.reason))
    return report
