"""The predictions as columns of the jobs table, computed once per trace.

Why columns: a predictor-based policy (``sjf-pred``, ``small-first``, ...; ``shared.policies``)
and the learned policy's features read a job's predicted runtime where they read its estimate,
and windows, warm-ups and arrival rescaling all take rows of the one table. Computing the
predictions once over the whole trace, before any window is cut, is also what keeps them honest:
each job's prediction uses only jobs logged finished before its submit (``predictor``), never the
jobs of a simulated schedule, so every policy sees the same predictions.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shared.domain.jobs import JobTable
from shared.prediction.predictor import MIN_RUNTIME_S, PredictorSettings, predict_runtimes


def has_predictions(table: JobTable) -> bool:
    """Whether every job of ``table`` has a predicted runtime (``attach_predictions`` ran)."""
    return len(table) == 0 or bool(np.isfinite(table.predicted).all())


def attach_predictions(table: JobTable, settings: PredictorSettings | None = None) -> JobTable:
    """A copy of ``table`` with ``predicted``, ``predicted_lo`` and ``predicted_hi`` filled.

    Call it on the trace as loaded (before an estimate model fills missing estimates: the
    predictor must see only the user estimates the trace really has). Cold-start jobs (before the
    first fit) have a point prediction but no band: NaN in ``predicted_lo``/``predicted_hi``.
    Served from the prediction cache when the same trace was predicted before. A table that
    already has its predictions is returned as it is.
    """
    if has_predictions(table):
        return table
    result = predict_runtimes(table, settings)
    note = f"runtime predictions: {result.summary()}"
    filled = table.with_fields(
        predicted=np.maximum(result.runtime, MIN_RUNTIME_S), predicted_lo=result.low, predicted_hi=result.high
    )
    return replace(filled, meta=replace(table.meta, notes=(*table.meta.notes, note)))
