"""All features of one scheduling decision, vectorized over the whole queue.

Every per-job value is normalized by the capacity of the job's *eligible pool* (the node groups it
may run on), so that a 1-GPU job on a 32-GPU pool and on a 4,000-GPU pool are told apart, and none
is normalized twice (the reference code divided its demand/supply ratio by capacity a second time,
which made it ~0 everywhere). Every value lies in [0, 1]; the formulas, and why each one, are in
``docs/features.md``. The only loops are over node groups (a handful), never over jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.features.catalog import (
    CLUSTER_FEATURES,
    DEFAULT_FEATURE_SET,
    JOB_FEATURES,
    FeatureConfig,
    FeatureSet,
    cluster_index,
    feature_set,
    job_index,
)
from shared.features.views import BoolArray, ClusterView, FloatArray, QueueView
from shared.features.ways import Ways, distinct_requests, placement_ways

__all__ = [
    "MISSING_BAND",
    "FeatureValues",
    "compute_features",
    "known_predictions",
    "predicted_urgency",
    "prediction_columns",
]

#: ``predicted_band`` of a job without a band (no prediction, or a cold-start one): the widest
MISSING_BAND = 1.0

_DEFAULT = FeatureConfig()


@dataclass(frozen=True, eq=False)
class FeatureValues:
    """The feature pool of one decision.

    job: [Q, len(job_names)], columns in ``job_names`` order (the feature set's job features;
        ``JOB_FEATURES``, the classic set's, by default).
    cluster: [len(CLUSTER_FEATURES)], in ``CLUSTER_FEATURES`` order.
    ways: raw count of nodes each job could use now (drives the sampling rule).
    """

    job: FloatArray
    cluster: FloatArray
    ways: FloatArray
    now: float
    job_names: tuple[str, ...] = JOB_FEATURES

    def column(self, name: str) -> FloatArray:
        """One per-job feature over the queue."""
        if self.job_names is JOB_FEATURES:
            return self.job[:, job_index(name)]
        if name not in self.job_names:
            raise KeyError(f"unknown job feature {name!r}; known: {', '.join(self.job_names)}")
        return self.job[:, self.job_names.index(name)]

    def cluster_value(self, name: str) -> float:
        """One cluster-level feature."""
        return float(self.cluster[cluster_index(name)])


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    """num / den (same shapes), 0 where den is 0: an empty pool or an idle queue carries no signal."""
    out = np.zeros(np.shape(num))
    np.divide(num, den, out=out, where=den > 0)
    return out


def _log_scale(x: FloatArray, unit: float, horizon: float) -> FloatArray:
    """log1p(x / unit) / log1p(horizon / unit), saturating at 1 beyond the horizon."""
    out: FloatArray = np.minimum(np.log1p(x / unit) / np.log1p(horizon / unit), 1.0)
    return out


def _released_gpus(
    cluster: ClusterView, now: float, within: FloatArray, ends_sorted: bool | None = None
) -> FloatArray:
    """[len(within), n_groups]: GPUs of each group's running jobs estimated to end by ``now + within``.

    Each running job falls in the bin of the first (sorted) threshold at or after its end; a
    bincount per (bin, group) and a cumulative sum over the bins give every threshold's released
    GPUs. Running jobs sorted by end (as the simulator keeps them) are binned in O(R) without a
    search; otherwise each is placed by binary search over the thresholds. ``ends_sorted=True``
    promises sorted ends (``RunningJobs`` keeps them so) and skips the check.
    """
    n_groups = cluster.n_groups
    limit = now + within
    order = np.argsort(limit, kind="stable")
    limits = limit[order]
    end = cluster.run_end_s
    if ends_sorted is None:
        ends_sorted = len(end) <= 1 or bool((end[1:] >= end[:-1]).all())
    if not ends_sorted:
        k = np.searchsorted(limits, end, side="left")
    else:
        bounds = np.empty(len(limits) + 2, dtype=np.int64)
        bounds[0], bounds[-1] = 0, len(end)
        bounds[1:-1] = np.searchsorted(end, limits, side="right")  # jobs [0, b) end by limits[i]
        k = np.repeat(np.arange(len(limits) + 1), bounds[1:] - bounds[:-1])
    n_bins = len(limits) + 1
    hist = np.bincount(
        k * n_groups + cluster.run_group, weights=cluster.run_gpus, minlength=n_bins * n_groups
    )
    cum = np.cumsum(hist.reshape(n_bins, n_groups), axis=0)
    out = np.empty((len(limit), n_groups))
    out[order] = cum[: len(limit)]
    return out


def known_predictions(predicted: FloatArray) -> tuple[BoolArray, FloatArray]:
    """(known, predicted with -1 where unknown): a prediction is known when finite and >= 0 (NaN
    is the tables' "none"). The -1 form is what the compiled featurizer reads (its test is
    ``p >= 0``, false for the sentinel)."""
    known = np.isfinite(predicted) & (predicted >= 0)
    return known, np.where(known, predicted, -1.0)


def prediction_columns(
    predicted: FloatArray, low: FloatArray, high: FloatArray, config: FeatureConfig
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The job-alone prediction features (``predicted_time``, ``predicted_band``,
    ``predicted_known``), one formula for every featurizer (docs/features.md):

    - ``predicted_time`` = L(p), the log time scale of ``requested_time``; 0 when unknown;
    - ``predicted_band`` = min(1, log(hi / lo) / log(band_ratio_ref)), clipped at 0;
      ``MISSING_BAND`` (1, the widest) when the band is unknown (no prediction, a cold-start job
      with NaN bounds, or a bound <= 0);
    - ``predicted_known`` = 1 when p is known, else 0 (the model's way to tell "missing" from a
      short prediction).
    """
    known, _ = known_predictions(predicted)
    time = np.where(
        known, _log_scale(np.where(known, predicted, 0.0), config.time_unit_s, config.horizon_s), 0.0
    )
    band_known = known & np.isfinite(low) & np.isfinite(high) & (low > 0) & (high > 0)
    ratio = np.where(band_known, high, 1.0) / np.where(band_known, low, 1.0)
    width = np.clip(np.log(ratio) / np.log(config.band_ratio_ref), 0.0, 1.0)
    band = np.where(band_known, width, MISSING_BAND)
    return time, band, known.astype(np.float64)


def predicted_urgency(wait: FloatArray, sentinel: FloatArray, floor_s: float) -> FloatArray:
    """``predicted_urgency`` = w / (w + max(p, floor)), ``urgency`` with the prediction in place of
    the estimate (1 - 1/(predicted bounded slowdown if started now)); 0 when unknown (``sentinel``:
    ``known_predictions``' -1 form). Elementwise, as the compiled featurizer computes it."""
    known = sentinel >= 0
    value = _ratio(wait, wait + np.maximum(np.where(known, sentinel, 0.0), floor_s))
    out: FloatArray = np.where(known, value, 0.0)
    return out


def compute_features(
    queue: QueueView,
    cluster: ClusterView,
    now: float,
    config: FeatureConfig = _DEFAULT,
    features: str | FeatureSet = DEFAULT_FEATURE_SET,
) -> FeatureValues:
    """The per-job and cluster-level features of a decision at time ``now``, for the feature set
    ``features`` (classic by default: ``JOB_FEATURES``; a set's extra columns follow them)."""
    pool = feature_set(features) if isinstance(features, str) else features
    q = len(queue)
    n_groups = cluster.n_groups
    if queue.eligible.shape[1] != n_groups:
        raise ValueError(f"queue.eligible has {queue.eligible.shape[1]} groups, the cluster {n_groups}")
    unit, horizon = config.time_unit_s, config.horizon_s
    cap_g = cluster.capacity_gpus.astype(np.float64)
    total_cap = float(cap_g.sum())
    total_free = float(cluster.free_by_group.sum())

    # per-job pool totals: one small [Q, n_groups] x [n_groups, 4] product
    elig_b = queue.eligible
    elig = elig_b.astype(np.float64)
    per_group = np.stack(
        (cap_g, cluster.free_by_group, cluster.node_count, cluster.idle_by_group), axis=1
    ).astype(np.float64)
    pool_cap, pool_free, pool_nodes, pool_idle = (elig @ per_group).T

    demand = queue.gpu_demand
    est = queue.est_runtime_s
    wait = np.maximum(now - queue.submit_s, 0.0)
    req = distinct_requests(queue, cluster)
    ways: Ways = placement_ways(queue, cluster, req)
    released = _released_gpus(cluster, now, np.append(est, config.near_horizon_s))

    f = np.empty((q, len(pool.job_features)))
    col = job_index
    # -- visible job features
    # (capped at 1: only a job larger than its pool, which binding would have excluded, exceeds it)
    f[:, col("gpus")] = np.minimum(_ratio(np.log1p(demand), np.log1p(pool_cap)), 1.0)
    f[:, col("gpu_type")] = pool_cap / total_cap if total_cap > 0 else 0.0
    f[:, col("vc")] = queue.vc / (queue.n_vcs - 1) if queue.n_vcs > 1 else 0.0
    f[:, col("requested_time")] = _log_scale(est, unit, horizon)
    oldest = float(queue.submit_s.min()) if q else now
    span = now - oldest
    f[:, col("submit_time")] = np.clip((queue.submit_s - oldest) / span, 0.0, 1.0) if span > 0 else 0.0
    f[:, col("wait")] = _log_scale(wait, unit, horizon)
    # CPUs and memory: share of the fewest nodes that can hold the job, in its roomiest group
    if q:
        request = np.stack((req.cpu, req.mem))[:, :, None]  # [2, R, 1]
        per_node = np.stack((cluster.cpus_per_node_milli, cluster.mem_per_node_mib))[:, None, :]
        share_rg = request / (req.need * per_node)  # [2, R, n_groups]
        share = np.where(elig_b, share_rg[:, req.inverse], np.inf).min(axis=2)
        f[:, col("cpus")], f[:, col("mem")] = np.minimum(share, 1.0)
    # -- cluster characteristics of the job's pool
    f[:, col("free_nodes")] = _ratio(pool_idle, pool_nodes)
    f[:, col("can_schedule_now")] = ways.can_now
    f[:, col("num_ways")] = _ratio(np.log1p(ways.ways), np.log1p(ways.ways_empty))
    # -- engineered
    # each queued job's demand spread over its eligible groups in proportion to their capacity
    group_demand = cap_g * (_ratio(demand, pool_cap) @ elig)
    pool_demand = elig @ group_demand
    f[:, col("demand_supply")] = _ratio(pool_demand, pool_demand + pool_free)
    size = _ratio(np.log1p(demand * est / unit), np.log1p(pool_cap * horizon / unit))
    f[:, col("job_size")] = np.minimum(size, 1.0)
    urgency = _ratio(wait, wait + np.maximum(est, config.bsld_floor_s))
    f[:, col("urgency")] = urgency
    released_job = (released[:q] * elig).sum(axis=1)
    f[:, col("future_availability")] = np.minimum(_ratio(released_job, pool_cap), 1.0)
    f[:, col("fragmentation")] = _ratio(ways.stranded_gpus, pool_free)
    total_demand = float(demand.sum())
    if total_demand > 0:
        user = queue.user
        if int(user.max()) > 4 * q + 1024:  # sparse codes (e.g. uids): compact them first
            user = np.unique(user, return_inverse=True)[1].reshape(-1)
        f[:, col("user_share")] = np.bincount(user, weights=demand)[user] / total_demand
    else:
        f[:, col("user_share")] = 0.0
    if pool.reads_predictions:
        _prediction_features(f, pool, queue, wait, config)

    c = np.empty(len(CLUSTER_FEATURES))
    c[cluster_index("free_gpus")] = total_free / total_cap if total_cap > 0 else 0.0
    partial_free = float(cluster.partial_free_by_group.sum())
    c[cluster_index("fragmentation")] = partial_free / total_free if total_free > 0 else 0.0
    c[cluster_index("queue_demand")] = total_demand / (total_demand + total_cap) if total_cap > 0 else 0.0
    c[cluster_index("queue_length")] = min(np.log1p(q) / np.log1p(config.queue_ref), 1.0)
    c[cluster_index("mean_urgency")] = float(urgency.mean()) if q else 0.0
    c[cluster_index("runnable")] = float(ways.can_now.mean()) if q else 0.0
    near = float(released[q].sum())
    c[cluster_index("future_availability")] = min(near / total_cap, 1.0) if total_cap > 0 else 0.0
    return FeatureValues(job=f, cluster=c, ways=ways.ways, now=float(now), job_names=pool.job_features)


def _prediction_features(
    f: FloatArray, pool: FeatureSet, queue: QueueView, wait: FloatArray, config: FeatureConfig
) -> None:
    """The prediction columns of ``f`` (set ``pool``) from the queue's predictions."""
    time, band, known = prediction_columns(
        queue.predicted_s, queue.predicted_lo_s, queue.predicted_hi_s, config
    )
    f[:, pool.job_index("predicted_time")] = time
    f[:, pool.job_index("predicted_band")] = band
    f[:, pool.job_index("predicted_known")] = known
    _, sentinel = known_predictions(queue.predicted_s)
    f[:, pool.job_index("predicted_urgency")] = predicted_urgency(wait, sentinel, config.bsld_floor_s)
