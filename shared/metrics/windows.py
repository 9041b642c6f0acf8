"""Evaluation windows: contiguous ranges of job indices (jobs are sorted by submit time).

Why windows of consecutive jobs: RLTune-style evaluation simulates many short, independent slices
of a trace and compares policies on the *same* slices, which gives one paired sample per window
for the bootstrap (``shared.metrics.bootstrap``). Splitting train/test chronologically keeps a
learned policy from being tested on jobs that arrived before the ones it trained on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from shared.domain.exclusions import Exclusion, count_between
from shared.domain.jobs import FloatArray, IntArray


@dataclass(frozen=True, order=True)
class Window:
    """Jobs ``start .. start + size - 1`` of a submit-sorted job table."""

    start: int
    size: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"window start must be >= 0, got {self.start}")
        if self.size < 1:
            raise ValueError(f"window size must be >= 1, got {self.size}")

    @property
    def stop(self) -> int:
        """One past the last job index (Python slice convention)."""
        return self.start + self.size

    @property
    def range(self) -> range:
        return range(self.start, self.stop)

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)

    def indices(self) -> IntArray:
        return np.arange(self.start, self.stop, dtype=np.int64)

    @property
    def label(self) -> str:
        """Stable name used to check that policies are compared on the same windows."""
        return f"jobs[{self.start}:{self.stop}]"


def chronological_split(n_jobs: int, train_fraction: float = 0.9) -> tuple[range, range]:
    """Split job indices ``0..n_jobs-1`` into an earlier train range and a later test range.

    The train part holds ``floor(n_jobs * train_fraction)`` jobs (with a tiny tolerance so that
    e.g. 10 * 0.7 gives 7, not 6, despite floating point); both parts must be non-empty.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction}")
    if n_jobs < 2:
        raise ValueError(f"cannot split {n_jobs} job(s) into non-empty train and test ranges")
    n_train = math.floor(n_jobs * train_fraction + 1e-9)
    if n_train < 1 or n_train >= n_jobs:
        raise ValueError(
            f"train_fraction={train_fraction} leaves an empty train or test range for {n_jobs} jobs "
            f"(train would hold {n_train})"
        )
    return range(n_train), range(n_train, n_jobs)


def make_windows(jobs: range, size: int, count: int, seed: int = 0, overlap: bool = False) -> list[Window]:
    """Choose up to ``count`` windows of ``size`` consecutive jobs inside ``jobs``, sorted by start.

    Without overlap the range is cut into consecutive slots ``jobs.start + k * size`` and, when
    there are more slots than ``count``, a seeded RNG picks which ones, so the sample spreads over
    the whole range instead of favouring its beginning. With ``overlap=True`` any start offset is
    allowed (distinct starts, still seeded). When fewer windows fit than ``count``, all of them are
    returned: check ``len()`` if an exact count matters.
    """
    if jobs.step != 1:
        raise ValueError(f"job range must have step 1, got {jobs!r}")
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    if count < 1:
        raise ValueError(f"window count must be >= 1, got {count}")
    n = len(jobs)
    if n < size:
        raise ValueError(
            f"job range {jobs.start}..{jobs.stop - 1} holds {n} jobs, fewer than one window of {size}"
        )
    n_candidates = n - size + 1 if overlap else n // size
    step = 1 if overlap else size
    rng = np.random.default_rng(seed)
    if n_candidates > count:
        chosen = np.sort(rng.choice(n_candidates, size=count, replace=False))
    else:
        chosen = np.arange(n_candidates)
    return [Window(start=jobs.start + int(k) * step, size=size) for k in chosen]


def excluded_in_window(exclusions: Iterable[Exclusion], submit: FloatArray, window: Window) -> int:
    """How many jobs of ``window`` were left out at load or binding time.

    A window of the kept jobs ``start .. stop - 1`` (``submit`` their submit times, sorted) owns
    the left-out jobs submitted in ``[submit[start], submit[stop])``: from its first arrival up to
    the next window's, the first window from the beginning of time and the last to its end. So
    consecutive windows share no left-out job and windows covering the whole trace count every one
    exactly once: summed over windows the counts add up, where the trace's total given to every
    window multiplied it by their number. Left-out jobs with unknown submit times belong to no
    window.
    """
    n = len(submit)
    if window.start >= n:
        raise IndexError(f"window {window.label} starts past the {n} jobs")
    lo = -math.inf if window.start == 0 else float(submit[window.start])
    hi = math.inf if window.stop >= n else float(submit[window.stop])
    return count_between(exclusions, lo, hi)
