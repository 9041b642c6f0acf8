"""Runtime-estimate models for traces that carry no user estimates (Philly, openb, RLTune).

Why: SJF-like priorities, backfilling and runtime features need an estimate at submit time, and
using the true runtime (what the RLTune reference did) makes every such policy clairvoyant. These
models make the choice explicit and reproducible (seeded):

``oracle``
    estimate = true runtime, for every job (also replacing trace estimates): the upper bound.
``noisy``
    users over-estimate: ``runtime x factor`` with ``factor = 1 + L``, ``L`` drawn from a Lomax
    (Pareto II) law with shape 1.5 and scale 1 (median factor about 1.6, mean 3, a heavy tail),
    capped at 100; then rounded UP to the wall-time values users actually type: 5, 10, 15, 30 min,
    1, 2, 4, 6, 8, 12, 24, 48, 72 h, and beyond that whole days. A factor is drawn for every row
    from ``seed`` so a job's estimate does not depend on which other rows need one.
``history``
    a system predictor in the style of Tsafrir et al. (2007): the mean of the runtimes of the
    user's last two jobs that had finished by this job's submit time (a job counts as finished when
    ``submit + runtime <= this submit``; with only one, that one), times ``safety``. Users named
    ``unknown`` have no history; then the job's VC is used the same way, and with no finished job
    in the VC either, the ``noisy`` estimate. Only jobs submitted earlier can contribute.
``predicted``
    Hylo's runtime predictor (``shared.prediction.predict_runtimes``, default settings): gradient-
    boosted trees retrained online on the jobs whose logged finish (submit + logged wait + runtime)
    came before each job's submit, from what is known at submission (user, group, application,
    queue/partition, request, user estimate, time, the submitter's recent jobs); before its first
    fit, the user estimate, else ``history`` (by logged finish). It sets *every* job's estimate,
    user estimates included (they are among its inputs): on HPC2N, filling only missing ones would
    change nothing. The predictions depend on the trace alone, never on the policy simulated.

Only missing (NaN) estimates are filled, except by ``oracle`` and ``predicted``. No estimate is
ever below 1 s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import JobTable
from shared.prediction.history import history_estimate

FloatArray = npt.NDArray[np.float64]
EstimateModel = Literal["oracle", "noisy", "history", "predicted"]
ESTIMATE_MODELS: tuple[str, ...] = ("oracle", "noisy", "history", "predicted")
MIN_ESTIMATE_S = 1.0
LOMAX_SHAPE = 1.5
MAX_FACTOR = 100.0
DEFAULT_SAFETY = 1.5
_MIN = 60.0
_HOUR = 3600.0
_DAY = 86400.0
WALLTIME_GRID_S: tuple[float, ...] = (
    5 * _MIN,
    10 * _MIN,
    15 * _MIN,
    30 * _MIN,
    1 * _HOUR,
    2 * _HOUR,
    4 * _HOUR,
    6 * _HOUR,
    8 * _HOUR,
    12 * _HOUR,
    24 * _HOUR,
    48 * _HOUR,
    72 * _HOUR,
)


def round_up_walltime(seconds: FloatArray) -> FloatArray:
    """The smallest grid value >= each input; above 72 h, the next whole number of days."""
    grid = np.asarray(WALLTIME_GRID_S)
    idx = np.searchsorted(grid, seconds, side="left")
    beyond = idx >= len(grid)
    out = grid[np.minimum(idx, len(grid) - 1)]
    return np.where(beyond, np.ceil(seconds / _DAY) * _DAY, out)


def noisy_estimates(runtime: FloatArray, seed: int) -> FloatArray:
    """Over-estimates for every row (see the module docstring for the distribution)."""
    rng = np.random.default_rng(seed)
    factor = np.minimum(1.0 + rng.pareto(LOMAX_SHAPE, size=len(runtime)), MAX_FACTOR)
    return round_up_walltime(np.maximum(runtime * factor, MIN_ESTIMATE_S))


def history_predictions(table: JobTable, safety: float = DEFAULT_SAFETY) -> FloatArray:
    """Per-user (then per-VC) predictions; NaN where neither has a finished job yet.

    A job counts as finished at submit + runtime, at or before the query's submit (the rule this
    estimate has always had; the predictor's stricter logged-finish rule is in
    ``shared.prediction.history``).
    """
    return history_estimate(table, table.submit + table.runtime, safety, strict=False)


def apply_estimates(
    table: JobTable, model: EstimateModel | str, seed: int = 0, *, safety: float = DEFAULT_SAFETY
) -> JobTable:
    """A copy of ``table`` with missing estimates filled by ``model`` (``oracle`` and ``predicted``
    replace all). ``predicted`` raises ``shared.prediction.PredictionError`` (a ``ValueError``)
    for a table it cannot use."""
    runtime = table.runtime
    note = ""
    if model == "oracle":
        estimate = runtime.copy()
    elif model == "noisy":
        estimate = np.where(np.isnan(table.estimate), noisy_estimates(runtime, seed), table.estimate)
    elif model == "history":
        guess = history_predictions(table, safety)
        guess = np.where(np.isnan(guess), noisy_estimates(runtime, seed), np.ceil(guess))
        estimate = np.where(np.isnan(table.estimate), guess, table.estimate)
    elif model == "predicted":
        from shared.prediction import PredictorSettings, has_predictions, predict_runtimes

        if has_predictions(table):  # attached before (``attach_predictions``): the same values
            estimate = np.ceil(table.predicted)
            note = "the attached runtime predictions"
        else:
            predicted = predict_runtimes(table, PredictorSettings(seed=seed))
            estimate = np.ceil(predicted.runtime)
            note = predicted.summary()
    else:
        raise ValueError(f"unknown estimate model {model!r}; models: {', '.join(ESTIMATE_MODELS)}")
    filled = int(np.isnan(table.estimate).sum()) if model not in ("oracle", "predicted") else len(table)
    estimate = np.maximum(estimate, MIN_ESTIMATE_S)
    said = f"estimates: {model} (seed {seed}) for {filled} jobs" + (f": {note}" if note else "")
    meta = replace(table.meta, notes=(*table.meta.notes, said))
    return replace(table.with_fields(estimate=estimate), meta=meta)
