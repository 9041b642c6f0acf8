"""The Slurm adapter's core, without the bus: poll -> snapshot + outcomes; decision -> scontrol.

Why synchronous and separate from the service: every step is a blocking Slurm command; the service
runs them in a worker thread, and tests (and a one-off ``--once`` run) drive this class directly
against a real slurmctld.

State kept between calls, and why:
- the last good poll (jobs by id, their priorities): decisions are checked against it (is the job
  still pending, in a managed partition, not excluded?) and unchanged priorities are not re-sent. A
  failed or malformed poll raises and leaves it untouched, so the previous good state is kept;
- the priorities sent since that poll (a decision applied twice sends nothing the second time);
- the newest decision sequence applied: an older decision arriving late is ignored;
- the priorities Hylo wrote (``written``, job id -> value), narrowed by every poll
  (``lease.reconcile``): only those jobs keep their values in the next plan, and only those are
  handed back, on a graceful stop or by the fail-safe watchdog.

The fail-safe lease (``lease.py``): every admitted decision first writes the lease file, renewing it
and recording the priorities about to be written, then sends them. A decision whose lease cannot be
written is not applied (it raises, and the bus redelivers it): a priority the watchdog does not know
of would outlive Hylo. At start the adapter takes over the record of the lease it finds, so a
restarted adapter still covers what its predecessor wrote. In a dry run, or with
``HYLO_SLURM_FAILSAFE_AFTER_S=0``, there is no lease.

``SlurmAdapter`` is the Slurm implementation of the cluster-adapter contract
(``shared.service.cluster_adapter.ClusterAdapter``: ``observe``, ``apply``, ``outcomes``,
``hand_back``); the rules every adapter shares (snapshot sequence numbers, the stale-decision gate,
outcomes reported once) come from there, and ``tests/adapter_contract/`` holds it to them.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from services.adapter_slurm.apply import ApplyReport, apply_plan
from services.adapter_slurm.commands import CommandRunner, SlurmCommandError
from services.adapter_slurm.handback import hand_back
from services.adapter_slurm.lease import Lease, LeaseError, lease_owner, read_lease, reconcile, write_lease
from services.adapter_slurm.model import SlurmJob, SlurmNodes, SlurmQueue
from services.adapter_slurm.outcomes import OutcomeTracker
from services.adapter_slurm.parse_json import parse_sinfo_json, parse_squeue_json
from services.adapter_slurm.parse_text import SINFO_ARGS, SQUEUE_ARGS, parse_sinfo_text, parse_squeue_text
from services.adapter_slurm.priorities import Plan, PriorityBand, plan_updates
from services.adapter_slurm.settings import SlurmAdapterSettings
from services.adapter_slurm.snapshot import GroupResolver, JobFilter, build_snapshot
from services.adapter_slurm.timing import PathTiming
from shared.domain.cluster import ClusterSpec
from shared.schemas import JobOutcome, PlacementDecision, QueueSnapshot, new_correlation_id
from shared.service.cluster_adapter import DecisionGate, SnapshotSequence

log = logging.getLogger(__name__)

SQUEUE_JSON = ("squeue", "--json", "-r", "-t", "all")
SINFO_JSON = ("sinfo", "-N", "--json")


@dataclass(frozen=True)
class PollResult:
    """One poll: the contract's ``Observation`` (snapshot, outcomes) plus how Slurm was read."""

    snapshot: QueueSnapshot
    outcomes: list[JobOutcome]
    layout: str
    seconds: float
    #: when the poll started reading Slurm (epoch seconds)
    started_at: float = 0.0


@dataclass
class DecisionResult:
    """One applied decision: the contract's ``AppliedDecision`` plus what ``scontrol`` answered."""

    report: ApplyReport
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unchanged: int = 0
    stale: bool = False

    @property
    def applied(self) -> list[str]:
        """The jobs whose priority was written (or, in a dry run, would have been)."""
        return list(self.report.sent)


