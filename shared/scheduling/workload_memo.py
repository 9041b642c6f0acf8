"""Values derived from a bound workload, computed once and kept as long as the workload lives.

Why: a training run or an evaluation simulates windows of one workload thousands of times, and
several per-job derivations (the Python loop's columns as lists, the compiled core's layout, the
groups that track GPU shares) cost milliseconds on Philly's 82,247 jobs, every run. A value is
rebuilt if the workload's jobs, shapes or classes were replaced (tests do that), and dropped with
the workload.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from shared.scheduling.binding import BoundWorkload

T = TypeVar("T")

#: (id(workload), name) -> (its jobs, shapes and classes when built, the value)
_MEMO: dict[tuple[int, str], tuple[object, object, object, Any]] = {}


def per_workload(w: BoundWorkload, name: str, build: Callable[[], T]) -> T:
    """The value ``build()`` gave for ``w`` under ``name`` (a name per kind of value and per
    setting it depends on), built on first use."""
    key = (id(w), name)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is w.jobs and hit[1] is w.shape and hit[2] is w.job_class:
        value: T = hit[3]
        return value
    if hit is None:
        weakref.finalize(w, _MEMO.pop, key, None)
    value = build()
    _MEMO[key] = (w.jobs, w.shape, w.job_class, value)
    return value
