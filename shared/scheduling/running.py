# mypy: disable-error-code="misc"
"""Running jobs as three arrays (job, group, estimated end) sorted by estimated end, ties in the
order the jobs started: the layout of the feature views' running jobs
(``shared.features.sim_views.RunningJobs``), kept by the same two compiled functions there and in
the simulator's compiled core (which keeps it for a learned policy, so that the policy reads it
instead of being told of every start and end)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def running_insert(
    job: np.ndarray, group: np.ndarray, end: np.ndarray, n: int, j: int, g: int, e: float
) -> None:  # pragma: no cover - compiled
    """Insert (j, g, e) into the first ``n`` entries of the arrays, kept sorted by ``end``: after
    the entries with an end <= e (``searchsorted(end[:n], e, "right")``)."""
    k = np.searchsorted(end[:n], e, side="right")
    for i in range(n, k, -1):
        job[i] = job[i - 1]
        group[i] = group[i - 1]
        end[i] = end[i - 1]
    job[k] = j
    group[k] = g
    end[k] = e


@njit(cache=True)
def running_remove(
    job: np.ndarray, group: np.ndarray, end: np.ndarray, n: int, j: int, e: float
) -> None:  # pragma: no cover - compiled
    """Remove job ``j`` (its end ``e``) from the first ``n`` entries, keeping the others' order."""
    k = np.searchsorted(end[:n], e)
    while job[k] != j:  # past other jobs with the same end
        k += 1
    for i in range(k, n - 1):
        job[i] = job[i + 1]
        group[i] = group[i + 1]
        end[i] = end[i + 1]
