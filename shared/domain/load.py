"""Offered load: how busy a workload would keep a cluster, and rescaling arrivals to a given load.

The one definition of offered load in Hylo (``--load``, ``HYLO_SIM_LOAD``, ``target_load``, the
values stored in cluster presets, the reports). With ``a0``/``a1`` the first and last arrival,
``d_i`` a job's GPU demand (a fractional share counts as its fraction) and ``s_i``/``r_i`` its
submit time and runtime::

    in-span:  sum(d_i x min(r_i, a1 - s_i)) / (capacity x (a1 - a0))

the GPU work each job would do inside the arrival span if it started on arrival: the utilization
the cluster would have over that span with unlimited room. Why this one (issue 18, item 3): the
metrics measure utilization over the same span (``shared.metrics.summarize_window``), so below
saturation the measured utilization follows the load, and queues (``queue_mean``,
``queued_frac``) grow as the load passes what the cluster can pack; the measurements are in
docs/results/offered-load.md.

``capped`` is the definition before it, kept reproducible because checkpoints were trained with
it (a model card without a ``load_definition`` was)::

    capped:   sum(d_i x min(r_i, a1 - a0)) / (capacity x (a1 - a0))

It counts a job that arrives at the end of the span as busy for a whole span, so on a short or
compressed workload (runtimes as long as the span) it counts concurrent demand rather than work:
600 embedded jobs at capped load 0.9 kept the cluster 22% busy over their span, with little queue.

Both fall as the arrivals are stretched, which makes the load reachable by scaling the gaps with
one factor (``arrival_scaling``). The most any workload reaches is the limit of all jobs arriving
at once: under ``in-span`` each job's GPU demand weighted by where it arrives in the span
(``d_i x (a1 - s_i) / (a1 - a0)``), under ``capped`` the demand of all jobs together.
"""

from __future__ import annotations

import math
from typing import Literal, TypeAlias, get_args

import numpy as np

from shared.domain.jobs import FloatArray, JobTable

LoadDefinition: TypeAlias = Literal["in-span", "capped"]
LOAD_DEFINITIONS: tuple[LoadDefinition, ...] = get_args(LoadDefinition)
#: what ``--load`` means unless told otherwise
DEFAULT_LOAD_DEFINITION: LoadDefinition = "in-span"
#: what it meant before issue 18 (and still means for a model card that does not say)
LEGACY_LOAD_DEFINITION: LoadDefinition = "capped"

DESCRIPTIONS: dict[LoadDefinition, str] = {
    "in-span": (
        "sum(gpu demand x min(runtime, last submit - submit)) / (capacity x (last submit - first "
        "submit)): the utilization over the arrival span if every job started on arrival"
    ),
    "capped": (
        "sum(gpu demand x min(runtime, span)) / (capacity x span), span = last submit - first "
        "submit (the definition before issue 18)"
    ),
}

# the factors arrival_scaling searches between (load(_LO) is the highest load, load(_HI) the lowest)
_LO, _HI = 1e-9, 1e9


def check_definition(definition: str) -> LoadDefinition:
    """``definition`` as a ``LoadDefinition``; a ValueError naming the choices otherwise."""
    for d in LOAD_DEFINITIONS:
        if definition == d:
            return d
    raise ValueError(f"unknown load definition {definition!r}; choose from {', '.join(LOAD_DEFINITIONS)}")


class LoadOutOfReach(ValueError):
    """A target load above what any rescaling of the arrivals reaches; says which loads are
    reachable and how to ask for one (``--load`` on the command line, ``HYLO_SIM_LOAD`` for the
    simulated cluster). Every load between 0 and ``highest`` is."""

    def __init__(self, target: float, highest: float, capacity_gpus: float, definition: str) -> None:
        self.target, self.highest = target, highest
        #: ``highest`` rounded down to 3 significant digits: the most a user can ask for and get
        self.most = _floor3(highest)
        why = (
            "the limit as all its jobs arrive at once: each job's GPU demand weighted by where it "
            "arrives in the span"
            if definition == "in-span"
            else "the GPU demand of all its jobs at once"
        )
        most = self.most
        super().__init__(
            f"offered load {target:g} is out of reach for this workload on {capacity_gpus:g} GPUs "
            f"({definition} definition): reachable loads are up to {most} ({why}); pass --load "
            f"(HYLO_SIM_LOAD for the simulated cluster) of at most {most}, or a workload with more jobs"
        )


#: relative slack of the reach check: a load printed as reachable (rounded down) must pass it
_SLACK = 1e-9


def _floor3(x: float) -> str:
    """``x`` rounded down to 3 significant digits: a value the user can pass and reach."""
    if x <= 0 or not math.isfinite(x):
        return f"{x:.3g}"
    scale = 10 ** (math.floor(math.log10(x)) - 2)
    return f"{math.floor(x / scale * (1 + _SLACK)) * scale:.3g}"


