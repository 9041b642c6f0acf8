"""Orders built from the runtime predictor's output, with weights: the family ``order_headroom.py``
searches to bound what any reorder of the same information can gain over ``sjf-pred``.

Why a family and not one more trained model: PPO and imitation (docs/results/learned-prioritizer.md)
tie ``sjf-pred``; before training a bigger model, it pays to know whether the information the
policy sees can pay for a 10% gain at all. Every member sorts by

    key = log(pred) + width * log(gpus) + band * log(hi / lo) + low * (log(lo) - log(pred))
          - aging * log(1 + wait / pred)

(``pred``, ``lo``, ``hi``: the predictor's point and its q10/q90 band, each floored at 10 s, the
BSLD bound), so the all-zero member is ``sjf-pred``'s order up to its tie-break. ``blend`` mixes the
true runtime into ``log(pred)`` (``(1 - blend) * log(pred) + blend * log(true)``): a clairvoyant
member that measures what better runtime knowledge would be worth, never a candidate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from shared.domain.jobs import FloatArray, IntArray
from shared.policies.base import Policy, PolicyContext

#: runtimes are floored at the bounded slowdown's bound before taking logs
FLOOR_S = 10.0


@dataclass(frozen=True)
class Weights:
    """One member of the family (all zero: ``sjf-pred``'s order)."""

    width: float = 0.0
    band: float = 0.0
    low: float = 0.0
    aging: float = 0.0
    blend: float = 0.0

    @property
    def label(self) -> str:
        parts = [f"{k}={v:g}" for k, v in asdict(self).items() if v]
        return ",".join(parts) or "sjf-pred order"


class WeightedPredictionOrder(Policy):
    """A family member as a simulator policy (keys recomputed each cycle when it ages)."""

    runtimes = "predicted"

    def __init__(self, weights: Weights, name: str) -> None:
        self.weights = weights
        self.name = name
        self.dynamic = weights.aging != 0.0
        self.clairvoyant = weights.blend != 0.0

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        jobs = ctx.workload.jobs
        pred = np.maximum(jobs.predicted, FLOOR_S)
        lo = np.maximum(jobs.predicted_lo, FLOOR_S)
        hi = np.maximum(jobs.predicted_hi, FLOOR_S)
        w = self.weights
        log_runtime = np.log(pred)
        if w.blend:
            log_runtime = (1.0 - w.blend) * log_runtime + w.blend * np.log(np.maximum(jobs.runtime, FLOOR_S))
        self._static: FloatArray = (
            log_runtime
            + w.width * np.log(np.maximum(jobs.gpus, 1))
            + w.band * np.log(hi / lo)
            + w.low * (np.log(lo) - np.log(pred))
        )
        self._pred: FloatArray = pred

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        key: FloatArray = self._static[idx]
        if self.weights.aging:
            waited = np.maximum(now - self.ctx.submit[idx], 0.0)
            key = key - self.weights.aging * np.log1p(waited / self._pred[idx])
        return key


def blended_male(predicted: FloatArray, runtime: FloatArray, blend: float) -> float:
    """The median absolute log error of a ``blend`` member's runtimes (floored as the keys are)."""
    true = np.log(np.maximum(runtime, FLOOR_S))
    mixed = (1.0 - blend) * np.log(np.maximum(predicted, FLOOR_S)) + blend * true
    return float(np.median(np.abs(mixed - true)))
