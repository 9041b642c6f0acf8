"""Sending a plan to Slurm with ``scontrol update``, one job per call, a few calls at a time.

Why one call per job: ``scontrol update JobId=1,2,3 Priority=P`` sets one value for all of them, and
every job here gets its own. Each value is validated before it becomes an argument (``commands``).
Why a few at a time (``workers``, ``HYLO_SLURM_UPDATE_WORKERS``): each call is a process start and an
RPC that slurmctld serves in a thread of its own; one after another, a burst's decision of 20 updates
takes 20 round trips before its last job (often the new one) has its priority. The updates are
started in the plan's order, so the first ones land first.
A job that finished or was cancelled between the poll and the update makes scontrol exit 1 with
"Invalid job id" or "already finished": that is the queue moving on, logged, not an error. An
unreachable controller is raised, so the decision is retried later; jobs already updated are then
skipped as unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from services.adapter_slurm.commands import (
    CommandResult,
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
    #: job id -> when its update returned (epoch seconds; for the path timing)
    done_at: dict[str, float] = field(default_factory=dict)


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


def apply_plan(runner: CommandRunner, plan: Plan, workers: int = 1) -> ApplyReport:
    """Send ``plan``'s updates, ``workers`` at a time. An unreachable controller stops the updates
    not yet started (each would wait out its timeout) and is raised once the calls in flight have
    returned: the decision is retried, and what was sent is then unchanged."""
    report = ApplyReport(dry_run=runner.dry_run)
    argvs: list[tuple[Update, list[str]]] = []
    for update in plan.updates:
        try:
            argvs.append((update, update_argv(update)))
        except SlurmValueError as err:  # a value Slurm must never see: refuse this one, go on
            log.error("%s", err)
            report.failed.append((update.job_id, str(err)))

    down = threading.Event()  # the controller did not answer: start no more calls

    def send(item: tuple[Update, list[str]]) -> tuple[Update, CommandResult | None, float] | None:
        if down.is_set():
            return None
        result = runner.mutate(item[1])
        if result is not None and result.returncode != 0 and runner.error(result).unreachable:
            down.set()
        return item[0], result, time.time()

    if workers <= 1 or len(argvs) <= 1 or runner.dry_run:  # a dry run logs them in order
        results = [send(item) for item in argvs]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(argvs))) as pool:
            results = list(pool.map(send, argvs))
    unreachable = None
    for outcome in results:
        if outcome is None:  # not started: the controller was already unreachable
            continue
        update, result, done = outcome
        report.done_at[update.job_id] = done
        if result is None or result.returncode == 0:  # None: dry run
            report.sent[update.job_id] = update.priority
            continue
        error = runner.error(result)
        if error.unreachable:
            unreachable = unreachable or error
        elif any(g in result.stderr.lower() for g in GONE):
            log.info("job %s left the queue before its update: %s", update.job_id, error.reason)
            report.gone.append(update.job_id)
        else:
            log.error("%s", error)
            report.failed.append((update.job_id, error.reason))
    if unreachable is not None:
        raise unreachable
    return report