def load_over(table: JobTable, capacity_gpus: float, t0: float, t1: float) -> float:
    """The mean busy share of ``capacity_gpus`` over ``[t0, t1]`` if every job of ``table`` started
    on arrival and ran its runtime: ``sum(d_i x |[s_i, s_i + r_i] & [t0, t1]|) / (capacity x (t1 -
    t0))``. Over a workload's own arrival span this is its ``in-span`` load; over a window's span
    (jobs before the window included) it is the load to read beside that window's utilization.

    0 for an empty interval or no capacity."""
    return _busy_share(table.submit, table.runtime, table.gpu_demand, capacity_gpus, t0, t1)


def _busy_share(
    submit: FloatArray, runtime: FloatArray, demand: FloatArray, capacity_gpus: float, t0: float, t1: float
) -> float:
    """``load_over`` on the arrays (arrival_scaling's bisection calls it without building tables)."""
    if t1 <= t0 or capacity_gpus <= 0 or len(submit) == 0:
        return 0.0
    inside = np.minimum(submit + runtime, t1) - np.maximum(submit, t0)
    work = float(np.sum(demand * np.clip(inside, 0.0, None)))
    return work / (capacity_gpus * (t1 - t0))


def load_at_scale(
    table: JobTable, capacity_gpus: float, factor: float, definition: LoadDefinition = DEFAULT_LOAD_DEFINITION
) -> float:
    """The offered load of ``table`` with every gap between arrivals multiplied by ``factor``.

    0 for fewer than two jobs, no capacity or no arrival span (nothing to average over)."""
    if len(table) < 2 or capacity_gpus <= 0:
        return 0.0
    a0, a1 = float(table.submit.min()), float(table.submit.max())
    span = (a1 - a0) * factor
    if span <= 0:
        return 0.0
    if definition == "in-span":
        scaled = a0 + (table.submit - a0) * factor
        return _busy_share(scaled, table.runtime, table.gpu_demand, capacity_gpus, a0, a0 + span)
    work = float(np.sum(table.gpu_demand * np.minimum(table.runtime, span)))
    return work / (capacity_gpus * span)


def offered_load(
    table: JobTable, capacity_gpus: float, definition: LoadDefinition = DEFAULT_LOAD_DEFINITION
) -> float:
    """The offered load of ``table`` on ``capacity_gpus`` GPUs at its own arrival times."""
    return load_at_scale(table, capacity_gpus, 1.0, definition)


def reachable_loads(
    table: JobTable, capacity_gpus: float, definition: LoadDefinition = DEFAULT_LOAD_DEFINITION
) -> tuple[float, float]:
    """(lowest, highest) load that rescaling the arrivals of ``table`` can give: the limits as the
    gaps grow without end (0) and as they shrink to nothing (every job arrives at once). The
    highest is the exact limit, so that a load printed as reachable is."""
    if len(table) < 2 or capacity_gpus <= 0:
        return 0.0, 0.0
    a0, a1 = float(table.submit.min()), float(table.submit.max())
    if a1 <= a0:
        return 0.0, 0.0
    working = table.gpu_demand * (table.runtime > 0)
    if definition == "in-span":  # each job counts its demand x its place before the last arrival
        return 0.0, float(np.sum(working * (a1 - table.submit))) / (capacity_gpus * (a1 - a0))
    return 0.0, float(np.sum(working)) / capacity_gpus


def arrival_scaling(
    table: JobTable,
    capacity_gpus: float,
    target_load: float,
    definition: LoadDefinition = DEFAULT_LOAD_DEFINITION,
) -> tuple[float, float]:
    """``(origin, factor)``: submit ``t`` becomes ``origin + (t - origin) x factor`` (origin the
    first submit) and the workload then offers ``target_load`` under ``definition``.

    Every gap is scaled by one factor (found by bisection; both definitions fall as the span
    grows), so arrival order, bursts (relative gaps), requests and runtimes are kept. Raises
    ``LoadOutOfReach`` (a ValueError) naming the reachable loads when none gives the target.
    """
    definition = check_definition(definition)
    if target_load <= 0:
        raise ValueError(f"target load must be > 0, got {target_load}")
    no_span = len(table) < 2 or float(table.submit.max()) <= float(table.submit.min())
    if no_span or capacity_gpus <= 0 or float(np.sum(table.gpu_demand * table.runtime)) <= 0:
        raise ValueError("the workload has no arrival span or no GPU work: its load cannot be rescaled")

    def load(factor: float) -> float:
        return load_at_scale(table, capacity_gpus, factor, definition)

    _, highest = reachable_loads(table, capacity_gpus, definition)
    if target_load > highest * (1 + _SLACK):
        raise LoadOutOfReach(target_load, highest, capacity_gpus, definition)
    lo, hi = _LO, _HI
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if load(mid) > target_load:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return float(table.submit.min()), math.sqrt(lo * hi)
