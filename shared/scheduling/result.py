"""What a simulation run returns: per-job start/end times and a cluster timeline.

Metrics are computed from this after the run (``shared.metrics``), so a run is simulated once and
then sliced into as many evaluation windows as needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shared.domain.jobs import FloatArray, IntArray, JobTable


@dataclass
class SimResult:
    """Outcome of one simulation.

    ``start[i]``/``end[i]`` are NaN for a job that never started (only possible when the run was
    cut off by ``until``). The timeline has one row per scheduling cycle: at ``timeline_t[k]``,
    after the cycle's starts, ``timeline_busy[k]`` GPUs are busy (fractional shares counted as
    fractions) and ``timeline_queued[k]`` jobs wait; both hold until ``timeline_t[k + 1]``.
    ``metric_mask`` marks the jobs whose metrics count (warm-up jobs simulated before an evaluation
    window are simulated but not scored).
    """

    jobs: JobTable
    start: FloatArray
    end: FloatArray
    capacity_gpus: int
    timeline_t: FloatArray
    timeline_busy: FloatArray
    timeline_queued: IntArray
    metric_mask: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    nodes_used: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    policy: str = ""
    placement: str = ""
    backfill: str = ""
    wall_seconds: float = 0.0
    cycles: int = 0
    #: batch placer (CP-SAT) statistics: solves per status, solve seconds, decisions overridden
    placer_stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.metric_mask) == 0:
            self.metric_mask = np.ones(len(self.jobs), dtype=bool)

    @property
    def wait(self) -> FloatArray:
        return self.start - self.jobs.submit

    @property
    def jct(self) -> FloatArray:
        return self.end - self.jobs.submit
