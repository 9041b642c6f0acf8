"""A PlacementDecision -> the ``scontrol update`` calls it needs (pure: no I/O, no clock).

The band: the managed jobs of a decision, in rank order, get ``top, top - step, top - 2 step, ...``
(never below ``bottom``; when a queue is too long for the step, the step shrinks so the order still
holds, and only a queue longer than the band itself shares ``bottom`` at its tail). Everything above
``top`` is left free: SLA-bound jobs (excluded QOS) and jobs of unmanaged partitions keep whatever
Slurm gives them, and an operator who wants them first gives them a QOS/partition weight that puts
them above ``top``. Priority 0 is never written: for Slurm it means "held".

Why plan separately from applying: what must be sent (and what must not: jobs of other partitions,
excluded QOS, held jobs, jobs that left the queue, priorities already in place) is the adapter's
safety contract; as a pure function it is tested exhaustively without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from services.adapter_slurm.model import SlurmJob
from services.adapter_slurm.snapshot import JobFilter
from shared.schemas import PlacementDecision


@dataclass(frozen=True)
class PriorityBand:
    top: int
    bottom: int
    step: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.bottom < self.top:
            raise ValueError(
                f"priority band needs 1 <= bottom < top, got bottom {self.bottom}, top {self.top}"
            )
        if self.step < 1:
            raise ValueError(f"priority step must be >= 1, got {self.step}")

    def priorities(self, n: int) -> list[int]:
        """Priorities of ranks 0..n-1: strictly decreasing while the band has room."""
        if n <= 0:
            return []
        step = self.step
        width = self.top - self.bottom
        if n > 1 and (n - 1) * step > width:
            step = max(1, width // (n - 1))
        return [max(self.bottom, self.top - r * step) for r in range(n)]


@dataclass(frozen=True)
class Update:
    """One job's new priority, and the nodes to require (None: leave its node list alone)."""

    job_id: str
    priority: int
    nodes: tuple[str, ...] | None = None


@dataclass
class Plan:
    updates: list[Update] = field(default_factory=list)
    #: (job id, reason) of placements not acted on
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unchanged: int = 0


def plan_updates(
    decision: PlacementDecision,
    jobs: Mapping[str, SlurmJob],
    current: Mapping[str, int],
    band: PriorityBand,
    jobs_filter: JobFilter,
    *,
    apply_nodes: bool = False,
) -> Plan:
    """The updates a decision asks for, given the last polled jobs and the priorities in place.

    ``jobs``: the last poll's jobs by id; ``current``: the priority each job has now (last poll, or
    what the adapter sent after it). Placements are taken in rank order (ties by job id).
    """
    plan = Plan()
    ordered = sorted(decision.placements, key=lambda p: (p.rank, p.job_id))
    managed = []
    for placement in ordered:
        job = jobs.get(placement.job_id)
        if job is None:
            plan.skipped.append((placement.job_id, "no longer in the queue"))
            continue
        if job.state != "PENDING":
            plan.skipped.append((placement.job_id, f"not pending any more ({job.state})"))
            continue
        if job.held:
            plan.skipped.append((placement.job_id, "held (a priority would release it)"))
            continue
        reason = jobs_filter.why_not(job)
        if reason is not None:
            plan.skipped.append((placement.job_id, reason))
            continue
        managed.append(placement)
    for placement, priority in zip(managed, band.priorities(len(managed)), strict=True):
        nodes = placement.nodes if apply_nodes and placement.nodes else None
        if current.get(placement.job_id) == priority and nodes is None:
            plan.unchanged += 1
            continue
        plan.updates.append(Update(placement.job_id, priority, nodes))
    return plan
