"""What a job's submitter (or its VC) ran before: per-key statistics of finished jobs.

Why one module: both the ``history`` estimate (``shared.traces.estimates``, Tsafrir et al. 2007)
and the runtime predictor's features ask the same question, "which jobs of this user had finished
when this job was submitted, and how long did they run?", and the answer must obey one rule so the
predictor never sees a job that had not finished yet. The caller passes the finish time it trusts:
``logged_finish`` (submit + logged wait + runtime) for the predictor, submit + runtime for the
``history`` estimate as it has always been computed.

A job counts as finished for a query at time ``t`` when its finish is strictly before ``t``: a job
that ends in the very second another is submitted is not known yet, and a job of zero length is
never part of its own history.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import UNKNOWN, JobTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
UNKNOWN_USER = "unknown"


def logged_finish(table: JobTable) -> FloatArray:
    """Each job's finish as the trace logged it: submit + logged wait + runtime.

    Where the trace logs no wait (Philly, Lublin-256, ``logged_wait`` NaN) the wait counts as 0, so
    the finish is submit + runtime: a lower bound of the real one. The rule never depends on a
    simulated schedule, so a predictor built on it does not depend on the policy being simulated.
    """
    wait = np.nan_to_num(table.logged_wait, nan=0.0)
    return table.submit + np.maximum(wait, 0.0) + table.runtime


def user_keys(table: JobTable) -> IntArray:
    """The user code of each job, ``UNKNOWN`` where the trace names no user (``unknown``)."""
    unknown = [k for k, name in enumerate(table.users) if name == UNKNOWN_USER]
    return np.where(np.isin(table.user, unknown), UNKNOWN, table.user).astype(np.int64)


@dataclass(frozen=True)
class Recent:
    """Per query job: how many jobs of its key had finished before its submit (``count``) and the
    values of the last ``k`` of them, most recent first (``last``, shape (n, k), NaN-padded)."""

    count: IntArray
    last: FloatArray


def recent_finished(
    keys: IntArray,
    submit: FloatArray,
    finish: FloatArray,
    values: FloatArray,
    k: int,
    *,
    strict: bool = True,
) -> Recent:
    """For every job j: the ``values`` of the last ``k`` jobs with its key whose ``finish`` is
    strictly before ``submit[j]`` (``strict=False``: at or before, the ``history`` estimate's rule),
    in finish order (ties keep row order). Keys < 0 get nothing."""
    n = len(keys)
    count = np.zeros(n, dtype=np.int64)
    last = np.full((n, k), np.nan)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]) if n else np.zeros(0, int)
    bounds = np.r_[starts, n]
    for a, b in itertools.pairwise(bounds.tolist()):
        if sorted_keys[a] < 0:
            continue
        members = order[a:b]
        by_end = members[np.argsort(finish[members], kind="stable")]
        end_sorted = finish[by_end]
        vals_sorted = values[by_end]
        done = np.searchsorted(end_sorted, submit[members], side="left" if strict else "right")
        count[members] = done
        for back in range(k):
            pos = done - 1 - back
            last[members, back] = np.where(pos >= 0, vals_sorted[np.maximum(pos, 0)], np.nan)
    return Recent(count=count, last=last)


def last_two_mean(recent: Recent) -> FloatArray:
    """Mean of the last two finished values (the one when only one), NaN with none."""
    one, two = recent.last[:, 0], recent.last[:, 1]
    return np.where(np.isnan(two), one, (one + two) / 2.0)


def history_estimate(
    table: JobTable, finish: FloatArray, safety: float, *, strict: bool = True
) -> FloatArray:
    """Tsafrir's system estimate: the mean runtime of the user's last two finished jobs (by
    ``finish``), else of the job's VC, times ``safety``; NaN where neither has a finished job."""
    pred = np.full(len(table), np.nan)
    for keys in (user_keys(table), table.vc.astype(np.int64)):
        recent = recent_finished(keys, table.submit, finish, table.runtime, 2, strict=strict)
        values = last_two_mean(recent)
        pred = np.where(np.isnan(pred), values, pred)
    return pred * safety
