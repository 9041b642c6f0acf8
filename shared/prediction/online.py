"""The runtime predictor on a live cluster: learns from the outcomes as they arrive.

Why a class of its own: offline, ``predict_runtimes`` replays a whole trace at once, because every
job's logged finish is known up front. A live cluster only tells a job's runtime when its outcome
arrives, so the same predictor has to be fed: ``predict`` with each snapshot's pending jobs and
``record_outcome`` with each finished job. The model is the offline one, fitted by the same code
(``predictor.fit_models``, ``choose_shrink``, ``combine``, ``cold_start``, the batch rule
``fit_due`` and the features of ``submission_features``), so a model trained in simulation on the
``predicted`` feature set is fed predictions made the same way in production.

What is remembered (bounded by ``PredictorSettings.live_memory``, for each of the two kinds):
what was known when each pending job was first seen (submit time, user, partition as the VC,
QOS, GPUs and their share and types, CPUs, memory, the requested time as the user estimate), and,
once its outcome arrives (runtime = end - start, finish = end), the same job as a finished one.
The oldest are forgotten first. An outcome of a job never seen pending (or already forgotten) is
counted and ignored: what was known at its submission is not known here.

The rule that keeps it honest, as offline: a job's prediction is made once, when a snapshot first
lists it, from the latest fit made before and the outcomes received before (its history features
take only jobs that finished strictly before its submit), and it is kept until the job finishes.
A later outcome or refit never changes a prediction already made, exactly as a trace job keeps
the prediction made at its submit. Fits learn only from received outcomes.

Retraining happens in batches, by the offline rule (``fit_due``): the first fit once ``min_train``
jobs have finished, then whenever ``retrain_jobs`` more have (``retrain_growth`` early on), or
``retrain_hours`` after the last fit on the cluster's clock (the outcomes' end times). The caller
decides when to run a due fit (``refit_due``, ``refit``): a fit takes about a second, so the
featurizer runs it in a worker thread while snapshots keep being predicted with the previous one.
Thread-safe: state changes hold a lock; the fit itself works on copies, outside it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import JobTable, TraceMeta
from shared.prediction.features import submission_features
from shared.prediction.history import FloatArray, IntArray
from shared.prediction.predictor import (
    MIN_RUNTIME_S,
    SOURCES,
    FittedModels,
    PredictorSettings,
    choose_shrink,
    cold_start,
    combine,
    fit_due,
    fit_models,
)
from shared.prediction.predictor import _reference as reference_of

__all__ = ["LivePredictions", "OnlinePredictor", "Submissions"]


@dataclass(frozen=True)
class Submissions:
    """Pending jobs as columns (entry ``i`` of each describes job ``i``), as a snapshot lists them.

    Plain sequences so that this layer needs no message schema (``shared.schemas`` is above it);
    ``cpus_milli``/``mem_mib`` -1 and ``est_runtime_s`` 0 mean "not given".
    """

    job_id: Sequence[str]
    submit_s: Sequence[float]
    gpus: Sequence[int]
    gpu_milli: Sequence[int]
    gpu_types: Sequence[tuple[str, ...]]
    cpus_milli: Sequence[int]
    mem_mib: Sequence[int]
    est_runtime_s: Sequence[float]
    user: Sequence[str]
    partition: Sequence[str]
    qos: Sequence[str]


@dataclass(frozen=True)
class LivePredictions:
    """Per job asked for: the predicted runtime and its band (seconds; NaN band: cold start) and
    where it came from (``source`` indexes ``SOURCES``)."""

    runtime: FloatArray
    low: FloatArray
    high: FloatArray
    source: npt.NDArray[np.int8]


@dataclass(slots=True)
class _Job:
    """What was known of one job at submission, its prediction, and (once finished) its times."""

    submit: float
    gpus: int
    gpu_milli: int
    type_set: int
    cpus_milli: int
    mem_mib: int
    estimate: float
    user: int
    vc: int
    qos: int
    predicted: tuple[float, float, float, int] = (np.nan, np.nan, np.nan, 0)
    #: the reference log runtime and the model's point ratio it was predicted with (NaN: no model)
    base: float = np.nan
    ratio: float = np.nan
    runtime: float = np.nan
    finish: float = np.inf


@dataclass(frozen=True, eq=False)
class _Fit:
    models: FittedModels
    shrink: float
    at: float
    done: int
    train_size: int
    seconds: float


class _Codes:
    """Names -> stable integer codes, so that a fit and a later query table agree on categories."""

    def __init__(self, first: str | None = None) -> None:
        self.index: dict[Any, int] = {}
        self.names: list[Any] = []
        if first is not None:
            self.code(first)

    def code(self, name: Any) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found


@dataclass
class _Counts:
    outcomes: int = 0
    unmatched: int = 0
    finished: int = 0
    fits: int = 0
    fit_seconds: float = 0.0
    last_end: float = -np.inf
    by_source: list[int] = field(default_factory=lambda: [0] * len(SOURCES))


class OnlinePredictor:
    """One cluster's live runtime predictor (see the module docstring for the rules)."""

    def __init__(self, settings: PredictorSettings | None = None, where: str = "live cluster") -> None:
        self.settings = settings or PredictorSettings()
        self.settings.check(where)
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, _Job] = OrderedDict()
        self._finished: OrderedDict[str, _Job] = OrderedDict()  # in the order outcomes arrived
        self._fit: _Fit | None = None
        self._fitting = False
        self._counts = _Counts()
        self._users, self._vcs, self._qos = _Codes(), _Codes(), _Codes()
        self._types = _Codes()

    # --- what arrives -------------------------------------------------------------------------

    def predict(self, jobs: Submissions) -> LivePredictions:
        """Predictions for every job of ``jobs``: a job seen before keeps its prediction; a new one
        is remembered and predicted now, from the latest fit and the outcomes received so far."""
        n = len(jobs.job_id)
        with self._lock:
            known = self._pending.keys() | self._finished.keys() if self._finished else self._pending.keys()
            new = [i for i, j in enumerate(jobs.job_id) if j not in known]
            for i in new:
                self._pending[jobs.job_id[i]] = self._job_of(jobs, i)
            self._forget(self._pending)
            kept = [jobs.job_id[i] for i in new if jobs.job_id[i] in self._pending]
            if kept:
                self._predict_new(kept)
            out = np.full((4, n), np.nan)
            for i, j in enumerate(jobs.job_id):
                job = self._pending.get(j) or self._finished.get(j)
                if job is not None:
                    out[:, i] = job.predicted
        return LivePredictions(out[0], out[1], out[2], np.nan_to_num(out[3]).astype(np.int8))

    def record_outcome(self, job_id: str, start_s: float, end_s: float) -> bool:
        """Learn that ``job_id`` ran from ``start_s`` to ``end_s``; False when it was never seen
        pending (or was forgotten) or already finished, and so cannot be a training row."""
        with self._lock:
            self._counts.outcomes += 1
            job = self._pending.pop(job_id, None)
            if job is None:
                self._counts.unmatched += job_id not in self._finished
                return False
            job.runtime, job.finish = max(end_s - start_s, 0.0), end_s
            self._finished[job_id] = job
            self._forget(self._finished)
            self._counts.finished += 1
            self._counts.last_end = max(self._counts.last_end, end_s)
            return True

    # --- retraining ---------------------------------------------------------------------------

    @property
    def refit_due(self) -> bool:
        """Whether the batch rule asks for a fit now (and none is running)."""
        with self._lock:
            last = (self._fit.at, self._fit.done) if self._fit is not None else None
            done, at = self._counts.finished, self._counts.last_end
            return not self._fitting and fit_due(done, at, last, self.settings)

    def refit(self) -> bool:
        """Fit on the most recently finished jobs when a fit is due; True when one was made.

        The fit runs on a copy, outside the lock: snapshots are predicted with the previous fit
        meanwhile, and the new one replaces it atomically.
        """
        with self._lock:
            last = (self._fit.at, self._fit.done) if self._fit is not None else None
            done, at = self._counts.finished, self._counts.last_end
            if self._fitting or not fit_due(done, at, last, self.settings):
                return False
            self._fitting = True
            finished = list(self._finished.values())
            pending = list(self._pending.values())
            users, vcs, qos, types = (list(c.names) for c in (self._users, self._vcs, self._qos, self._types))
        try:
            fit = self._fit_on(finished, pending, (users, vcs, qos, types), at, done)
        finally:
            with self._lock:
                self._fitting = False
        with self._lock:
            self._fit = fit
            self._counts.fits += 1
            self._counts.fit_seconds += fit.seconds
        return True

    def status(self) -> dict[str, Any]:
        """What it has learned, for the service's status endpoint and the logs."""
        with self._lock:
            c, fit = self._counts, self._fit
            return {
                "outcomes": c.outcomes,
                "unmatched_outcomes": c.unmatched,
                "finished": c.finished,
                "remembered_pending": len(self._pending),
                "remembered_finished": len(self._finished),
                "fits": c.fits,
                "fit_seconds": round(c.fit_seconds, 3),
                "last_fit": None
                if fit is None
                else {"at": fit.at, "finished": fit.done, "train_size": fit.train_size, "shrink": fit.shrink},
                "predicted_by_source": {SOURCES[k]: v for k, v in enumerate(c.by_source) if v},
            }

    # --- internals ----------------------------------------------------------------------------

    def _job_of(self, jobs: Submissions, i: int) -> _Job:
        est = float(jobs.est_runtime_s[i])
        return _Job(
            submit=float(jobs.submit_s[i]),
            gpus=int(jobs.gpus[i]),
            gpu_milli=int(jobs.gpu_milli[i]),
            type_set=self._types.code(tuple(jobs.gpu_types[i])),
            cpus_milli=int(jobs.cpus_milli[i]),
            mem_mib=int(jobs.mem_mib[i]),
            estimate=est if est > 0 and np.isfinite(est) else np.nan,
            user=self._users.code(jobs.user[i]),
            vc=self._vcs.code(jobs.partition[i]),
            qos=self._qos.code(jobs.qos[i]),
        )

    def _forget(self, jobs: OrderedDict[str, _Job]) -> None:
        while len(jobs) > self.settings.live_memory:
            jobs.popitem(last=False)

    def _codebooks(self) -> tuple[list[Any], ...]:
        return tuple(list(c.names) for c in (self._users, self._vcs, self._qos, self._types))

    def _predict_new(self, new: list[str]) -> None:
        """Predict the just-remembered jobs ``new`` (under the lock) and keep their predictions."""
        queried = [self._pending[j] for j in new]
        fresh = set(new)
        others = [job for j, job in self._pending.items() if j not in fresh]
        jobs = [*self._finished.values(), *others, *queried]
        table, finish, order = _table(jobs, self._codebooks())
        rows = order[len(jobs) - len(queried) :]  # the queried jobs' rows in the table
        s = self.settings
        if self._fit is None:
            runtime, source = cold_start(table, finish, rows, s)
            low, high = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
            base, ratio = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
        else:
            from threadpoolctl import threadpool_limits

            features = submission_features(table, finish, s.history_k)
            with threadpool_limits(limits=s.threads):  # as offline: more threads only cost here
                base, ratios = self._fit.models.predict_ratios(features, rows, reference_of(features))
            runtime, low, high = combine(base, ratios, self._fit.shrink)
            ratio, source = ratios[0], np.full(len(rows), SOURCES.index("model"), dtype=np.int8)
        runtime, low = np.maximum(runtime, MIN_RUNTIME_S), np.maximum(low, MIN_RUNTIME_S)
        for k, job in enumerate(queried):
            job.predicted = (float(runtime[k]), float(low[k]), float(high[k]), int(source[k]))
            job.base, job.ratio = float(base[k]), float(ratio[k])
            self._counts.by_source[int(source[k])] += 1

    def _fit_on(
        self, finished: list[_Job], pending: list[_Job], books: tuple[list[Any], ...], at: float, done: int
    ) -> _Fit:
        """One fit on the ``max_train`` most recently finished of ``finished`` (``fit_models``)."""
        from threadpoolctl import threadpool_limits

        s = self.settings
        started = time.perf_counter()
        jobs = [*finished, *pending]
        table, finish, order = _table(jobs, books)
        done_rows = order[: len(finished)]
        by_finish = done_rows[np.argsort(finish[done_rows], kind="stable")]
        train = by_finish[-s.max_train :]
        target = np.log(np.maximum(table.runtime, MIN_RUNTIME_S))
        features = submission_features(table, finish, s.history_k)
        base, ratio = np.full(len(jobs), np.nan), np.full(len(jobs), np.nan)
        base[done_rows] = [j.base for j in finished]
        ratio[done_rows] = [j.ratio for j in finished]
        with threadpool_limits(limits=s.threads):
            models = fit_models(features, train, target, reference_of(features), s)
        shrink = choose_shrink(by_finish, base, ratio, target, s)
        seconds = time.perf_counter() - started
        return _Fit(models=models, shrink=shrink, at=at, done=done, train_size=len(train), seconds=seconds)


