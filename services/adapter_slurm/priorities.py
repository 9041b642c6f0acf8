"""A PlacementDecision -> the ``scontrol update`` calls it needs (pure: no I/O, no clock).

The band: the managed jobs of a decision, in rank order, get strictly decreasing priorities between
``top`` and ``bottom``. Fewest writes first: every ``scontrol update`` is an RPC to slurmctld, and
re-numbering a whole queue because one job arrived at its head would send one per queued job. So
the jobs whose current priorities already decrease in the new rank order (the longest such run, kept
as they are) keep them, and only the others get new values in the gaps between their kept
neighbours (``step`` below the neighbour above when it fits, else evenly spaced). When a gap is too
narrow, or no job keeps its value, the whole queue is laid out afresh: ``top, top - step,
top - 2 step, ...`` (never below ``bottom``; when a queue is too long for the step, the step shrinks
so the order still holds, and only a queue longer than the band itself shares ``bottom`` at its
tail). Everything above
``top`` is left free: SLA-bound jobs (excluded QOS) and jobs of unmanaged partitions keep whatever
Slurm gives them, and an operator who wants them first gives them a QOS/partition weight that puts
them above ``top``. Priority 0 is never written: for Slurm it means "held".

Why plan separately from applying: what must be sent (and what must not: jobs of other partitions,
excluded QOS, held jobs, jobs that left the queue, priorities already in place) is the adapter's
safety contract; as a pure function it is tested exhaustively without a cluster.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
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

    def assign(self, current: Sequence[int | None]) -> list[int]:
        """Priorities for jobs in rank order whose priorities now are ``current`` (None: unknown),
        changing as few as possible (module docstring)."""
        n = len(current)
        usable = [c if c is not None and self.bottom <= c <= self.top else None for c in current]
        kept = {pos: v for pos in _longest_decreasing(usable) if (v := usable[pos]) is not None}
        if not kept:
            return self.priorities(n)
        out: list[int] = [0] * n
        bounds = [-1, *sorted(kept), n]  # positions of kept jobs, with sentinels
        for left, right in itertools.pairwise(bounds):
            if left >= 0:
                out[left] = kept[left]
            k = right - left - 1
            if k == 0:
                continue
            hi = kept.get(left, self.top + 1)
            lo = kept.get(right, self.bottom - 1)
            values = self._fill(hi, lo, k, first=left < 0)
            if values is None:
                return self.priorities(n)
            out[left + 1 : right] = values
        return out

    def _fill(self, hi: int, lo: int, k: int, first: bool) -> list[int] | None:
        """``k`` strictly decreasing values in the open interval (lo, hi); None if there is no room."""
        start = hi - 1 if first else hi - self.step
        if start - self.step * (k - 1) > lo:
            return [start - self.step * i for i in range(k)]
        if hi - lo - 1 < k:
            return None
        gap = (hi - lo) // (k + 1)
        return [hi - gap * (i + 1) for i in range(k)]


def _longest_decreasing(values: Sequence[int | None]) -> list[int]:
    """Positions of a longest strictly decreasing subsequence of the non-None ``values`` (O(n log n))."""
    tails: list[int] = []  # tails[L]: -value at the end of the best run of length L + 1 (increasing)
    tail_pos: list[int] = []
    parent = [-1] * len(values)
    for pos, v in enumerate(values):
        if v is None:
            continue
        key = -v
        at = bisect_left(tails, key)
        if at == len(tails):
            tails.append(key)
            tail_pos.append(pos)
        else:
            tails[at] = key
            tail_pos[at] = pos
        parent[pos] = tail_pos[at - 1] if at > 0 else -1
    run: list[int] = []
    pos = tail_pos[-1] if tail_pos else -1
    while pos >= 0:
        run.append(pos)
        pos = parent[pos]
    return run[::-1]


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
    hylo_set: Collection[str] | None = None,
) -> Plan:
    """The updates a decision asks for, given the last polled jobs and the priorities in place.

    ``jobs``: the last poll's jobs by id; ``current``: the priority each job has now (last poll, or
    what the adapter sent after it). ``hylo_set``: the jobs whose priority Hylo wrote (None: all);
    only those keep theirs: a priority Slurm computed is recomputed by Slurm (age, fair-share), so a
    managed job must get one written. Placements are taken in rank order (ties by job id).
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
    ours = {p.job_id: current.get(p.job_id) for p in managed if hylo_set is None or p.job_id in hylo_set}
    priorities = band.assign([ours.get(p.job_id) for p in managed])
    for placement, priority in zip(managed, priorities, strict=True):
        nodes = placement.nodes if apply_nodes and placement.nodes else None
        if ours.get(placement.job_id) == priority and nodes is None:
            plan.unchanged += 1
            continue
        plan.updates.append(Update(placement.job_id, priority, nodes))
    return plan
