"""One evaluation window of one simulation boiled down to a JSON-serializable summary.

Why a pydantic model: window summaries are written to disk by the evaluation runs and read back by
the report, possibly by another process; the model validates them on the way in and serializes
NaN (a statistic with no data, e.g. JCT when no job finished) as JSON ``null``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, TypeAlias

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from shared.domain.jobs import FloatArray, IntArray
from shared.metrics.per_job import DEFAULT_BSLD_BOUND_S, JobMetrics, job_metrics
from shared.metrics.timeline import busy_gpu_seconds, idle_gpu_seconds_while_waiting, mean_over
from shared.metrics.windows import Window
from shared.scheduling.result import SimResult

JobSelection: TypeAlias = Window | range | slice | npt.NDArray[Any] | list[int] | list[bool]

PERCENTILES = (50.0, 95.0, 99.0)


def _none_to_nan(value: Any) -> Any:
    return float("nan") if value is None else value


#: a float that JSON's ``null`` (how NaN is written) reads back as NaN
NanFloat = Annotated[float, BeforeValidator(_none_to_nan)]


class DistStats(BaseModel):
    """Mean and tail percentiles of one per-job metric over the jobs that have a value.

    ``n`` says how many jobs that is, so a mean over 3 finished jobs out of 100 is visible as such.
    Percentiles use linear interpolation (numpy's default).
    """

    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p95: float
    p99: float
    n: int

    @classmethod
    def of(cls, values: FloatArray) -> DistStats:
        finite = values[~np.isnan(values)]
        if len(finite) == 0:
            nan = float("nan")
            return cls(mean=nan, p50=nan, p95=nan, p99=nan, n=0)
        p50, p95, p99 = (float(p) for p in np.percentile(finite, PERCENTILES))
        return cls(mean=float(finite.mean()), p50=p50, p95=p95, p99=p99, n=len(finite))


class WindowMetrics(BaseModel):
    """Scheduling quality of one window of jobs under one policy.

    Times in seconds, energy-like quantities in GPU-hours. ``wait_s`` is over started jobs,
    ``jct_s``/``bsld`` over finished jobs; ``n_unstarted``/``n_unfinished`` count the rest.
    ``excluded`` is carried through from the caller: the window's own jobs dropped at load or
    binding time (e.g. because no node could ever fit them, ``excluded_in_window``), so the report
    can say how many jobs the numbers do not cover and the sum over windows is a count of jobs.
    ``job_waits_s`` keeps the per-job waits (NaN = never started) for CDF plots; it is left out of
    JSON to keep files small.

    Two intervals (``summarize_window``): the window's life ``[t0_s, t1_s]`` (first arrival to last
    end: ``makespan_s``, ``busy_gpu_hours``, ``idle_gpu_hours_while_waiting``) and the window's own
    span ``[t0_s, last_arrival_s]`` (first to last arrival), over which the shares and means are
    time averages: ``utilization``, ``idle_frac_while_waiting``, ``queue_mean`` (jobs waiting,
    the window's or not) and ``queued_frac`` (share of the span with a non-empty queue). The last
    three default to NaN in summaries written before they existed.
    """

    model_config = ConfigDict(frozen=True)

    label: str = ""
    policy: str = ""
    n_jobs: int
    n_unstarted: int
    n_unfinished: int
    n_masked: int = 0
    excluded: int = 0
    capacity_gpus: float
    bsld_bound_s: float
    t0_s: float
    t1_s: float
    makespan_s: float
    wait_s: DistStats
    jct_s: DistStats
    bsld: DistStats
    last_arrival_s: NanFloat = float("nan")
    busy_gpu_hours: float
    utilization: float
    idle_gpu_hours_while_waiting: float
    idle_frac_while_waiting: float
    queue_mean: NanFloat = float("nan")
    queued_frac: NanFloat = float("nan")
    job_waits_s: tuple[float, ...] = Field(default=(), exclude=True, repr=False)

    def to_json_dict(self) -> dict[str, Any]:
        """Plain dict that ``json.dumps`` writes as strict JSON (NaN becomes null)."""
        out: dict[str, Any] = json.loads(self.model_dump_json())
        return out


def selection_index(selection: JobSelection, n_jobs: int) -> IntArray:
    """Turn a window, range, slice, boolean mask or index list into sorted unique job indices."""
    if isinstance(selection, Window):
        selection = selection.range
    if isinstance(selection, range | slice):
        rng = selection if isinstance(selection, range) else range(n_jobs)[selection]
        if len(rng) and (min(rng) < 0 or max(rng) >= n_jobs):
            raise IndexError(f"job range {rng} is out of bounds for a result with {n_jobs} jobs")
        return np.unique(np.asarray(rng, dtype=np.int64))
    arr = np.asarray(selection)
    if arr.dtype == np.bool_:
        if arr.shape != (n_jobs,):
            raise ValueError(f"boolean job mask has shape {arr.shape}, expected ({n_jobs},)")
        return np.flatnonzero(arr).astype(np.int64)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"job selection must be integer indices or a boolean mask, got {arr.dtype}")
    idx = np.unique(arr.astype(np.int64))
    if idx[0] < 0 or idx[-1] >= n_jobs:
        raise IndexError(f"job indices out of bounds for a result with {n_jobs} jobs")
    return idx


@dataclass(frozen=True)
class _WindowCore:
    """What ``summarize_window`` computes before its percentiles and its model: the selected jobs'
    metrics, the two intervals (life ``[t0, t1]``, own span ``[t0, a1]``) and the timeline's
    integrals and averages over them."""

    jm: JobMetrics
    n_masked: int
    t0: float
    t1: float
    a1: float
    busy: float  # GPU-seconds over [t0, t1]
    idle_waiting: float  # GPU-seconds over [t0, t1]
    capacity: float
    span_busy: float  # mean busy GPUs over [t0, a1]
    span_idle_waiting: float  # mean GPUs idle while a job waits over [t0, a1]
    span_queue: float  # mean queued jobs over [t0, a1]
    span_queued: float  # share of [t0, a1] with a job waiting

    @property
    def denom(self) -> float:
        return self.capacity * (self.t1 - self.t0)

    @property
    def utilization(self) -> float:
        return self.span_busy / self.capacity if self.capacity > 0 else float("nan")


def _window_core(
    result: SimResult, selection: JobSelection, bsld_bound: float, respect_metric_mask: bool
) -> _WindowCore:
    n_total = len(result.jobs)
    idx = selection_index(selection, n_total)
    n_masked = 0
    if respect_metric_mask:
        keep = np.asarray(result.metric_mask, dtype=bool)[idx]
        n_masked = int(np.count_nonzero(~keep))
        idx = idx[keep]
    if len(idx) == 0:
        raise ValueError("window selects no scored jobs (empty selection or all masked out)")
    jm = job_metrics(result, idx, bsld_bound=bsld_bound)
    t0 = float(jm.submit.min())
    a1 = float(jm.submit.max())
    t1 = float(np.nanmax(result.end[idx])) if jm.finished.any() else t0
    if jm.n_unfinished and len(result.timeline_t):
        t1 = max(t1, float(result.timeline_t[-1]))
    capacity = float(result.capacity_gpus)
    t, busy_steps, queued = result.timeline_t, result.timeline_busy, result.timeline_queued
    busy = busy_gpu_seconds(t, busy_steps, t0, t1)
    idle_waiting = idle_gpu_seconds_while_waiting(t, busy_steps, queued, capacity, t0, t1)
    waiting = np.asarray(queued) > 0
    idle_steps = np.where(waiting, capacity - np.asarray(busy_steps, dtype=np.float64), 0.0)
    return _WindowCore(
        jm,
        n_masked,
        t0,
        t1,
        a1,
        busy,
        idle_waiting,
        capacity,
        span_busy=mean_over(t, busy_steps, t0, a1),
        span_idle_waiting=mean_over(t, idle_steps, t0, a1),
        span_queue=mean_over(t, queued, t0, a1),
        span_queued=mean_over(t, waiting, t0, a1),
    )


def _finite_mean(values: FloatArray) -> float:
    """``DistStats.of(values).mean``, without the percentiles."""
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def window_means(
    result: SimResult,
    selection: JobSelection,
    *,
    bsld_bound: float = DEFAULT_BSLD_BOUND_S,
    respect_metric_mask: bool = True,
) -> dict[str, float]:
    """The means and the utilization of ``summarize_window``'s summary (``wait_s.mean``,
    ``jct_s.mean``, ``bsld.mean``, ``utilization``, under the keys "wait", "jct", "bsld",
    "utilization"), the same floats from the same code, without the percentiles and the model.

    Why: a training episode needs only the reward's score of its window, and on Philly's trace
    the whole summary (three sorts for the percentiles, the pydantic model with the per-job waits)
    cost about a third of a millisecond an episode, which the ~20 decisions of a paper-setting
    episode shared."""
    core = _window_core(result, selection, bsld_bound, respect_metric_mask)
    return {
        "wait": _finite_mean(core.jm.wait),
        "jct": _finite_mean(core.jm.jct),
        "bsld": _finite_mean(core.jm.bsld),
        "utilization": core.utilization,
    }


def summarize_window(
    result: SimResult,
    selection: JobSelection,
    *,
    excluded: int = 0,
    bsld_bound: float = DEFAULT_BSLD_BOUND_S,
    respect_metric_mask: bool = True,
    label: str | None = None,
) -> WindowMetrics:
    """Summarize the selected jobs of ``result``.

    ``t0`` is the first submit of the window's jobs. Two intervals start there:

    - the window's own span ``[t0, a1]``, ``a1`` the last submit of its jobs. Utilization (busy
      GPUs over capacity), the idle share while jobs wait, the mean queue length and the share of
      time with a non-empty queue are time averages of the whole cluster's timeline over it (jobs
      from outside the window occupy GPUs and wait too, and a policy should get credit for keeping
      them busy). The span is the same for every policy, ends where the window's arrivals end (not
      at its longest job's end, which on traces with month-long jobs made every window overlap its
      successors and a loaded cluster look idle), and windows of consecutive jobs tile the trace's
      arrival span. A span of length 0 (one job, or all arriving at once) gives the values of the
      timeline step in force at ``t0``.
    - the window's life ``[t0, t1]``, ``t1`` the last end of its jobs, or the end of the recorded
      timeline when some never finished (the run was cut off, so the window's work lasted at least
      that long): the makespan, and the totals, busy GPU-hours and idle GPU-hours while jobs wait
      (the idle cost of the window's whole life, its queue's drain included).

    Jobs outside ``result.metric_mask`` (warm-up) are dropped from the selection and counted in
    ``n_masked`` unless ``respect_metric_mask`` is False.
    """
    if excluded < 0:
        raise ValueError(f"excluded must be >= 0, got {excluded}")
    core = _window_core(result, selection, bsld_bound, respect_metric_mask)
    if label is None:
        label = selection.label if isinstance(selection, Window) else ""
    jm, t0, t1, busy, idle_waiting = core.jm, core.t0, core.t1, core.busy, core.idle_waiting
    capacity = core.capacity
    idle_frac = core.span_idle_waiting / capacity if capacity > 0 else float("nan")

    return WindowMetrics(
        label=label,
        policy=result.policy,
        n_jobs=len(jm),
        n_unstarted=jm.n_unstarted,
        n_unfinished=jm.n_unfinished,
        n_masked=core.n_masked,
        excluded=excluded,
        capacity_gpus=capacity,
        bsld_bound_s=bsld_bound,
        t0_s=t0,
        t1_s=t1,
        makespan_s=t1 - t0,
        last_arrival_s=core.a1,
        wait_s=DistStats.of(jm.wait),
        jct_s=DistStats.of(jm.jct),
        bsld=DistStats.of(jm.bsld),
        busy_gpu_hours=busy / 3600.0,
        utilization=core.utilization,
        idle_gpu_hours_while_waiting=idle_waiting / 3600.0,
        idle_frac_while_waiting=idle_frac,
        queue_mean=core.span_queue,
        queued_frac=core.span_queued,
        job_waits_s=tuple(jm.wait.tolist()),
    )
