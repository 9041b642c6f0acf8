"""Inputs and outputs of the batch placer.

A ``JobRequest`` carries exactly what the simulator already knows about a queued job after binding
(requests with defaults filled, eligible node groups); its position in the list passed to the placer
is its rank. A ``BatchPlacement`` answers for every one of the top-K jobs, and says how the answer
was obtained (status, times, objective terms), so that every decision can be audited later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.state import Alloc


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One queued job as the placer sees it.

    ``gpu_milli < 1000`` means a share of one physical GPU (then ``gpus == 1``); ``gpus == 0`` a
    CPU-only job. ``weight`` is the priority weight of tier (b) (larger = more important; the rank
    itself comes from the list order); ``est_runtime`` the runtime estimate in seconds.
    """

    gpus: int
    gpu_milli: int
    cpus_milli: int
    mem_mib: int
    groups: tuple[int, ...]
    weight: float = 1.0
    est_runtime: float = 1.0
    job_id: int = -1
    #: groups where the job must respect the reservation caps passed to ``place_batch`` (it would
    #: still run at the reserved job's start): its usage there, with the other capped jobs', stays
    #: within the caps, exactly as the simulator's EASY backfill checks it
    capped: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpus_milli < 0 or self.mem_mib < 0:
            raise ValueError("requests must be >= 0 (fill defaults before placing)")
        if not 0 < self.gpu_milli <= WHOLE_GPU_MILLI:
            raise ValueError("gpu_milli must be in 1..1000")
        if self.gpu_milli < WHOLE_GPU_MILLI and self.gpus != 1:
            raise ValueError("only a 1-GPU job may ask for a share of a GPU")
        if self.weight < 0 or self.est_runtime < 0:
            raise ValueError("weight and est_runtime must be >= 0")

    @property
    def fractional(self) -> bool:
        return self.gpus == 1 and self.gpu_milli < WHOLE_GPU_MILLI

    @property
    def gpu_demand(self) -> float:
        """GPUs the job keeps busy (a share counts as its fraction)."""
        return self.gpu_milli / WHOLE_GPU_MILLI if self.fractional else float(self.gpus)


@dataclass(frozen=True, slots=True)
class GroupCost:
    """How much one unit of each resource of a node group is wanted by jobs that cannot go elsewhere.

    The type-reserve tier charges a job placed in the group ``max(GPU demand x per_gpu,
    CPUs x per_cpu_milli, memory x per_mem_mib)``: its dominant share of the node, priced at the
    group's pressure. Why: on a cluster with GPU-type constraints, best-fit packs jobs that could
    run anywhere onto the scarce types (the fullest nodes are often there), and the jobs that can
    only run on those types then wait while other types sit idle. The caller (the simulator)
    derives the prices from its queue; the placer only compares them.
    """

    per_gpu: float
    per_cpu_milli: float = 0.0
    per_mem_mib: float = 0.0

    def cost(self, job: JobRequest) -> float:
        return max(
            job.gpu_demand * self.per_gpu, job.cpus_milli * self.per_cpu_milli, job.mem_mib * self.per_mem_mib
        )


class SolveStatus(StrEnum):
    """How a batch decision was reached."""

    OPTIMAL = "OPTIMAL"  # CP-SAT proved the (lexicographic) optimum of the model
    FEASIBLE = "FEASIBLE"  # a limit stopped CP-SAT after a solution at least as good as the warm start
    TIMEOUT_FALLBACK = "TIMEOUT_FALLBACK"  # a limit stopped CP-SAT without a solution: best-fit used
    ERROR_FALLBACK = "ERROR_FALLBACK"  # CP-SAT failed (invalid/infeasible model, bad decode): best-fit used
    NOTHING_FITS = "NOTHING_FITS"  # no job of the batch fits alone: no solve
    # best-fit started the whole batch on the fewest nodes and there is no tier (t): tiers (a)-(c)
    # are at their optimum, so no solve (only with ``solve_when_all_fit=False``): best-fit used
    ALL_FIT = "ALL_FIT"


@dataclass(frozen=True, slots=True)
class JobDecision:
    """The placer's answer for one job of the batch (same order as the request)."""

    alloc: Alloc | None
    spread: bool = False  # on more nodes than the fewest that could hold it (the model's choice)

    @property
    def started(self) -> bool:
        return self.alloc is not None


@dataclass(frozen=True, slots=True)
class ObjectiveTerms:
    """The objective's tiers for the returned decision (after decoding)."""

    started: int = 0  # jobs started
    priority_violations: int = 0  # (a): 0 unless a fallback was used and it broke the order
    weighted_work: int = 0  # (b): sum of started jobs' integer work coefficients
    extra_nodes: int = 0  # (c): nodes used beyond each started job's minimum
    fragmented_nodes: int = 0  # (d): model nodes left neither empty nor full
    lookahead_fits: int = 0  # (e): weighted count of next jobs that still fit
    type_cost: int = 0  # (t): summed integer group costs of the started jobs (0 without group costs)


@dataclass(slots=True)
class BatchPlacement:
    """Decisions for the top-K jobs and how they were found."""

    decisions: list[JobDecision]
    status: SolveStatus
    wall_s: float = 0.0  # the whole call: aggregation, warm start, build, solve, decode
    solve_s: float = 0.0  # CP-SAT's own wall time
    deterministic: bool = True  # False when the wall-clock limit (not the deterministic one) stopped CP-SAT
    terms: ObjectiveTerms = field(default_factory=ObjectiveTerms)
    model_vars: int = 0
    model_constraints: int = 0

    @property
    def allocs(self) -> list[Alloc | None]:
        return [d.alloc for d in self.decisions]
