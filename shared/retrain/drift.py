"""Workload drift: has the queue moved away from what the current model was trained on?

The statistic is the **population stability index** (PSI) of three per-job distributions, between
a reference sample (the jobs of the current model's training window) and a recent one (the jobs
submitted in the last ``recent window``):

- ``gpus``: the job size, GPUs requested (a fractional share counts as its fraction);
- ``gpu_seconds``: the GPU demand, GPUs x true runtime;
- ``runtime``: the true runtime (end - start).

For one distribution, the reference's 9 deciles (empirical quantiles, i.e. values of the sample) cut
the line into at most 10 bins (equal cut points of a discrete distribution merge bins), and with
``p_i``, ``q_i`` the shares of the reference and recent jobs in bin i (each count plus 0.5, so an
empty bin gives a finite value)::

    PSI = sum_i (q_i - p_i) * ln(q_i / p_i)

It is 0 for identical histograms, symmetric, and grows with the shift; the usual reading is < 0.1
no shift, 0.1-0.25 a moderate one, > 0.25 a major one. The **drift score** is the largest PSI of
the three, and drift is declared when it reaches the threshold (``HYLO_TRAINER_DRIFT_THRESHOLD``,
default 0.25). Why PSI and not a KS test: the KS p-value of two samples of thousands of jobs is
tiny for shifts too small to matter to a scheduler; PSI measures the size of the shift, not its
significance, and a fixed threshold means the same thing whatever the sample sizes. The expected PSI
of two samples of one distribution is about (bins - 1)(1/n + 1/m): 0.009 for 2,000 jobs each, so
the default threshold is far from sampling noise once each sample holds a few hundred jobs;
``min_jobs`` (default 100) refuses to decide on fewer.

Runtime-based quantities are compared on a log scale (bins are found on log values), because job
runtimes span seconds to days and a shift by a factor matters alike at every scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.retrain.workload import RecordedJob, fetch_recorded_jobs

__all__ = [
    "DRIFT_FEATURES",
    "DriftResult",
    "job_samples",
    "psi",
    "psi_counts",
    "queue_drift",
    "workload_drift",
]

DRIFT_FEATURES = ("gpus", "gpu_seconds", "runtime")
FloatArray = npt.NDArray[np.float64]


def psi_counts(reference: npt.ArrayLike, recent: npt.ArrayLike) -> float:
    """PSI of two histograms over the same bins (counts; 0.5 is added to every bin of both)."""
    p = np.asarray(reference, dtype=np.float64) + 0.5
    q = np.asarray(recent, dtype=np.float64) + 0.5
    if p.shape != q.shape or p.ndim != 1 or len(p) < 1:
        raise ValueError(f"histograms must be 1-D of one length, got {p.shape} and {q.shape}")
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum((q - p) * np.log(q / p)))


def psi(reference: FloatArray, recent: FloatArray, bins: int = 10) -> float:
    """PSI of two samples, binned at the reference's quantiles (see the module docstring)."""
    ref = np.asarray(reference, dtype=np.float64)
    new = np.asarray(recent, dtype=np.float64)
    if len(ref) == 0 or len(new) == 0:
        raise ValueError("PSI needs two non-empty samples")
    if not (np.isfinite(ref).all() and np.isfinite(new).all()):
        raise ValueError("PSI samples must be finite")
    cuts = np.unique(np.quantile(ref, np.linspace(0, 1, bins + 1)[1:-1], method="inverted_cdf"))
    # bin i holds values in (cut_{i-1}, cut_i]: a discrete value equal to a cut stays in one bin
    ref_bins = np.searchsorted(cuts, ref, side="left")
    new_bins = np.searchsorted(cuts, new, side="left")
    n_bins = len(cuts) + 1
    return psi_counts(np.bincount(ref_bins, minlength=n_bins), np.bincount(new_bins, minlength=n_bins))


def job_samples(jobs: Sequence[RecordedJob]) -> dict[str, FloatArray]:
    """The three drift distributions of ``jobs`` (runtime-based ones on a log scale)."""
    gpus = np.asarray([j.gpus * (j.gpu_milli / 1000.0) for j in jobs], dtype=np.float64)
    runtime = np.asarray([max(j.runtime_s, 0.0) for j in jobs], dtype=np.float64)
    return {
        "gpus": gpus,
        "gpu_seconds": np.log1p(gpus * runtime),
        "runtime": np.log1p(runtime),
    }


@dataclass(frozen=True)
class DriftResult:
    """The drift score (largest PSI), each distribution's PSI, and the verdict."""

    score: float
    per_feature: dict[str, float]
    threshold: float
    reference_jobs: int
    recent_jobs: int
    drifted: bool
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "score": self.score,
            "per_feature": dict(self.per_feature),
            "threshold": self.threshold,
            "reference_jobs": self.reference_jobs,
            "recent_jobs": self.recent_jobs,
            "drifted": self.drifted,
            "reason": self.reason,
        }


def workload_drift(
    reference: Mapping[str, FloatArray],
    recent: Mapping[str, FloatArray],
    *,
    threshold: float = 0.25,
    min_jobs: int = 100,
    bins: int = 10,
) -> DriftResult:
    """Compare two samples of the drift distributions (``job_samples``) and decide."""
    if threshold <= 0:
        raise ValueError(f"threshold: expected a PSI > 0, got {threshold}")
    n_ref = len(next(iter(reference.values()), []))
    n_new = len(next(iter(recent.values()), []))
    if n_ref < min_jobs or n_new < min_jobs:
        return DriftResult(
            float("nan"),
            {},
            threshold,
            n_ref,
            n_new,
            False,
            f"too few jobs to judge drift: {n_ref} reference and {n_new} recent, {min_jobs} needed in each",
        )
    per = {name: psi(reference[name], recent[name], bins) for name in DRIFT_FEATURES}
    worst = max(per, key=lambda k: per[k])
    score = per[worst]
    drifted = score >= threshold
    verdict = "drift" if drifted else "no drift"
    reason = f"{verdict}: PSI of {worst} = {score:.3f} (threshold {threshold:g})"
    return DriftResult(score, per, threshold, n_ref, n_new, drifted, reason)


async def queue_drift(
    engine: AsyncEngine,
    cluster: str,
    *,
    reference: tuple[float | None, float | None],
    recent: tuple[float | None, float | None],
    threshold: float = 0.25,
    min_jobs: int = 100,
) -> DriftResult:
    """Drift between the finished jobs of two submit-time ranges of ``cluster`` in the database."""
    ref_jobs, _ = await fetch_recorded_jobs(engine, cluster, since_s=reference[0], until_s=reference[1])
    new_jobs, _ = await fetch_recorded_jobs(engine, cluster, since_s=recent[0], until_s=recent[1])
    if not ref_jobs or not new_jobs:
        return DriftResult(
            float("nan"),
            {},
            threshold,
            len(ref_jobs),
            len(new_jobs),
            False,
            f"too few jobs to judge drift: {len(ref_jobs)} reference and {len(new_jobs)} recent",
        )
    return workload_drift(
        job_samples(ref_jobs), job_samples(new_jobs), threshold=threshold, min_jobs=min_jobs
    )
