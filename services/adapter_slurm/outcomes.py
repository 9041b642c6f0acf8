"""Finished jobs -> JobOutcome, from queue transitions and, for jobs that left unseen, ``sacct``.

Sources, in order:
1. squeue itself: a finished job stays listed with its final state and real start and end times for
   ``MinJobAge`` seconds (300 by default), so a poll every 30 s sees almost every job finish;
2. ``sacct`` (slurmdbd) or, where accounting is refused, ``sacct -c`` (the job completion file), for
   jobs that vanished between two polls (adapter down, MinJobAge short);
3. the transition alone: a job seen running that vanished and that sacct does not know ended between
   the two polls; it is reported with status ``completed`` and the poll time as end (logged).

Accounting lags the controller: slurmdbd may still list a job that left squeue as running. Such a
job is kept and looked up again at the next polls (up to ``ACCOUNTING_LAG_POLLS``, then the
transition rule applies), instead of being dropped without an outcome.

Where the job ran: its nodes from squeue (a finished job's ``nodes``) or from sacct's ``NodeList``
(expanded), the GPU type of their node groups (``node_types``, from the last sinfo), and, for a job
on one node, its GPUs there; the outcome carries them (schema version 7) and the store keeps them
beside the times, since the decision's nodes were only advice (Slurm places the job). A host list
that cannot be read leaves the nodes unknown rather than losing the outcome.

Why remember submit times: sacct -c prints the start time as "Submit" (the completion file has no
submit column it reads); the adapter saw the job waiting and knows better.

Each job's outcome is reported once (``shared.service.cluster_adapter.ReportedOnce``, the rule every
cluster adapter keeps), and duplicates would be harmless anyway: an outcome's message id is
``outcomes.<cluster>.<job_id>``, dropped by the stream's duplicate window, and the store inserts it
once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.adapter_slurm import values as v
from services.adapter_slurm.commands import CommandRunner, SlurmCommandError, validate_job_id
from services.adapter_slurm.model import PENDING_STATES, RUNNING_STATES, TERMINAL_STATES, SlurmJob
from shared.schemas import JobOutcome
from shared.service.cluster_adapter import ReportedOnce

log = logging.getLogger(__name__)

SACCT_FIELDS = ("JobID", "State", "Submit", "Start", "End", "NodeList")
#: NodeList of a job that never got nodes (cancelled while pending)
_NO_NODES = frozenset({"", "(null)", "None assigned", "None"})
#: how many reported job ids to remember (older ones are deduplicated by the bus and the store)
REMEMBER = 100_000
#: polls for which a vanished job that accounting still lists as not finished is looked up again
ACCOUNTING_LAG_POLLS = 10


@dataclass(frozen=True)
class Finished:
    job_id: str
    state: str
    submit_s: float | None
    start_s: float | None
    end_s: float | None
    ran: bool
    #: the nodes it ran on, expanded (empty: not known)
    nodes: tuple[str, ...] = ()


def sacct_argv(job_ids: Sequence[str], *, completion_file: bool) -> list[str]:
    command = "sacct"
    ids = ",".join(validate_job_id(command, j) for j in job_ids)
    argv = ["sacct", "-n", "--parsable2", "-X", "-o", ",".join(SACCT_FIELDS), "-j", ids]
    if completion_file:
        argv.insert(1, "-c")
    return argv


def parse_sacct(raw: str, command: str = "sacct") -> list[Finished]:
    """``sacct -n --parsable2 -o JobID,State,Submit,Start,End,NodeList`` with epoch times."""
    out = []
    try:
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            cols = line.split("|")
            if len(cols) != len(SACCT_FIELDS):
                raise ValueError(
                    f"line {number}: expected {len(SACCT_FIELDS)} '|'-separated fields, got {len(cols)}"
                )
            job_id, state, submit, start, end, nodes = (c.strip() for c in cols)
            if "." in job_id:  # a step (batch, extern): the job line carries the outcome
                continue
            where = f"line {number} (job {job_id!r})"
            out.append(
                Finished(
                    job_id=job_id,
                    state=state.split()[0].upper() if state else "UNKNOWN",  # "CANCELLED by 0"
                    submit_s=v.epoch(submit, f"{where} Submit"),
                    start_s=v.epoch(start, f"{where} Start"),
                    end_s=v.epoch(end, f"{where} End"),
                    ran=nodes not in _NO_NODES,
                    nodes=_expanded(nodes, f"{where} NodeList"),
                )
            )
    except ValueError as err:
        raise SlurmCommandError(command, str(err)) from None
    return out


def _expanded(nodes: str, field: str) -> tuple[str, ...]:
    """A NodeList's names; none when it names none or cannot be read (the outcome is kept anyway)."""
    if nodes in _NO_NODES:
        return ()
    try:
        return v.hostlist(nodes, field)
    except ValueError as err:
        log.warning("%s; the job's nodes are left unknown", err)
        return ()


def where_it_ran(nodes: tuple[str, ...], gpus: int, node_types: Mapping[str, str]) -> dict[str, Any]:
    """An outcome's ``nodes``, ``node_gpus`` (known for a job on one node: all its GPUs) and
    ``gpu_type`` (its nodes' groups' types, several joined by '+'; None when no node is mapped)."""
    types = sorted({node_types[n] for n in nodes if n in node_types})
    return {
        "nodes": nodes,
        "node_gpus": (gpus,) if len(nodes) == 1 else (),
        "gpu_type": "+".join(types) or None,
    }