def _table(jobs: list[_Job], books: tuple[list[Any], ...]) -> tuple[JobTable, FloatArray, IntArray]:
    """The remembered ``jobs`` as a submit-sorted ``JobTable`` (the features need that order), their
    finish times (inf: not finished) in table order, and each job's row (``order[i]``: job i's)."""
    users, vcs, qos, types = books
    submit = np.fromiter((j.submit for j in jobs), np.float64, len(jobs))
    perm = np.argsort(submit, kind="stable")
    order = np.empty(len(jobs), dtype=np.int64)
    order[perm] = np.arange(len(jobs))

    def column(name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        return np.fromiter((getattr(j, name) for j in jobs), dtype, len(jobs))[perm]

    runtime = np.nan_to_num(column("runtime", np.float64), nan=0.0)
    table = JobTable(
        ids=np.arange(len(jobs)).astype(np.str_)[perm],
        submit=submit[perm],
        runtime=runtime,
        estimate=column("estimate", np.float64),
        gpus=column("gpus", np.int64),
        gpu_milli=column("gpu_milli", np.int64),
        type_set=column("type_set", np.int64),
        cpus_milli=column("cpus_milli", np.int64),
        mem_mib=column("mem_mib", np.int64),
        user=column("user", np.int64),
        vc=column("vc", np.int64),
        qos=column("qos", np.int64),
        type_sets=list(types) or [()],
        users=[str(u) for u in users] or ["default"],
        vcs=[str(v) for v in vcs] or ["default"],
        qoses=[str(q) for q in qos] or ["normal"],
        meta=TraceMeta(name="live"),
    )
    return table, column("finish", np.float64), order
