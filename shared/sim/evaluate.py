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
) -> PreparedWorkload:
    """Load a trace (or generate the embedded workload), fill estimates, bind it to a cluster.

    ``target_load`` rescales the arrival times (see ``rescale_arrivals``) so that the workload
    offers that load to the cluster: the openb pods replayed at their own timestamps keep 0.2% of
    the 1,213-node cluster busy, and nothing queues, so placement studies compress them.
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
    if estimates != "trace":
        table = apply_estimates(table, "noisy" if estimates == "oracle" else estimates, seed)
    if target_load is not None:
        origin, factor = arrival_scaling(table, spec.total_gpus, target_load)
        table = table.with_fields(submit=origin + (table.submit - origin) * factor)
        # the left-out jobs move with the kept ones, so that each window still counts its own
        exclusions = [e.rescaled(origin, factor) for e in exclusions]
        name = f"{name}, arrivals rescaled to offered load {target_load:g}"
    bound = bind_jobs(table, spec, node_slack=node_slack)
    exclusions.extend(bound.exclusions)
    return PreparedWorkload(name=name, bound=bound, exclusions=exclusions)


def rescale_arrivals(table: JobTable, capacity_gpus: float, target_load: float) -> JobTable:
    """Stretch or compress the gaps between arrivals so the trace offers ``target_load``.

    Offered load here is work over (capacity x arrival span) with every runtime capped at the
    span: in the openb trace 100 pods that run for months hold 93% of the GPU-seconds, and without
    the cap compressing arrivals would only pile short jobs behind them in a few minutes. Every
    gap is scaled by one factor (found by bisection; the capped load falls as the span grows), so
    arrival order, burst structure (relative gaps), requests and runtimes are all kept.
    """
    origin, factor = arrival_scaling(table, capacity_gpus, target_load)
    return table.with_fields(submit=origin + (table.submit - origin) * factor)


def arrival_scaling(table: JobTable, capacity_gpus: float, target_load: float) -> tuple[float, float]:
    """``(origin, factor)`` of ``rescale_arrivals``: submit ``t`` becomes ``origin + (t - origin) x
    factor``, origin being the first submit.

    The reachable loads are bounded: as the span shrinks to nothing every runtime outlasts it and
    the load tends to the GPU demand of all jobs at once over the capacity (0.88 for the openb pod
    lists on their cluster, so 0.9 is out of reach there); the error says which loads are.
    """
    if target_load <= 0:
        raise ValueError(f"target load must be > 0, got {target_load}")
    t0 = float(table.submit.min()) if len(table) else 0.0
    span = float(table.submit.max()) - t0 if len(table) else 0.0
    work = table.gpu_demand
    if span <= 0 or capacity_gpus <= 0 or float(np.sum(work * table.runtime)) <= 0:
        raise ValueError("the workload has no arrival span or no GPU work: its load cannot be rescaled")

    def load(factor: float) -> float:
        s = span * factor
        return float(np.sum(work * np.minimum(table.runtime, s))) / (capacity_gpus * s)

    lo, hi = 1e-9, 1e9  # factors: load(lo) is highest, load(hi) lowest
    top, bottom = load(lo), load(hi)
    if target_load > top:
        raise ValueError(
            f"target load {target_load} is out of reach for this workload: at most {top:.3g} on "
            f"{capacity_gpus:g} GPUs, the GPU demand of all its jobs at once"
        )
    if target_load < bottom:
        raise ValueError(
            f"target load {target_load} is out of reach for this workload: at least {bottom:.3g}"
        )
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if load(mid) > target_load:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return t0, math.sqrt(lo * hi)


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