class OutcomeTracker:
    """Remembers the jobs of the last poll and turns finishes into outcomes (see module docstring)."""

    def __init__(self, cluster: str, runner: CommandRunner | None, *, accounting: str = "auto") -> None:
        self.cluster = cluster
        self.runner = runner
        self.accounting = accounting
        self.active: dict[str, SlurmJob] = {}
        self.submits: dict[str, float] = {}
        self.correlation: dict[str, str] = {}
        self.reported = ReportedOnce(REMEMBER)
        #: vanished jobs that accounting still lists as not finished: polls left to look them up
        self.lagging: dict[str, int] = {}
        #: auto starts with slurmdbd's sacct and switches to the completion file when it is refused
        self.completion_file = False

    def note_correlation(self, job_ids: Iterable[str], correlation_id: str) -> None:
        """The snapshot whose decision last set these jobs' priorities (carried by their outcomes)."""
        for job_id in job_ids:
            self.correlation[job_id] = correlation_id

    def _outcome(
        self,
        f: Finished,
        gpus: int,
        fallback_correlation: str,
        node_types: Mapping[str, str] | None = None,
        seen_on: tuple[str, ...] = (),
    ) -> JobOutcome | None:
        status = TERMINAL_STATES.get(f.state)
        if status is None or not f.ran or f.start_s is None or f.end_s is None:
            # cancelled while pending: it never ran (Slurm still stamps start = end = cancel time)
            return None
        submit = self.submits.get(f.job_id, f.submit_s if f.submit_s is not None else f.start_s)
        start = max(f.start_s, submit)
        return JobOutcome(
            cluster=self.cluster,
            correlation_id=self.correlation.get(f.job_id, fallback_correlation),
            job_id=f.job_id,
            submit_s=submit,
            start_s=start,
            end_s=max(f.end_s, start),
            gpus=gpus,
            status=status,
            **where_it_ran(f.nodes or seen_on, gpus, node_types or {}),
        )

    def _remember(self, job_id: str) -> None:
        self.reported.add(job_id)
        self.correlation.pop(job_id, None)
        self.submits.pop(job_id, None)

    def _lookup(self, job_ids: list[str]) -> dict[str, Finished]:
        if not job_ids or self.runner is None or self.accounting == "none":
            return {}
        argv = sacct_argv(job_ids, completion_file=self.completion_file)
        try:
            result = self.runner.run(argv)
            return {f.job_id: f for f in parse_sacct(result.stdout, " ".join(argv[:3]))}
        except SlurmCommandError as err:
            if self.accounting == "auto" and not self.completion_file and not err.unreachable:
                log.info("%s; reading the job completion file (sacct -c) from now on", err)
                self.completion_file = True
                return self._lookup(job_ids)
            log.warning("outcomes of %d vanished jobs not found in accounting: %s", len(job_ids), err)
            return {}

    def update(
        self,
        jobs: Sequence[SlurmJob],
        now: float,
        correlation_id: str,
        node_types: Mapping[str, str] | None = None,
    ) -> list[JobOutcome]:
        """Outcomes of the jobs that finished since the last poll; call once per successful poll.
        ``node_types``: node name -> the GPU type of its spec group (where the jobs ran)."""
        types = node_types or {}
        outcomes: list[JobOutcome] = []
        present = {j.job_id for j in jobs}
        for job in jobs:
            if job.state in PENDING_STATES or job.state in RUNNING_STATES:
                self.submits.setdefault(job.job_id, job.submit_s)
            if job.state in TERMINAL_STATES and job.job_id not in self.reported:
                seen = Finished(
                    job.job_id, job.state, job.submit_s, job.start_s, job.end_s, bool(job.nodes), job.nodes
                )
                out = self._outcome(seen, job.gpus, correlation_id, types)
                if out is not None:
                    outcomes.append(out)
                self._remember(job.job_id)
        vanished = [j for j in self.active if j not in present and j not in self.reported]
        found = self._lookup(vanished)
        keep: dict[str, SlurmJob] = {}
        for job_id in vanished:
            last = self.active[job_id]
            f: Finished | None = found.get(job_id)
            if f is not None and f.state not in TERMINAL_STATES:
                left = self.lagging.get(job_id, ACCOUNTING_LAG_POLLS)
                if left > 0:  # accounting has not caught up with the controller yet
                    self.lagging[job_id] = left - 1
                    keep[job_id] = last
                    continue
                f = None
            self.lagging.pop(job_id, None)
            if f is None and last.state in RUNNING_STATES and last.start_s is not None:
                log.info("job %s vanished from squeue and accounting: ended by %.0f", job_id, now)
                f = Finished(job_id, "COMPLETED", last.submit_s, last.start_s, now, True, last.nodes)
            if f is not None:
                out = self._outcome(f, last.gpus, correlation_id, types, last.nodes)
                if out is not None:
                    outcomes.append(out)
            self._remember(job_id)
        self.active = {j.job_id: j for j in jobs if j.state in PENDING_STATES or j.state in RUNNING_STATES}
        self.active.update(keep)
        return outcomes
