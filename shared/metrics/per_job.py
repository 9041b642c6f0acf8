"""Per-job scheduling metrics: wait, job completion time (JCT) and bounded slowdown (BSLD).

Why a separate module: every window summary, CDF plot and ad-hoc analysis starts from the same
three per-job arrays, and the conventions (which runtime divides JCT, what a missing start means)
must be identical everywhere. Unfinished jobs are kept as NaN *and* counted, so a caller can never
average them away without noticing: a policy that starves a job must not look better for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import FloatArray, IntArray
from shared.scheduling.result import SimResult

BoolArray = npt.NDArray[np.bool_]

DEFAULT_BSLD_BOUND_S = 10.0


def bounded_slowdown(
    jct: npt.ArrayLike, runtime: npt.ArrayLike, bound: float = DEFAULT_BSLD_BOUND_S
) -> FloatArray:
    """BSLD = max(1, JCT / max(runtime, bound)), elementwise; NaN where JCT is NaN.

    The bound keeps very short jobs (seconds) from dominating the mean with huge ratios caused by
    a few seconds of wait; 10 s is the value used by RLTune and most of the HPC literature.
    """
    if bound <= 0:
        raise ValueError(f"BSLD bound must be positive, got {bound}")
    jct_arr = np.asarray(jct, dtype=np.float64)
    rt_arr = np.asarray(runtime, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ratio = jct_arr / np.maximum(rt_arr, bound)
        # np.fmax would turn NaN into 1; an unfinished job has no slowdown, so NaN must survive.
        out: FloatArray = np.where(np.isnan(ratio), np.nan, np.maximum(ratio, 1.0))
    return out


@dataclass(frozen=True)
class JobMetrics:
    """Per-job metrics of the selected jobs, in selection order (seconds; BSLD unitless).

    ``wait`` is NaN for jobs that never started, ``jct`` and ``bsld`` are NaN for jobs that never
    finished; ``index`` maps each row back to its row in ``SimResult.jobs``.
    """

    index: IntArray
    submit: FloatArray
    runtime: FloatArray
    wait: FloatArray
    jct: FloatArray
    bsld: FloatArray
    started: BoolArray
    finished: BoolArray
    bsld_bound: float

    def __len__(self) -> int:
        return len(self.index)

    @property
    def n_unstarted(self) -> int:
        """Jobs that never started (run cut off while they waited)."""
        return int(np.count_nonzero(~self.started))

    @property
    def n_unfinished(self) -> int:
        """Jobs without an end time; includes the never-started ones."""
        return int(np.count_nonzero(~self.finished))


def job_metrics(
    result: SimResult, index: npt.ArrayLike | None = None, *, bsld_bound: float = DEFAULT_BSLD_BOUND_S
) -> JobMetrics:
    """Compute wait, JCT and BSLD for the jobs at ``index`` (all jobs when None).

    BSLD divides by the job's true ``runtime`` from the job table (not ``end - start``), so that
    the denominator does not depend on the policy being evaluated.
    """
    n = len(result.jobs)
    idx = np.arange(n, dtype=np.int64) if index is None else np.asarray(index, dtype=np.int64)
    if idx.ndim != 1:
        raise ValueError(f"job index must be one-dimensional, got shape {idx.shape}")
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"job index out of range for a result with {n} jobs")
    submit = result.jobs.submit[idx]
    runtime = result.jobs.runtime[idx]
    start = result.start[idx]
    end = result.end[idx]
    started = ~np.isnan(start)
    finished = ~np.isnan(end)
    wait = start - submit
    jct = end - submit
    return JobMetrics(
        index=idx,
        submit=submit,
        runtime=runtime,
        wait=wait,
        jct=jct,
        bsld=bounded_slowdown(jct, runtime, bsld_bound),
        started=started,
        finished=finished,
        bsld_bound=bsld_bound,
    )
