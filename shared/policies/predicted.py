"""Policies that order by predicted runtimes: the classic orders on the predictor's runtimes, and
an online small-versus-large split.

Why: users' estimates are poor (HPC2N) or absent (Philly, openb), so an admin who wants SJF-like
gains without clairvoyance orders by a learned prediction (Helios' QSSF orders by a predicted
GPU time; Zrigui et al., 2019, split jobs online into small and large and run the small first).
These are the baselines a learned prioritizer must beat, not only the estimate-based ones.
EASY keeps reserving with the estimates (what the scheduler would kill a job at); only the order
changes. Each policy reads the jobs' ``predicted`` column (``Policy.runtimes = "predicted"``,
``shared.prediction.attach_predictions``), which depends on the trace alone, never on the
schedule being simulated.

No snapshot form yet: a ``QueueSnapshot`` carries estimates, not predictions, so the prioritizer
service refuses these names as base policies (``snapshot_keys``).
"""

from __future__ import annotations

import numpy as np

from shared.domain.jobs import FloatArray, IntArray
from shared.policies.base import Policy
from shared.scheduling.partition import row_classes

#: ``small-first``'s default threshold: a job predicted to run at most this long is small
SMALL_JOB_S = 3_600.0
#: what a large job's key adds to its submit time, far above any trace's span (2^40 s is about
#: 35,000 years) and small enough that submit times keep their order when added to it
_LARGE_OFFSET = float(2**40)


def on_predictions(policy: Policy) -> Policy:
    """``policy`` ordering by predicted runtimes instead of estimates, named ``<name>-pred``.

    Every form of the policy reads ``ctx.estimate``, which ``bind`` fills with the predictions
    (``Policy.runtimes``), so the Python loop, the compiled core and the order classes all order
    by the same predicted values."""
    policy.runtimes = "predicted"
    policy.name = f"{policy.name}-pred"
    return policy


class SmallFirst(Policy):
    """Jobs predicted to be small (runtime <= ``threshold_s``) first, each class by arrival.

    After Zrigui et al. (2019): a two-class split is robust to prediction errors that would
    reorder SJF badly (only a misclassified job moves), and arrival order inside each class
    keeps it starvation-free among the small and among the large jobs."""

    name = "small-first"
    runtimes = "predicted"

    def __init__(self, threshold_s: float = SMALL_JOB_S) -> None:
        if not threshold_s > 0:
            raise ValueError(f"small-first threshold must be > 0 s, got {threshold_s}")
        self.threshold_s = threshold_s

    def _large(self, idx: IntArray) -> FloatArray:
        large: FloatArray = (self.ctx.estimate[idx] > self.threshold_s).astype(np.float64)
        return large

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        key: FloatArray = self._large(idx) * _LARGE_OFFSET + self.ctx.submit[idx]
        return key

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not SmallFirst.keys:
            return None
        # inside a class the key is the submit time plus one constant: arrival order
        return row_classes(self._large(np.arange(len(self.ctx.submit))))

    def describe(self) -> str:
        return f"{self.name} (small: predicted <= {self.threshold_s:g} s)"