class SlurmAdapter:
    """One Slurm cluster, seen through its client commands (see the module docstring)."""

    def __init__(
        self, settings: SlurmAdapterSettings, spec: ClusterSpec, runner: CommandRunner | None = None
    ) -> None:
        self.settings = settings
        self.cluster = settings.slurm_cluster
        self.spec = spec
        self.runner = runner or CommandRunner(
            slurm_conf=settings.slurm_conf,
            bin_dir=settings.slurm_bin_dir,
            timeout_s=settings.slurm_command_timeout_s,
            dry_run=settings.slurm_dry_run,
        )
        self.resolver = GroupResolver(spec, settings.slurm_node_groups)
        self.filter = JobFilter(frozenset(settings.slurm_partitions), frozenset(settings.slurm_excluded_qos))
        self.band = PriorityBand(
            settings.slurm_priority_top, settings.slurm_priority_bottom, settings.slurm_priority_step
        )
        self.output = settings.slurm_output
        self.tracker = OutcomeTracker(self.cluster, self.runner, accounting=settings.slurm_accounting)
        self.jobs: dict[str, SlurmJob] = {}
        self.sent: dict[str, int] = {}
        #: job id -> the priorities Hylo wrote and may still be in place (one, after a poll)
        self.written: dict[str, frozenset[int]] = {}
        self.sequence = SnapshotSequence()
        self.gate = DecisionGate(self.cluster)
        self.last_snapshot: QueueSnapshot | None = None
        #: the fail-safe lease file (None: no lease, in a dry run or with the fail-safe off)
        self.lease_path = (
            settings.failsafe_lease_path() if settings.failsafe_enabled and not self.runner.dry_run else None
        )
        self.renewed_at = 0.0
        #: the path's timestamps (HYLO_SLURM_TIMING_LOG); the service reports events and publications
        self.timing = PathTiming(settings.slurm_timing_log)
        #: squeue and sinfo side by side (HYLO_SLURM_PARALLEL_READS); None: one after the other
        self._readers = ThreadPoolExecutor(2, "slurm-read") if settings.slurm_parallel_reads else None
        self._take_over_lease()

    @property
    def last_sequence(self) -> int:
        """The snapshot sequence of the newest decision applied (-1: none yet)."""
        return self.gate.newest

    # -- reading --------------------------------------------------------------------------------

    def _run_both(self, first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, str]:
        """Both read-only commands' output: at the same time with parallel reads, else in turn
        (the first one's error is raised first either way)."""
        if self._readers is None:
            return self.runner.run(first).stdout, self.runner.run(second).stdout
        later = self._readers.submit(self.runner.run, second)
        try:
            out = self.runner.run(first).stdout
        finally:
            wait([later])  # never leave a command running behind
        return out, later.result().stdout

    def _read(self) -> tuple[SlurmQueue, SlurmNodes]:
        if self.output != "text":
            try:
                raw_queue, raw_nodes = self._run_both(SQUEUE_JSON, SINFO_JSON)
                queue = parse_squeue_json(raw_queue, " ".join(SQUEUE_JSON))
                nodes = parse_sinfo_json(raw_nodes, " ".join(SINFO_JSON))
                return queue, nodes
            except SlurmCommandError as err:
                if err.unreachable or self.output == "json":
                    raise
                log.warning("%s; falling back to parsable text output from now on", err)
                self.output = "text"
        raw_queue, raw_nodes = self._run_both(SQUEUE_ARGS, SINFO_ARGS)
        return parse_squeue_text(raw_queue), parse_sinfo_text(raw_nodes)

    def observe(self) -> PollResult:
        """The contract's observation: a poll."""
        return self.poll()

    def outcomes(self) -> list[JobOutcome]:
        """None: Slurm's outcomes are learned by polling, and each poll returns its own."""
        return []

    def poll(self) -> PollResult:
        """Read the queue and nodes; raises SlurmCommandError (state kept) when Slurm fails us."""
        started = time.monotonic()
        event, started_at = self.timing.poll_started()
        queue, nodes = self._read()
        now = time.time()
        correlation_id = new_correlation_id()
        try:
            snapshot = self._snapshot(queue, nodes, now, correlation_id)
        except ValueError as err:  # a job or node Hylo's messages cannot carry; a spec that fits no node
            raise SlurmCommandError(
                "squeue/sinfo -> QueueSnapshot", " ".join(str(err).split())[:500]
            ) from None
        outcomes = self.tracker.update(queue.jobs, now, correlation_id, self._node_types(nodes))
        self.jobs = {j.job_id: j for j in queue.jobs}
        self.sent = {}
        self.written = reconcile(self.written, self.jobs)
        self.last_snapshot = snapshot
        self.timing.polled(correlation_id, event, started_at, now)
        return PollResult(snapshot, outcomes, queue.layout, time.monotonic() - started, started_at)

    def _node_types(self, nodes: SlurmNodes) -> dict[str, str]:
        """Node name -> the GPU type of its spec group (what a finished job's outcome reports)."""
        out: dict[str, str] = {}
        for node in nodes.nodes:
            group = self.resolver.group_of(node)
            if group is not None:
                out[node.name] = group.gpu_type
        return out

    def _snapshot(
        self, queue: SlurmQueue, nodes: SlurmNodes, now: float, correlation_id: str
    ) -> QueueSnapshot:
        return build_snapshot(
            cluster=self.cluster,
            correlation_id=correlation_id,
            now=now,
            sequence=self.sequence.next(int(now * 1000)),  # poll time in ms: increases across restarts
            jobs=queue.jobs,
            nodes=nodes.nodes,
            resolver=self.resolver,
            jobs_filter=self.filter,
            default_runtime_s=self.settings.slurm_default_runtime_s,
            max_pending=self.settings.slurm_max_pending,
        )

    # -- acting ---------------------------------------------------------------------------------

    def current_priorities(self) -> dict[str, int]:
        current = {j.job_id: j.priority for j in self.jobs.values() if j.priority is not None}
        current.update(self.sent)
        return current

    def apply(self, decision: PlacementDecision) -> DecisionResult:
        """Write a decision's priorities (and, when configured, nodes) for the jobs Hylo manages."""
        if not self.gate.admit(decision):  # another cluster's raises WrongCluster (a ValueError)
            return DecisionResult(ApplyReport(dry_run=self.runner.dry_run), stale=True)
        plan = plan_updates(
            decision,
            self.jobs,
            self.current_priorities(),
            self.band,
            self.filter,
            apply_nodes=self.settings.slurm_apply_nodes,
            hylo_set=self.written,
        )
        for job_id, reason in plan.skipped:
            log.debug("job %s not updated: %s", job_id, reason)
        started = time.time()
        first = {u.job_id for u in plan.updates if u.job_id not in self.written}
        if self.settings.slurm_first_priorities_first:  # new jobs' priorities land first
            plan.updates.sort(key=lambda u: u.job_id not in first)
        self._record(plan)  # the lease first: what is sent next must be covered if we die sending it
        leased = time.time()
        report = apply_plan(self.runner, plan, self.settings.slurm_update_workers)
        self.sent.update(report.sent)
        for job_id, priority in report.sent.items():
            self.written[job_id] = frozenset({priority})
        for job_id in report.gone:
            self.written.pop(job_id, None)
        self.gate.applied(decision)
        self.tracker.note_correlation(report.sent, decision.correlation_id)
        self.timing.applied(
            decision.correlation_id,
            started,
            leased,
            len(plan.updates),
            {j: report.done_at[j] for j in report.sent if j in first and j in report.done_at},
        )
        log.info(
            "decision %s: %d priorities sent%s, %d unchanged, %d skipped, %d gone, %d failed",
            decision.correlation_id,
            len(report.sent),
            " (dry run)" if report.dry_run else "",
            plan.unchanged,
            len(plan.skipped),
            len(report.gone),
            len(report.failed),
        )
        return DecisionResult(report, plan.skipped, plan.unchanged)

    def hand_back(self) -> int:
        """The contract's hand-back: ``release_all``."""
        return self.release_all()

    def release_all(self) -> int:
        """Hand every job that still carries a priority Hylo wrote back to Slurm's own priority, with
        the fail-safe watchdog's code (``handback.py``, on a fresh read of the queue); returns how many.
        The lease then records what is left (jobs whose release failed), without being renewed."""
        report = hand_back(self.runner, self.written)
        for job_id in [*report.released, *report.gone]:
            self.written.pop(job_id, None)
        for job_id, reason in report.failed:
            log.error("job %s could not be handed back: %s", job_id, reason)
        self._write_lease(self.renewed_at)
        log.info("hand-back: %s", report.summary())
        return len(report.released)

    # -- the fail-safe lease --------------------------------------------------------------------

    def _take_over_lease(self) -> None:
        """Start from the record of the lease found (a previous run's priorities are still Hylo's)."""
        if self.lease_path is None:
            return
        try:
            lease = read_lease(self.lease_path, self.cluster)
        except LeaseError as err:
            log.warning("%s; it will be overwritten at the first decision", err)
            return
        if lease is not None:
            self.written = dict(lease.jobs)
            self.renewed_at = lease.renewed_at
            log.info(
                "lease %s: taking over %d jobs' priorities from %s",
                self.lease_path,
                len(lease.jobs),
                lease.owner,
            )

    def _record(self, plan: Plan) -> None:
        """Before sending ``plan``: record its priorities beside those possibly still in place, and
        renew the lease (raises LeaseError, and nothing is sent, when the lease cannot be written)."""
        for update in plan.updates:
            self.written[update.job_id] = self.written.get(update.job_id, frozenset()) | {update.priority}
        self._write_lease(time.time())

    def _write_lease(self, renewed_at: float) -> None:
        if self.lease_path is None:
            return
        try:
            write_lease(self.lease_path, Lease(self.cluster, renewed_at, lease_owner(), dict(self.written)))
        except LeaseError as err:
            log.error("%s: decisions are not applied until it can be written", err)
            raise
        self.renewed_at = renewed_at
