"""What is known about a job when it is submitted, as one feature matrix for the regressor.

Why these features: runtime prediction studies (Tsafrir et al. 2007; Gaussier et al. 2015; the
Helios QSSF predictor) agree that a job is most like its submitter's recent jobs, then like jobs
with the same request, application and queue, and that the user's own estimate carries
information even when it is poor. Every feature here is known at submission: the request and the
labels come from the submit record, and the history features come only from jobs that had
finished (by the caller's ``finish`` times) strictly before this job was submitted, so a feature
never holds a later job's runtime (``shared.prediction.history``).

Categorical columns hold the trace's integer codes, NaN where the trace does not give the value;
the predictor re-encodes them per fit (``CategoryEncoder``), because the regressor takes at most
``max_bins`` categories per column and HPC2N alone has 257 users.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import UNKNOWN, JobTable
from shared.prediction.history import FloatArray, IntArray, Recent, recent_finished, user_keys

DAY_S = 86_400.0
HOUR_S = 3_600.0
# 1970-01-01 (epoch day 0) was a Thursday: day 3 when Monday is 0
EPOCH_WEEKDAY = 3
#: how far back a submitter's burst of submissions is counted (job arrays, parameter sweeps)
BURST_S = HOUR_S
CATEGORICAL = ("user", "group", "app", "queue", "partition", "vc", "qos", "type_set")


@dataclass(frozen=True)
class Features:
    """One row per job; ``categorical[i]`` says whether column ``i`` holds category codes."""

    names: tuple[str, ...]
    matrix: FloatArray
    categorical: tuple[bool, ...]


def _log_or_nan(values: npt.NDArray[np.float64] | npt.NDArray[np.int64], scale: float = 1.0) -> FloatArray:
    """log1p(values / scale) where values > 0; NaN (not given) elsewhere."""
    v = np.asarray(values, dtype=np.float64)
    positive = np.isfinite(v) & (v > 0)
    return np.where(positive, np.log1p(np.where(positive, v, 0.0) / scale), np.nan)


def _row_stats(last: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Mean, median and standard deviation of each row's non-NaN values (NaN for an empty row)."""
    have = np.isfinite(last)
    n = have.sum(axis=1)
    safe = np.where(have, last, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, safe.sum(axis=1) / np.maximum(n, 1), np.nan)
        var = np.where(have, (safe - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(n, 1)
    # median: sort with NaN last, then pick the middle of the n values of each row
    ordered = np.sort(np.where(have, last, np.inf), axis=1)
    rows = np.arange(len(last))
    lo = ordered[rows, np.maximum((n - 1) // 2, 0)]
    hi = ordered[rows, np.maximum(n // 2, 0)]
    median = np.where(n > 0, (lo + hi) / 2.0, np.nan)
    return mean, median, np.where(n > 0, np.sqrt(var), np.nan)


def _burst(keys: IntArray, submit: FloatArray) -> FloatArray:
    """How many jobs with the same key were submitted in the ``BURST_S`` before this one (known at
    submission: submit times only); NaN for jobs without a key."""
    out = np.full(len(keys), np.nan)
    for key in np.unique(keys[keys >= 0]).tolist():
        members = np.flatnonzero(keys == key)
        times = submit[members]  # members are in row (submit) order
        first = np.searchsorted(times, times - BURST_S, side="left")
        out[members] = np.arange(len(members)) - first
    return out


def _same_request(table: JobTable, users: IntArray) -> IntArray:
    """A key per distinct request: the submitter (user, else VC) with the same GPUs, CPUs, requested
    time, application and queue. Why: jobs resubmitted with the same request (job arrays, parameter
    sweeps, the same training script) run alike, the strongest single signal in HPC logs."""
    submitter = np.where(users >= 0, users, -1 - table.vc)
    estimate = np.where(np.isfinite(table.estimate), table.estimate, -1.0)
    rows = np.column_stack(
        [submitter, table.gpus, table.gpu_milli, table.cpus_milli, estimate, table.app, table.queue]
    ).astype(np.float64)
    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    _, inverse = np.unique(rows, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _history_columns(prefix: str, recent: Recent, ratio: Recent | None) -> dict[str, FloatArray]:
    mean, median, spread = _row_stats(recent.last)
    one, two = recent.last[:, 0], recent.last[:, 1]
    cols = {
        f"{prefix}_finished": np.log1p(recent.count.astype(np.float64)),
        f"{prefix}_last": one,
        f"{prefix}_last2": np.where(np.isnan(two), one, (one + two) / 2.0),
        f"{prefix}_mean": mean,
        f"{prefix}_median": median,
        f"{prefix}_spread": spread,
    }
    if ratio is not None:
        cols[f"{prefix}_overestimate"] = _row_stats(ratio.last)[0]
    return cols


def submission_features(table: JobTable, finish: FloatArray, k: int) -> Features:
    """The feature matrix of every job of ``table`` (see the module docstring for what and why).

    ``finish`` is each job's finish time as the predictor may know it (``logged_finish``); ``k`` is
    how many of the submitter's last finished jobs the history features summarise.
    """
    log_run = np.log(np.maximum(table.runtime, 1.0))
    has_estimate = np.isfinite(table.estimate) & (table.estimate > 0)
    log_est = np.where(has_estimate, np.log(np.where(has_estimate, table.estimate, 1.0)), np.nan)
    absolute = table.meta.origin + table.submit
    numeric: dict[str, FloatArray] = {
        "gpus": np.log1p(table.gpu_demand),
        "cpus": _log_or_nan(table.cpus_milli, 1000.0),
        "mem": _log_or_nan(table.mem_mib),
        "estimate": log_est,
        "hour": np.mod(absolute, DAY_S) / HOUR_S,
        "weekday": np.mod(np.floor(absolute / DAY_S) + EPOCH_WEEKDAY, 7),
    }
    users = user_keys(table)
    keyed = {"user": users, "vc": table.vc.astype(np.int64), "same": _same_request(table, users)}
    for prefix, keys in keyed.items():
        recent = recent_finished(keys, table.submit, finish, log_run, k)
        ratio = None
        if prefix == "user" and has_estimate.any():
            ratio = recent_finished(keys, table.submit, finish, log_est - log_run, k)
        numeric.update(_history_columns(prefix, recent, ratio))
        numeric[f"{prefix}_burst"] = _burst(keys, table.submit)
    codes: dict[str, IntArray] = {
        "user": users,
        "group": table.group,
        "app": table.app,
        "queue": table.queue,
        "partition": table.partition,
        "vc": table.vc,
        "qos": table.qos,
        "type_set": table.type_set,
    }
    categorical = {name: np.where(codes[name] == UNKNOWN, np.nan, codes[name]) for name in CATEGORICAL}
    columns = {**{f"{n}_code": v for n, v in categorical.items()}, **numeric}
    matrix = np.column_stack([np.asarray(v, dtype=np.float64) for v in columns.values()])
    is_cat = tuple(name.endswith("_code") for name in columns)
    return Features(names=tuple(columns), matrix=matrix.reshape(len(table), len(columns)), categorical=is_cat)


class CategoryEncoder:
    """Maps each categorical column's codes to 0..K-1 by frequency in the training rows (at most
    ``limit`` categories; rarer and unseen ones become NaN, "not known to this fit").

    Why per fit: the mapping is learned from the training rows only, so it too carries no
    information from jobs that had not finished at the fit.
    """

    def __init__(self, categorical: tuple[bool, ...], limit: int) -> None:
        self.columns = [i for i, c in enumerate(categorical) if c]
        self.limit = limit
        self.tables: dict[int, FloatArray] = {}

    def fit(self, matrix: FloatArray) -> CategoryEncoder:
        for col in self.columns:
            values = matrix[:, col]
            codes = values[np.isfinite(values)].astype(np.int64)
            table = np.full(int(codes.max()) + 1 if len(codes) else 0, np.nan)
            if len(codes):
                counts = np.bincount(codes)
                kept = np.argsort(-counts, kind="stable")[: min(self.limit, int((counts > 0).sum()))]
                table[kept] = np.arange(len(kept), dtype=np.float64)
            self.tables[col] = table
        return self

    def transform(self, matrix: FloatArray) -> FloatArray:
        out = matrix.copy()
        for col, table in self.tables.items():
            values = matrix[:, col]
            known = np.isfinite(values) & (values < len(table))
            if not len(table):
                out[:, col] = np.nan
                continue
            idx = np.where(known, values, 0).astype(np.int64)
            out[:, col] = np.where(known, table[idx], np.nan)
        return out
