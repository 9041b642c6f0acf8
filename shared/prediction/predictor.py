"""Online, leak-free runtime prediction with gradient-boosted trees.

Why scikit-learn's ``HistGradientBoostingRegressor`` (and not LightGBM): it is LightGBM's
histogram algorithm in a widely used, well-kept library, installed from one manylinux wheel with
no system OpenMP package to add; it handles missing values natively (a trace that lacks a column
is "missing", not an error), takes categorical columns without one-hot encoding (users, groups,
applications, queues), and has a quantile loss, which gives the uncertainty band from the same
learner. A fit of 20,000 rows takes about a second on one core, which is what Hylo needs.

The rule that keeps the predictor honest: a prediction made at time ``t`` (a job's submit time)
uses only jobs whose *logged* finish (``shared.prediction.history.logged_finish``: submit + logged
wait + runtime; submit + runtime where the trace logs no wait) is strictly before ``t``, for its
features, for the model's training rows and for choosing the shrink weight. The logged finish
never depends on the policy being simulated, so the predictions of a trace are computed once,
before any simulation, and are the same for every policy.

Retraining happens in batches: the first fit once ``min_train`` jobs have finished, then a refit
whenever ``retrain_jobs`` more jobs have finished, or ``retrain_hours`` have passed since the last
fit, or (early in a trace, when that comes first) the finished jobs have grown by
``retrain_growth`` since the last fit; all checked as jobs finish. Each fit learns from the
``max_train`` most recently finished jobs. A job uses the latest fit made strictly before its
submit; a fit that no job would use (the next one comes before any job is submitted) is skipped
and not counted. Before the first fit (cold start) a job's prediction is its user estimate, else
the ``history`` estimate (the user's, then the VC's last two finished jobs, times ``safety``, by
logged finish), else the median runtime of all jobs finished so far, else ``default_runtime_s``;
cold-start jobs have no band (NaN).

What is learned: the log of the runtime (runtimes span seconds to days; the error that matters
is a ratio) relative to a reference known at submission, the median of the last finished jobs
with the same request, else of the user's, else of the VC's (``_reference``). The point model uses
the absolute-error loss (the median, which the median absolute log error rewards), the band two
quantile losses. The point prediction is ``reference + w x correction``, with ``w`` chosen at
each fit from the recent out-of-sample errors (``choose_shrink``): on HPC2N the reference alone is
the better predictor, on openb or Lublin-256 the model is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic_settings import SettingsConfigDict

from shared.config import HyloBaseSettings
from shared.domain.jobs import JobTable
from shared.prediction import cache
from shared.prediction.features import CategoryEncoder, Features, submission_features
from shared.prediction.history import FloatArray, IntArray, history_estimate, logged_finish

#: part of the prediction cache's key (``shared.prediction.cache``): bump it whenever the model,
#: its features, the fit schedule or anything else that changes the predictions changes, so that
#: no stale cached prediction is served
PREDICTOR_VERSION = 1
MIN_RUNTIME_S = 1.0
#: where each prediction came from (``RuntimePredictions.source``)
SOURCES = ("model", "user estimate", "history", "trace median", "default")
MAX_CATEGORIES = 254  # the regressor's max_bins (255) less one
#: the weights of the model's correction to the reference that ``choose_shrink`` picks from
SHRINK_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
#: settings read only by the live predictor (``PredictorSettings.cache_fields`` leaves them out)
LIVE_SETTINGS = ("live", "live_memory")


class PredictionError(ValueError):
    """Bad settings or a table the predictor cannot use; the message is one line naming the table
    (its source file) and what is wrong."""


class PredictorSettings(HyloBaseSettings):
    """How often and on what the predictor retrains, and the regressor's size
    (``HYLO_PREDICTOR_*`` or ``predictor_*`` in hylo.toml, like every Hylo setting).

    Bounds are checked by ``check`` (one line naming the table and the setting, a
    ``PredictionError``) rather than at construction, so that a bad value in a file or the
    environment reads like any other unusable input."""

    model_config = SettingsConfigDict(env_prefix="HYLO_PREDICTOR_", extra="ignore", frozen=True)

    retrain_jobs: int = 2_000  # refit after this many more jobs finished ...
    retrain_hours: float = 168.0  # ... or this many hours after the last fit (a week) ...
    retrain_growth: float = 0.25  # ... or once the finished jobs grew by this share (early on)
    min_train: int = 200  # first fit once this many jobs finished (cold start before)
    max_train: int = 20_000  # each fit learns from the most recently finished jobs
    history_k: int = 5  # the submitter's last k finished jobs summarised in the features
    quantiles: tuple[float, float] = (0.1, 0.9)  # the uncertainty band
    max_iter: int = 100  # boosting rounds of the point model
    band_iter: int = 50  # boosting rounds of each band model
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    min_samples_leaf: int = 20
    validation: int = 2_000  # recent out-of-sample jobs that choose the shrink weight ...
    min_validation: int = 100  # ... once there are this many
    safety: float = 1.5  # cold-start history factor (the ``history`` estimate's)
    default_runtime_s: float = 3_600.0  # cold start with nothing finished at all
    threads: int = 1  # OpenMP threads per fit (more only helps on idle cores)
    seed: int = 0
    # live only (``shared.prediction.online``; not part of the prediction cache's key):
    # the featurizer predicts the pending jobs' runtimes from the outcomes (HYLO_PREDICTOR_LIVE);
    # off by default until a served model reads them: the featurizer's classic matrix does not, and
    # predicting costs it 20-45 ms per snapshot with new jobs plus a replay of the outcome stream
    live: bool = False
    live_memory: int = 50_000  # jobs a live predictor remembers, seen pending and finished (each)

    def cache_fields(self) -> dict[str, Any]:
        """The settings that change offline predictions (the prediction cache's key): all but the
        live ones, so that tuning the live predictor does not throw the traces' caches away."""
        return self.model_dump(exclude=set(LIVE_SETTINGS))

    def check(self, where: str) -> None:
        """Raise ``PredictionError`` naming the first bad setting."""
        problems = [
            (self.retrain_jobs < 1, f"retrain_jobs must be >= 1, got {self.retrain_jobs}"),
            (not self.retrain_hours > 0, f"retrain_hours must be > 0, got {self.retrain_hours}"),
            (not self.retrain_growth > 0, f"retrain_growth must be > 0, got {self.retrain_growth}"),
            (self.min_train < 2, f"min_train must be >= 2, got {self.min_train}"),
            (
                self.max_train < self.min_train,
                f"max_train {self.max_train} is below min_train {self.min_train}",
            ),
            (self.history_k < 2, f"history_k must be >= 2, got {self.history_k}"),
            (
                not 0.0 < self.quantiles[0] < 0.5 < self.quantiles[1] < 1.0,
                f"quantiles must be (low < 0.5 < high) inside (0, 1), got {self.quantiles}",
            ),
            (self.max_iter < 1 or self.band_iter < 1, "max_iter and band_iter must be >= 1"),
            (self.threads < 1, f"threads must be >= 1, got {self.threads}"),
            (
                self.live_memory < self.max_train,
                f"live_memory {self.live_memory} is below max_train {self.max_train}",
            ),
        ]
        for bad, message in problems:
            if bad:
                raise PredictionError(f"{where}: predictor setting {message}")


@dataclass(frozen=True)
class RuntimePredictions:
    """Per job (rows of the table): the predicted runtime and its band, all in seconds.

    ``source[j]`` indexes ``SOURCES``; ``fit[j]`` is the fit that predicted job j (an index into
    ``fit_times``; -1: cold start).
    ``fit_times`` are the times the fits were made (each the logged finish of the last job it
    learned from), ``train_sizes`` their row counts, ``shrink`` the weight each gave its model's
    correction to the reference (``choose_shrink``); ``fit_seconds`` is the total wall time spent
    fitting, the retraining cost. ``cached``: read from the prediction cache
    (``shared.prediction.cache``), nothing was fitted now; ``fit_seconds`` is then still the cost
    of the run that fitted them.
    """

    runtime: FloatArray
    low: FloatArray
    high: FloatArray
    source: npt.NDArray[np.int8]
    fit: IntArray
    fit_times: FloatArray
    train_sizes: IntArray
    shrink: FloatArray
    fit_seconds: float
    settings: PredictorSettings = field(default_factory=PredictorSettings)
    cached: bool = False

    @property
    def fits(self) -> int:
        return len(self.fit_times)

    def summary(self) -> str:
        """One line: coverage by source and the retraining cost."""
        counts = np.bincount(self.source, minlength=len(SOURCES))
        parts = ", ".join(f"{SOURCES[i]} {int(c)}" for i, c in enumerate(counts) if c)
        cost = f"{self.fits} fits, {self.fit_seconds:.1f} s fitting"
        return f"predicted runtimes ({parts}); {cost}{' (cached: none now)' if self.cached else ''}"


def _check_table(table: JobTable) -> str:
    """The table's name for messages; raises ``PredictionError`` on unusable times."""
    where = table.meta.source or table.meta.name
    for name, values in (("submit", table.submit), ("runtime", table.runtime)):
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise PredictionError(
                f"{where}: {int(bad.sum())} jobs have a {name} that is not a finite number >= 0 "
                f"(first: job {table.ids[i]}, {values[i]!r}); the predictor needs both for every job"
            )
    if len(table) and np.any(np.diff(table.submit) < 0):
        raise PredictionError(f"{where}: jobs are not sorted by submit time (use JobTable.sorted_by_submit)")
    return where


def fit_schedule(finish: FloatArray, settings: PredictorSettings) -> tuple[FloatArray, IntArray]:
    """When the fits happen: their times and how many jobs had finished by each (ties included).

    Depends on the logged finish times only, so the schedule up to ``t`` does not depend on any job
    that finishes after ``t``.
    """
    ends = np.sort(finish, kind="stable")
    # one decision per distinct finish time, after every job finishing then is counted
    last_of_tie = np.flatnonzero(np.r_[ends[1:] != ends[:-1], True]) if len(ends) else np.zeros(0, int)
    times: list[float] = []
    counts: list[int] = []
    for pos in last_of_tie.tolist():
        done, at = pos + 1, float(ends[pos])
        if fit_due(done, at, (times[-1], counts[-1]) if counts else None, settings):
            times.append(at)
            counts.append(done)
    return np.asarray(times, dtype=np.float64), np.asarray(counts, dtype=np.int64)


def fit_due(done: int, at: float, last: tuple[float, int] | None, settings: PredictorSettings) -> bool:
    """Whether a fit is due once ``done`` jobs have finished, the last at ``at``; ``last`` is the
    previous fit's (time, finished count), None before the first.

    The one batch rule of the offline schedule (``fit_schedule``) and of the live predictor
    (``shared.prediction.online``).
    """
    if done < settings.min_train:
        return False
    if last is None:
        return True
    time_of, count = last
    grown = done - count >= min(settings.retrain_jobs, settings.retrain_growth * count)
    return grown or at - time_of >= settings.retrain_hours * 3_600.0


def cold_start(
    table: JobTable, finish: FloatArray, rows: IntArray, settings: PredictorSettings
) -> tuple[FloatArray, npt.NDArray[np.int8]]:
    """Predictions and their sources for the jobs ``rows`` that no fit can serve yet."""
    estimate = table.estimate[rows]
    history = history_estimate(table, finish, settings.safety)[rows]
    pred = np.full(len(rows), np.nan)
    source = np.full(len(rows), SOURCES.index("default"), dtype=np.int8)
    ends = np.argsort(finish, kind="stable")
    for i, j in enumerate(rows.tolist()):
        if np.isfinite(estimate[i]) and estimate[i] > 0:
            pred[i], source[i] = estimate[i], SOURCES.index("user estimate")
        elif np.isfinite(history[i]):
            pred[i], source[i] = history[i], SOURCES.index("history")
        else:
            done = ends[: np.searchsorted(finish[ends], table.submit[j], side="left")]
            if len(done):
                pred[i], source[i] = float(np.median(table.runtime[done])), SOURCES.index("trace median")
            else:
                pred[i] = settings.default_runtime_s
    return pred, source


def _reference(features: Features) -> FloatArray:
    """Each job's reference log runtime: the median over the last ``history_k`` finished jobs with
    the same request (``features._same_request``), else over its user's, else its VC's (NaN: none).
    The median, not the mean: one crashed or runaway job should not move the next ones' reference.
    """
    ref = np.full(len(features.matrix), np.nan)
    for name in ("same_median", "user_median", "vc_median"):
        column = features.matrix[:, features.names.index(name)]
        ref = np.where(np.isnan(ref), column, ref)
    return ref


def _regressors(settings: PredictorSettings, categorical: tuple[bool, ...]) -> list[object]:
    """The point model and the two band models, unfitted."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    common = {
        "learning_rate": settings.learning_rate,
        "max_leaf_nodes": settings.max_leaf_nodes,
        "min_samples_leaf": settings.min_samples_leaf,
        "categorical_features": np.asarray(categorical, dtype=bool),
        "early_stopping": False,
        "random_state": settings.seed,
    }
    low, high = settings.quantiles
    return [
        HistGradientBoostingRegressor(loss="absolute_error", max_iter=settings.max_iter, **common),
        HistGradientBoostingRegressor(loss="quantile", quantile=low, max_iter=settings.band_iter, **common),
        HistGradientBoostingRegressor(loss="quantile", quantile=high, max_iter=settings.band_iter, **common),
    ]


@dataclass(frozen=True, eq=False)
class FittedModels:
    """The three fitted models of one fit (point, low, high) and what they need to predict.

    Why an object (and not one fit-and-predict call): the offline replay predicts a fit's jobs at
    once, but a live cluster (``shared.prediction.online``) predicts each job when it first sees
    it, long after the fit; both go through ``fit_models``, so they fit the same models the same way.
    ``names`` are the feature columns the fit saw (a query matrix is aligned to them by name),
    ``used`` those of them that had a value in the training rows, ``fill`` the training rows'
    median log runtime (the reference of a job without one).
    """

    names: tuple[str, ...]
    encoder: CategoryEncoder
    used: npt.NDArray[np.bool_]
    fill: float
    models: tuple[object, ...]

    def predict_ratios(
        self, features: Features, query: IntArray, reference: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """For rows ``query`` of ``features``: the reference log runtime used and the models'
        predicted log ratios to it (point, low, high; shape (3, len(query)))."""
        matrix = _aligned(features, self.names)[query]
        ref_query = np.where(np.isnan(reference[query]), self.fill, reference[query])
        x_query = self.encoder.transform(matrix)[:, self.used]
        ratios = np.empty((3, len(query)))
        for k, model in enumerate(self.models):
            ratios[k] = model.predict(x_query)  # type: ignore[attr-defined]
        return ref_query, ratios


def _aligned(features: Features, names: tuple[str, ...]) -> FloatArray:
    """``features.matrix`` with the columns ``names`` in that order (NaN for a column it lacks).

    Why: which history columns exist depends on the table (``user_overestimate`` only where some job
    has an estimate), and a live query table is not the table the fit learned from.
    """
    if features.names == names:
        return features.matrix
    out = np.full((len(features.matrix), len(names)), np.nan)
    for i, name in enumerate(names):
        if name in features.names:
            out[:, i] = features.matrix[:, features.names.index(name)]
    return out


def fit_models(
    features: Features,
    train: IntArray,
    target: FloatArray,
    reference: FloatArray,
    settings: PredictorSettings,
) -> FittedModels:
    """Fit the three models on rows ``train`` (the one fit of both the offline replay and the live
    predictor).

    The models learn the log ratio of the runtime to ``reference`` (the submitter's recent log
    runtime, known at submission; where there is none, the training rows' median): trees cannot
    extrapolate, and a workload whose runtimes drift beyond what the last fit saw is still
    followed through the reference.
    """
    fill = float(np.median(target[train]))
    ref_train = np.where(np.isnan(reference[train]), fill, reference[train])
    encoder = CategoryEncoder(features.categorical, MAX_CATEGORIES).fit(features.matrix[train])
    x_train = encoder.transform(features.matrix[train])
    # a column with no value in the training rows (the trace lacks it, or no history yet) tells
    # the fit nothing, and the regressor cannot bin it: leave it out of this fit
    used = np.asarray(np.isfinite(x_train).any(axis=0), dtype=bool)
    x_train = x_train[:, used]
    categorical = tuple(c for c, u in zip(features.categorical, used.tolist(), strict=True) if u)
    models = _regressors(settings, categorical)
    for model in models:
        model.fit(x_train, target[train] - ref_train)  # type: ignore[attr-defined]
    return FittedModels(names=features.names, encoder=encoder, used=used, fill=fill, models=tuple(models))


def _fit_and_predict(
    features: Features,
    train: IntArray,
    target: FloatArray,
    query: IntArray,
    reference: FloatArray,
    settings: PredictorSettings,
) -> tuple[FloatArray, FloatArray]:
    """``fit_models`` on rows ``train``, then its ``predict_ratios`` for rows ``query``."""
    return fit_models(features, train, target, reference, settings).predict_ratios(features, query, reference)


def combine(ref: FloatArray, ratios: FloatArray, shrink: float) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The point prediction and its band (seconds, unclipped) from a reference and the models'
    ratios: ``reference + shrink x point ratio``, the band around it (never excluding the point)."""
    point = np.exp(ref + shrink * ratios[0])
    low = np.minimum(np.exp(ref + ratios[1]), point)
    high = np.maximum(np.exp(ref + ratios[2]), point)
    return point, low, high


def choose_shrink(
    done: IntArray, reference: FloatArray, ratio: FloatArray, target: FloatArray, settings: PredictorSettings
) -> float:
    """How much of the model's correction to the reference to trust at the next fit.

    ``done`` are the jobs finished by the fit (in finish order); among the last ``validation`` of
    them that an earlier fit predicted (``ratio`` known), the weight w in ``SHRINK_GRID`` whose
    predictions ``reference + w x ratio`` had the smallest median absolute log error. Why: on logs
    with long runs of identical jobs (HPC2N) the reference alone is nearly exact and a model fitted
    over a different stretch of the log only adds noise, while elsewhere (openb, Lublin-256) the
    model is far better; this lets the recent past decide, out of sample and without a leak (every
    job used finished before the fit). 1.0 (the model) until ``min_validation`` such jobs exist.
    """
    seen = done[np.isfinite(ratio[done])][-settings.validation :]
    if len(seen) < settings.min_validation:
        return 1.0
    errors = [float(np.median(np.abs(reference[seen] + w * ratio[seen] - target[seen]))) for w in SHRINK_GRID]
    return SHRINK_GRID[int(np.argmin(errors))]


#: the arrays of ``RuntimePredictions`` a cache entry holds (with ``fit_seconds``)
_CACHED_ARRAYS = ("runtime", "low", "high", "source", "fit", "fit_times", "train_sizes", "shrink")


def _from_entry(
    entry: dict[str, npt.NDArray[Any]], n: int, settings: PredictorSettings
) -> RuntimePredictions | None:
    """The cached predictions, or None when the entry does not fit a table of ``n`` jobs."""
    per_job = ("runtime", "low", "high", "source", "fit")
    per_fit = ("fit_times", "train_sizes", "shrink")
    if any(entry[k].shape != (n,) for k in per_job) or len({entry[k].shape for k in per_fit}) != 1:
        return None
    return RuntimePredictions(
        runtime=entry["runtime"].astype(np.float64),
        low=entry["low"].astype(np.float64),
        high=entry["high"].astype(np.float64),
        source=entry["source"].astype(np.int8),
        fit=entry["fit"].astype(np.int64),
        fit_times=entry["fit_times"].astype(np.float64),
        train_sizes=entry["train_sizes"].astype(np.int64),
        shrink=entry["shrink"].astype(np.float64),
        fit_seconds=float(entry["fit_seconds"]),
        settings=settings,
        cached=True,
    )


def predict_runtimes(
    table: JobTable, settings: PredictorSettings | None = None, *, use_cache: bool | None = None
) -> RuntimePredictions:
    """Predict every job's runtime online (see the module docstring for the rule and schedule).

    ``table`` must be sorted by submit time (every loader's table is). Raises ``PredictionError``
    (a ``ValueError``) with one line naming the table for bad settings or unusable times.
    The result is served from, or written to, the prediction cache (``shared.prediction.cache``)
    unless ``use_cache`` is False, or None and the ``prediction_cache`` setting is off.
    """
    s = settings or PredictorSettings()
    where = _check_table(table)
    s.check(where)
    cache_dir = cache.enabled(use_cache)
    if cache_dir is None:
        return _predict(table, s)
    key = cache.cache_key(table, s.cache_fields(), PREDICTOR_VERSION)
    path = cache.cache_file(cache_dir, key)
    entry = cache.load_entry(path, key, (*_CACHED_ARRAYS, "fit_seconds"))
    hit = _from_entry(entry, len(table), s) if entry is not None else None
    if hit is not None:
        return hit
    result = _predict(table, s)
    arrays = {name: getattr(result, name) for name in _CACHED_ARRAYS}
    cache.save_entry(path, key, {**arrays, "fit_seconds": np.float64(result.fit_seconds)})
    return result


def _predict(table: JobTable, s: PredictorSettings) -> RuntimePredictions:
    """``predict_runtimes`` without the cache, on a checked table and settings."""
    import sklearn.ensemble  # noqa: F401  (imported here so that its import is no part of fit cost)
    from threadpoolctl import threadpool_limits

    n = len(table)
    finish = logged_finish(table)
    fit_times, fit_counts = fit_schedule(finish, s)
    # the latest fit made strictly before each job's submit
    fit_of = np.searchsorted(fit_times, table.submit, side="left").astype(np.int64) - 1
    runtime, low, high = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    source = np.full(n, SOURCES.index("model"), dtype=np.int8)
    cold = np.flatnonzero(fit_of < 0)
    runtime[cold], source[cold] = cold_start(table, finish, cold, s)
    by_finish = np.argsort(finish, kind="stable")
    target = np.log(np.maximum(table.runtime, MIN_RUNTIME_S))
    features = submission_features(table, finish, s.history_k) if len(cold) < n else None
    reference = _reference(features) if features is not None else np.zeros(0)
    sizes = np.minimum(fit_counts, s.max_train)
    used = np.unique(fit_of[fit_of >= 0])
    base, ratio = np.full(n, np.nan), np.full(n, np.nan)  # per job: the reference and model ratio used
    shrink = np.ones(len(used))
    spent = 0.0
    with threadpool_limits(limits=s.threads):
        for i, k in enumerate(used.tolist()):
            assert features is not None
            train = by_finish[fit_counts[k] - sizes[k] : fit_counts[k]]
            query = np.flatnonzero(fit_of == k)
            started = time.perf_counter()
            ref, ratios = _fit_and_predict(features, train, target, query, reference, s)
            shrink[i] = choose_shrink(by_finish[: fit_counts[k]], base, ratio, target, s)
            spent += time.perf_counter() - started
            base[query], ratio[query] = ref, ratios[0]
            runtime[query], low[query], high[query] = combine(ref, ratios, shrink[i])
    return RuntimePredictions(
        runtime=np.maximum(runtime, MIN_RUNTIME_S),
        low=np.maximum(low, MIN_RUNTIME_S),
        high=high,
        source=source,
        fit=np.where(fit_of >= 0, np.searchsorted(used, fit_of), -1).astype(np.int64),
        fit_times=fit_times[used],
        train_sizes=sizes[used],
        shrink=shrink,
        fit_seconds=spent,
        settings=s,
    )
