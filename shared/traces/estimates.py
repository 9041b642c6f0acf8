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

Only missing (NaN) estimates are filled, except by ``oracle``. No estimate is ever below 1 s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import JobTable

FloatArray = npt.NDArray[np.float64]
EstimateModel = Literal["oracle", "noisy", "history"]
ESTIMATE_MODELS: tuple[str, ...] = ("oracle", "noisy", "history")
MIN_ESTIMATE_S = 1.0
LOMAX_SHAPE = 1.5
MAX_FACTOR = 100.0
DEFAULT_SAFETY = 1.5
UNKNOWN_USER = "unknown"
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


def _last_two_mean(members: npt.NDArray[np.int64], submit: FloatArray, runtime: FloatArray) -> FloatArray:
    """For jobs ``members`` (one user or VC): mean runtime of the group's last two finished jobs."""
    end = submit[members] + runtime[members]
    order = np.argsort(end, kind="stable")
    end_sorted = end[order]
    run_sorted = runtime[members][order]
    done = np.searchsorted(end_sorted, submit[members], side="right")
    last = np.where(done >= 1, run_sorted[np.maximum(done - 1, 0)], np.nan)
    prev = np.where(done >= 2, run_sorted[np.maximum(done - 2, 0)], np.nan)
    return np.where(done >= 2, (last + prev) / 2.0, last)


def history_predictions(table: JobTable, safety: float = DEFAULT_SAFETY) -> FloatArray:
    """Per-user (then per-VC) predictions; NaN where neither has a finished job yet."""
    pred = np.full(len(table), np.nan)
    unknown_users = [k for k, name in enumerate(table.users) if name == UNKNOWN_USER]
    by_user = ~np.isin(table.user, unknown_users)
    for codes, mask in ((table.user, by_user), (table.vc, np.ones(len(table), dtype=bool))):
        for code in np.unique(codes[mask]).tolist():
            members = np.flatnonzero(mask & (codes == code))
            values = _last_two_mean(members, table.submit, table.runtime)
            fill = np.isnan(pred[members])
            pred[members[fill]] = values[fill]
    return pred * safety


def apply_estimates(
    table: JobTable, model: EstimateModel | str, seed: int = 0, *, safety: float = DEFAULT_SAFETY
) -> JobTable:
    """A copy of ``table`` with missing estimates filled by ``model`` (``oracle`` replaces all)."""
    runtime = table.runtime
    if model == "oracle":
        estimate = runtime.copy()
    elif model == "noisy":
        estimate = np.where(np.isnan(table.estimate), noisy_estimates(runtime, seed), table.estimate)
    elif model == "history":
        guess = history_predictions(table, safety)
        guess = np.where(np.isnan(guess), noisy_estimates(runtime, seed), np.ceil(guess))
        estimate = np.where(np.isnan(table.estimate), guess, table.estimate)
    else:
        raise ValueError(f"unknown estimate model {model!r}; models: {', '.join(ESTIMATE_MODELS)}")
    filled = int(np.isnan(table.estimate).sum()) if model != "oracle" else len(table)
    estimate = np.maximum(estimate, MIN_ESTIMATE_S)
    meta = replace(
        table.meta, notes=(*table.meta.notes, f"estimates: {model} (seed {seed}) for {filled} jobs")
    )
    return replace(table.with_fields(estimate=estimate), meta=meta)
