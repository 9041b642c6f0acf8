"""Policy evaluation on windows: the library behind ``hylo simulate`` and the benchmarks.

Two ways to get a window's metrics, both warm (the cluster is busy when the window starts):
- ``warmup=None`` (default): simulate the trace once per policy, from its first job to the end of
  the last window plus a tail of later arrivals, and score each window's jobs on that one run.
  Windows then see exactly the contention the trace produces, and a policy costs one simulation.
- ``warmup=K``: simulate each window separately with the K jobs before it as warm-up (K = 0 is
  the reference code's cold start, kept to reproduce the paper's setting).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.domain.cluster import ClusterSpec, load_cluster_spec
from shared.domain.jobs import JobTable
from shared.domain.load import DEFAULT_LOAD_DEFINITION, LoadDefinition, arrival_scaling, load_over
from shared.metrics import Window, WindowMetrics, excluded_in_window, summarize_window
from shared.policies import make_policy
from shared.policies.base import Policy
from shared.scheduling.binding import BoundWorkload, Exclusion, bind_jobs
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator

# Default cluster of each named trace.
DEFAULT_CLUSTER = {
    "philly": "philly",
    "openb": "alibaba-openb",
    "openb-default": "alibaba-openb",
    "openb-gpuspec33": "alibaba-openb",
    "rltune-synthetic": "rltune-synthetic",
    "hpc2n": "hpc2n",
    "slurm-256": "slurm-testbed",
}
EMBEDDED = "embedded"


@dataclass
class PreparedWorkload:
    """A workload bound to its cluster, with every exclusion (load time and binding) on record."""

    name: str
    bound: BoundWorkload
    exclusions: list[Exclusion] = field(default_factory=list)

    @property
    def spec(self) -> ClusterSpec:
        return self.bound.spec

    @property
    def excluded_count(self) -> int:
        """Every job left out, trace-wide (load time and binding)."""
        return sum(e.count for e in self.exclusions)

    def excluded_in(self, window: Window) -> int:
        """The jobs of ``window`` left out at load or binding time (``excluded_in_window``)."""
        return excluded_in_window(self.exclusions, self.bound.jobs.submit, window)


def prepare_workload(
    trace: str | None,
    cluster: str | None,
    *,
    n_jobs: int = 20_000,
    seed: int = 0,
    estimates: str = "noisy",
    node_slack: int = 0,
    target_load: float | None = None,
    load_definition: LoadDefinition = DEFAULT_LOAD_DEFINITION,
    predictions: bool = False,
) -> PreparedWorkload:
    """Load a trace (or generate the embedded workload), fill estimates, bind it to a cluster.

    ``predictions`` attaches the runtime predictor's predictions (``attach_predictions``; always
    with ``estimates="predicted"``), computed on the trace as loaded, before the estimate model
    fills anything in: predictor-based policies (``needs_predictions``) need them.

    ``target_load`` rescales the arrival times (see ``rescale_arrivals``) so that the workload
    offers that load to the cluster under ``load_definition`` (``shared.domain.load``): a
    generated slice or a trace at its own pace may hardly queue, so studies compress them.
    """
    from shared.traces import apply_estimates, load_trace
    from shared.workload import generate_for_cluster

    exclusions: list[Exclusion] = []
    if trace is None or trace == EMBEDDED:
        spec = load_cluster_spec(cluster or EMBEDDED)
        table: JobTable = generate_for_cluster(spec, n_jobs, seed)
        name = f"generated ({n_jobs:,} jobs, seed {seed})"
    else:
        loaded = load_trace(trace)
        table = loaded.table
        exclusions.extend(loaded.exclusions)
        cluster_name = cluster or DEFAULT_CLUSTER.get(trace)
        if cluster_name is None:
            raise ValueError(
                f"trace {trace!r} has no default cluster: pass --cluster (a preset or a spec file)"
            )
        spec = load_cluster_spec(cluster_name)
        name = table.meta.name
    if predictions or estimates == "predicted":
        from shared.prediction import PredictorSettings, attach_predictions

        table = attach_predictions(table, PredictorSettings(seed=seed))
    if estimates != "trace":
        table = apply_estimates(table, "noisy" if estimates == "oracle" else estimates, seed)
    if target_load is not None:
        origin, factor = arrival_scaling(table, spec.total_gpus, target_load, load_definition)
        table = table.with_fields(submit=origin + (table.submit - origin) * factor)
        # the left-out jobs move with the kept ones, so that each window still counts its own
        exclusions = [e.rescaled(origin, factor) for e in exclusions]
        name = f"{name}, arrivals rescaled to offered load {target_load:g}" + (
            "" if load_definition == DEFAULT_LOAD_DEFINITION else f" ({load_definition})"
        )
    bound = bind_jobs(table, spec, node_slack=node_slack)
    exclusions.extend(bound.exclusions)
    return PreparedWorkload(name=name, bound=bound, exclusions=exclusions)


def rescale_arrivals(
    table: JobTable,
    capacity_gpus: float,
    target_load: float,
    definition: LoadDefinition = DEFAULT_LOAD_DEFINITION,
) -> JobTable:
    """Stretch or compress the gaps between arrivals so the trace offers ``target_load``.

    Offered load is defined once, in ``shared.domain.load`` (``in-span`` by default: the
    utilization over the arrival span if every job started on arrival; ``capped``, the
    definition before issue 18, for models trained with it). Every gap is scaled by one factor,
    so arrival order, burst structure (relative gaps), requests and runtimes are all kept.
    """
    origin, factor = arrival_scaling(table, capacity_gpus, target_load, definition)
    return table.with_fields(submit=origin + (table.submit - origin) * factor)


def window_offered_loads(
    workload: PreparedWorkload, windows: Sequence[Window], *, warmup: int | None = None
) -> list[float]:
    """Per window, the offered load over its span (first to last arrival of its jobs): the
    utilization the cluster would have there if every job simulated with it started on arrival
    (``shared.domain.load.load_over``), to read beside the window's measured utilization.

    The jobs counted are those ``evaluate_policies`` simulates with the window: every earlier job
    (one run), or the ``warmup`` jobs before it."""
    jobs = workload.bound.jobs
    capacity = workload.spec.total_gpus
    out = []
    for w in windows:
        first = 0 if warmup is None else max(0, w.start - warmup)
        t0, t1 = float(jobs.submit[w.start]), float(jobs.submit[w.stop - 1])
        out.append(load_over(jobs.take(np.arange(first, w.stop)), capacity, t0, t1))
    return out


ProgressHook = Callable[[str, int], None]
#: builds a policy given the time from which it decides (before it, its base policy does)
PolicyFactory = Callable[[float], Policy]


def evaluate_policies(
    workload: PreparedWorkload,
    policies: Sequence[str],
    config: SimConfig,
    windows: Sequence[Window],
    *,
    warmup: int | None = None,
    progress: ProgressHook | None = None,
    factories: Mapping[str, PolicyFactory] | None = None,
) -> tuple[dict[str, list[WindowMetrics]], dict[str, list[SimResult]]]:
    """Metrics of every policy on the same windows (paired), and the simulation runs behind them.

    ``progress(policy, n_done_windows)`` is called as windows complete. A name found in
    ``factories`` is built by its factory (e.g. a trained prioritizer), called with the time from
    which the policy decides (the window's first submit when windows are warmed up, else -inf);
    every other name is a base policy.
    """
    factories = factories or {}

    def build(name: str, decides_from: float) -> Policy:
        factory = factories.get(name)
        return factory(decides_from) if factory is not None else make_policy(name)

    if not windows:
        raise ValueError("no evaluation windows")
    bound = workload.bound
    n = len(bound.jobs)
    out: dict[str, list[WindowMetrics]] = {}
    runs: dict[str, list[SimResult]] = {}
    for name in policies:
        metrics: list[WindowMetrics] = []
        results: list[SimResult] = []
        if warmup is None:
            last = max(w.stop for w in windows)
            tail = max(w.size for w in windows)
            sim = Simulator(bound, build(name, -math.inf), config)
            result = sim.run(job_range=(0, min(n, last + tail)))
            results.append(result)
            for k, w in enumerate(windows):
                metrics.append(
                    summarize_window(
                        result, w, excluded=workload.excluded_in(w), respect_metric_mask=False, label=w.label
                    )
                )
                if progress:
                    progress(name, k + 1)
        else:
            for k, w in enumerate(windows):
                sim = Simulator(bound, build(name, float(bound.jobs.submit[w.start])), config)
                result = sim.run(job_range=(max(0, w.start - warmup), w.stop), metric_range=(w.start, w.stop))
                results.append(result)
                metrics.append(summarize_window(result, w, excluded=workload.excluded_in(w), label=w.label))
                if progress:
                    progress(name, k + 1)
        out[name] = [m.model_copy(update={"policy": name}) for m in metrics]
        runs[name] = results
    return out, runs
