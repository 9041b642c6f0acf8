"""The features of a simulated decision at a fraction of ``compute_features``'s fixed cost.

Why: ``compute_features`` takes two neutral views and derives everything from them, about 150
numpy calls whatever the queue length; at the 5-20 jobs a training decision usually has, that
fixed cost (0.3-0.5 ms) was most of a decision. Inside the simulator much of it never changes:

- a job's request, eligible groups, estimate and size are fixed for the whole run, so the
  features that depend on nothing else (``gpus``, ``gpu_type``, ``vc``, ``requested_time``,
  ``cpus``, ``mem``, ``job_size``), the pool totals that do not move (GPUs and nodes of the pool)
  and the ``num_ways`` normalizer (ways on the empty cluster) are computed once per workload, with
  the same expressions, and gathered per decision;
- the distinct requests of the whole workload are numbered once, so a decision looks its queue's
  requests up instead of deduplicating them;
- placement counts per request depend only on the cluster's free state: with a ``version`` that
  the caller bumps whenever a job starts or ends, they are kept until the state changes (a
  decision after arrivals only, common on a full cluster, reuses them); across versions, on a
  large cluster they are updated from the nodes that changed (``fast_ways.PlacementCounts``), on
  a small one every job kind's values are computed once per free state and kept per state
  (``_per_kind_all``);
- ``observe`` computes only the columns the decision's feature selection reads (always
  ``can_schedule_now``, which the sampling rule and the skip of blocked decisions need), the
  per-job constants gathered from a precomputed table;
- the GPUs released by running jobs come from ``released_gpus``, ``compute._released_gpus``'s
  floats with one bin per distinct threshold.

Every value is the same number ``compute_features`` gives, bit for bit: the per-job expressions are
elementwise (the same IEEE operations on the same inputs, whatever the array), integer-valued sums
are exact in any order, and the few floating-point reductions (``demand_supply``'s products, the
released GPUs, the queue totals) are the same calls on arrays of the same shape and order.
``tests/features/test_features_fast.py`` checks this against ``compute_features`` on random
clusters and queues, ``tests/features/test_fast_ways.py`` in every mode along simulated runs, and
``tests/rl/test_rl_fast_policy.py`` on the trained checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.features.catalog import (
    CLUSTER_FEATURES,
    DEFAULT_FEATURE_SET,
    FeatureConfig,
    FeatureSet,
    feature_set,
)
from shared.features.compute import (
    FeatureValues,
    _log_scale,
    _ratio,
    known_predictions,
    predicted_urgency,
    prediction_columns,
)
from shared.features.fast_ways import PlacementCounts, RequestLevels, _bins, node_table, request_rows
from shared.features.kernels import N_EXTRA, finish_kernel, kinds_kernel, observe_kernel, released_kernel
from shared.features.sampling import FeatureSampler, SamplingState, Selection
from shared.features.views import BoolArray, ClusterView, FloatArray, IntArray, QueueView
from shared.features.ways import _unique_inverse, distinct_requests, ways_on_empty

if TYPE_CHECKING:
    from shared.features.sim_views import SimViewBuilder

__all__ = ["FinishArgs", "Observation", "WorkloadFeaturizer"]

_DEFAULT = FeatureConfig()

#: per-job columns that depend on the job alone (and the cluster's fixed shape)
_STATIC = ("gpus", "gpu_type", "vc", "requested_time", "cpus", "mem", "job_size")
#: the prediction features that depend on the job alone (a set that reads predictions)
_STATIC_PREDICTED = ("predicted_time", "predicted_band", "predicted_known")
_FRAGMENTATION = CLUSTER_FEATURES.index("fragmentation")
#: job columns the compiled decision leaves to numpy (rarely selected)
_NUMPY_COLUMNS = frozenset({"user_share"})
_INT64 = np.dtype(np.int64)
#: clusters from this many nodes keep their placement counts across states (``PlacementCounts``):
#: on a 1,213-node cluster an update after a start or an end costs a third of a recount, on the
#: 16-68-node training clusters the recount is the cheaper (measured with bench/rl_throughput.py)
INCREMENTAL_FROM_NODES = 256
#: below this many (job kind x node group) cells, a decision reads every kind's values
#: (``WorkloadFeaturizer._per_kind_all``), of which this many free states are kept
_ALL_KINDS_CELLS = 4096
_STATES_KEPT = 4096
#: ``released_gpus``: thresholds deduplicated above this many; the sorted-ends scan from this many
#: running jobs
_DEDUPE_FROM = 64
_SCAN_FROM = 256
#: selections kept per sampler config (``WorkloadFeaturizer._select``)
_SELECTIONS_KEPT = 4096


@dataclass(frozen=True, eq=False)
class Observation:
    """What the model reads for one decision, and what the policy needs besides.

    obs: [Q, n_observation] float32, C-contiguous, columns of ``selection.observation``.
    critic: [n_critic] float32.
    can_now: [Q] whether each job fits now (resources only): none fitting means no order can
        change what starts this cycle.
    """

    obs: npt.NDArray[np.float32]
    critic: npt.NDArray[np.float32]
    selection: Selection
    can_now: BoolArray


#: ``WorkloadFeaturizer._finish_plan``: observation and critic columns, whether the wait's
#: ``log1p`` and ``demand_supply``'s products are needed, job and cluster columns left to numpy,
#: whether ``released_kernel`` writes ``future_availability`` (job column and cluster value)
_FinishPlan = tuple[IntArray, IntArray, bool, bool, tuple[int, ...], tuple[int, ...], bool]
#: ``finish_kernel``'s arguments before its outputs (``WorkloadFeaturizer.prepare_finish``)
FinishArgs = tuple[FloatArray, IntArray, FloatArray, float, FloatArray, FloatArray, IntArray]


class _Decision:
    """The intermediate values of one decision, each computed at most once, on demand."""

    idx: IntArray
    now: float
    q: int
    cluster: ClusterView
    elig: FloatArray | None = None
    ways: FloatArray
    stranded: FloatArray
    can_now: BoolArray
    pool: FloatArray | None = None
    wait: FloatArray | None = None
    urgency: FloatArray | None = None
    released: FloatArray | None = None
    demand: FloatArray | None = None


def released_gpus(
    cluster: ClusterView, now: float, within: FloatArray, ends_sorted: bool | None = None
) -> FloatArray:
    """``compute._released_gpus``, the same floats, in fewer and cheaper numpy calls.

    - A long queue's thresholds repeat (its estimates take a few dozen values), so they get one bin
      per *distinct* value: the cumulative sum over a (threshold, group) histogram was half the
      cost. Same numbers: a repeated threshold's bin holds no running job, so its cumulative value
      is the previous one plus 0.0, i.e. the previous one.
    - The histogram is group-major (the cumulative sum runs along contiguous memory), and every
      (group, bin) cell gets the same running jobs' GPUs added in the same order (``np.bincount``
      adds in input order), summed cumulatively in the same order (an accumulation is sequential).
    - A running job's bin is the first threshold at or after its end (``searchsorted`` over the
      thresholds, which needs no sorted ends); from ``_SCAN_FROM`` running jobs with sorted ends,
      the O(R) scan of ``compute._released_gpus`` (the same bins) is cheaper.
    """
    n_groups = cluster.n_groups
    limit = now + within
    order = limit.argsort(kind="stable")
    limits = limit[order]
    rank: IntArray | None = None
    if len(limits) > _DEDUPE_FROM:
        new = np.empty(len(limits), dtype=bool)
        new[:1] = True
        np.not_equal(limits[1:], limits[:-1], out=new[1:])
        limits = limits[new]
        rank = new.cumsum() - 1  # of each sorted threshold among the distinct ones
    end = cluster.run_end_s
    n_bins = len(limits) + 1
    if len(end) >= _SCAN_FROM and ends_sorted is not False:
        if ends_sorted is None:
            ends_sorted = bool((end[1:] >= end[:-1]).all())
    else:
        ends_sorted = False
    if not ends_sorted:
        k = limits.searchsorted(end, side="left")
    else:
        bounds = np.empty(n_bins + 1, dtype=np.int64)
        bounds[0], bounds[-1] = 0, len(end)
        bounds[1:-1] = end.searchsorted(limits, side="right")  # jobs [0, b) end by limits[i]
        k = np.arange(n_bins).repeat(bounds[1:] - bounds[:-1])
    hist = np.bincount(cluster.run_group * n_bins + k, weights=cluster.run_gpus, minlength=n_groups * n_bins)
    cum = hist.reshape(n_groups, n_bins).cumsum(axis=1)
    # each threshold's bin, in the thresholds' own order; then one gather of the (small,
    # transposed) table's rows: the same values, C-contiguous [len(limit), n_groups]
    at = np.empty(len(limit), dtype=np.int64)
    at[order] = np.arange(len(limit)) if rank is None else rank
    out: FloatArray = cum.T.copy().take(at, axis=0)
    return out


def _per_kind(rows: FloatArray, elig: FloatArray, cluster: ClusterView) -> FloatArray:
    """[K, 5] per job kind (request ``rows`` [K, n_groups, 3], eligible groups ``elig``): ways,
    stranded GPUs and feasibility summed over the eligible groups, then the pool's free GPUs and
    idle nodes (integer-valued sums: exact in any order)."""
    per_kind = np.empty((len(elig), 5))
    per_kind[:, :3] = np.add.reduce(rows * elig[:, :, None], axis=1)
    per_kind[:, 3:] = elig @ np.array((cluster.free_by_group, cluster.idle_by_group)).T
    return per_kind


def _i64(a: npt.NDArray[np.integer]) -> IntArray:
    """``a`` as a contiguous int64 array (itself when it already is one): what the kernels take."""
    if a.dtype == _INT64 and a.flags.c_contiguous:
        return a  # type: ignore[return-value]
    out: IntArray = np.ascontiguousarray(a, dtype=np.int64)
    return out


def _distinct(key: IntArray, pos: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(key, return_inverse=True)`` for keys in ``0 .. len(pos) - 1``: a mark per key
    value instead of a sort (``pos`` is scratch of that length)."""
    present = np.zeros(len(pos), dtype=bool)
    present[key] = True
    uniq = present.nonzero()[0]
    pos[uniq] = np.arange(len(uniq))
    inverse: IntArray = pos[key]
    return uniq, inverse


class WorkloadFeaturizer:
    """``compute_features`` for queued jobs of one workload, from precomputed per-job parts.

    ``jobs`` is every job of the workload as one ``QueueView`` (``SimViewBuilder.all_jobs``),
    ``empty`` the cluster's fixed shape (``SimViewBuilder.empty_cluster``). Per decision it takes
    the queued jobs' indices into ``jobs``, ``now``, the ``ClusterView`` of the current state and,
    optionally, a ``version`` of that state (anything comparable; equal versions promise an
    unchanged free state, ``None`` promises nothing). ``values`` returns the whole pool,
    ``observe`` only what a decision's selection reads.

    What it keeps across decisions (exact either way; by default chosen by the cluster's size):
    ``incremental`` keeps per-request placement counts and updates them from the nodes that
    changed (``PlacementCounts``; large clusters); ``all_kinds`` computes every job kind's values
    once per free state and keeps them per state (small clusters with few kinds). Without a
    version, or after ``forget``, nothing kept is used.
    """

    def __init__(
        self,
        jobs: QueueView,
        empty: ClusterView,
        config: FeatureConfig = _DEFAULT,
        *,
        incremental: bool | None = None,
        all_kinds: bool | None = None,
        features: str | FeatureSet = DEFAULT_FEATURE_SET,
    ) -> None:
        if jobs.eligible.shape[1] != empty.n_groups:
            raise ValueError(f"eligible has {jobs.eligible.shape[1]} groups, the cluster {empty.n_groups}")
        self.config = config
        #: the feature set computed (its job features are the columns of ``values``)
        self.pool = feature_set(features) if isinstance(features, str) else features
        self._job_names = self.pool.job_features
        self.n_groups = empty.n_groups
        self._init_workload(jobs, empty)
        self._init_static(jobs, empty)
        self._init_compiled(jobs, empty)
        n_kinds = self._init_kinds(jobs, empty)
        self._init_kinds_kernel(empty, n_kinds)
        self._init_kept(empty, n_kinds, incremental, all_kinds)

    # -- set-up, once per workload (called in this order by ``__init__``) --------------------------

    def _init_workload(self, jobs: QueueView, empty: ClusterView) -> None:
        """The jobs' own arrays, their pools' fixed totals, and the workload's distinct requests,
        numbered once."""
        self._cap_g = empty.capacity_gpus.astype(np.float64)
        self._total_cap = float(self._cap_g.sum())
        self._submit = jobs.submit_s
        self._est = jobs.est_runtime_s
        self._user = jobs.user
        self._demand = jobs.gpu_demand
        self._elig = jobs.eligible.astype(np.float64)
        elig = self._elig
        self._pool_cap = elig @ self._cap_g  # integer-valued: exact in any summation order
        self._pool_nodes = elig @ empty.node_count.astype(np.float64)
        req = distinct_requests(jobs, empty)
        self._req = req
        self._job_req = req.inverse

    def _init_static(self, jobs: QueueView, empty: ClusterView) -> None:
        """The per-job columns that depend on the job alone, with ``compute_features``'s
        expressions, and the other per-job constants: the demand's share of its pool and the
        ``num_ways`` normalizer (ways on the empty cluster)."""
        unit, horizon = self.config.time_unit_s, self.config.horizon_s
        pool_cap, req = self._pool_cap, self._req
        demand, est = jobs.gpu_demand, jobs.est_runtime_s
        names = _STATIC + (_STATIC_PREDICTED if self.pool.reads_predictions else ())
        static = np.zeros((len(jobs), len(names)))
        col = names.index
        static[:, col("gpus")] = np.minimum(_ratio(np.log1p(demand), np.log1p(pool_cap)), 1.0)
        static[:, col("gpu_type")] = pool_cap / self._total_cap if self._total_cap > 0 else 0.0
        static[:, col("vc")] = jobs.vc / (jobs.n_vcs - 1) if jobs.n_vcs > 1 else 0.0
        static[:, col("requested_time")] = _log_scale(est, unit, horizon)
        if len(jobs):
            request = np.stack((req.cpu, req.mem))[:, :, None]
            per_node = np.stack((empty.cpus_per_node_milli, empty.mem_per_node_mib))[:, None, :]
            share_rg = request / (req.need * per_node)
            share = np.where(jobs.eligible, share_rg[:, req.inverse], np.inf).min(axis=2)
            static[:, col("cpus")], static[:, col("mem")] = np.minimum(share, 1.0)
        size = _ratio(np.log1p(demand * est / unit), np.log1p(pool_cap * horizon / unit))
        static[:, col("job_size")] = np.minimum(size, 1.0)
        # the runtime predictions: static per job, as the estimate (``compute_features``' helpers)
        _, self._pred_sentinel = known_predictions(jobs.predicted_s)
        if self.pool.reads_predictions:
            time, band, known = prediction_columns(
                jobs.predicted_s, jobs.predicted_lo_s, jobs.predicted_hi_s, self.config
            )
            static[:, col("predicted_time")], static[:, col("predicted_band")] = time, band
            static[:, col("predicted_known")] = known
        self._static_names = names
        self._static_t = np.ascontiguousarray(static.T)  # a feature's values contiguous: cheap gathers
        self._static_col = {name: k for k, name in enumerate(names)}
        #: per selection: (position in the observation, row of ``_static_t`` or -1, name) of each column
        self._plans: dict[tuple[int, ...], tuple[tuple[int, int, str], ...]] = {}
        self._demand_share = _ratio(demand, pool_cap)  # demand_supply: each job spread over its pool
        ways_empty = (ways_on_empty(req, empty)[req.inverse] * self._elig).sum(axis=1)
        self._log_ways_empty = np.log1p(ways_empty)

    def _init_compiled(self, jobs: QueueView, empty: ClusterView) -> None:
        """What the compiled decision (``kernels.observe_kernel``) reads, the selections kept, and
        the per-decision scratch."""
        demand, est = jobs.gpu_demand, jobs.est_runtime_s
        # numpy's log1p of every possible count of ways (at most the cluster's nodes), of the
        # horizon; the job-alone columns' positions; whether the released GPUs are integer sums
        # (exact in the kernel's order)
        self._log1p_int = np.log1p(np.arange(int(empty.node_count.sum()) + 1, dtype=np.float64))
        self._log_horizon = np.log1p(self.config.horizon_s / self.config.time_unit_s)
        self._static_cols = np.array(
            [self.pool.job_index(name) for name in self._static_names], dtype=np.int64
        )
        #: ``predicted_urgency``'s column, written by the kernel (-1: the set has none)
        self._pred_col = (
            self.pool.job_index("predicted_urgency") if "predicted_urgency" in self._job_names else -1
        )
        self._pred_f = np.ascontiguousarray(self._pred_sentinel, dtype=np.float64)
        self._released_exact = bool(
            np.array_equal(demand, np.round(demand)) and float(np.abs(demand).sum()) < 2.0**52
        )
        self._demand_f = np.ascontiguousarray(demand, dtype=np.float64)
        self._submit_f = np.ascontiguousarray(jobs.submit_s, dtype=np.float64)
        self._est_f = np.ascontiguousarray(est, dtype=np.float64)
        self._clus = np.zeros(len(CLUSTER_FEATURES))  # a decision's cluster values (scratch)
        self._select_config: object = None  # ``_select``: the config its selections are for
        self._selections: dict[tuple[float, float], tuple[Selection, _FinishPlan]] = {}
        #: per selection (observation, critic): ``_finish_plan``
        self._finish: dict[tuple[tuple[int, ...], tuple[int, ...]], _FinishPlan] = {}
        self._buffers = (
            np.empty((0, len(self._job_names) + N_EXTRA)),
            np.empty(0),
            np.empty(0),
            np.empty((0, self.n_groups)),
        )
        self._scratch_views: dict[int, tuple[FloatArray, FloatArray, FloatArray, FloatArray]] = {}
        #: observe with the compiled kernel (False: the numpy expressions, for comparisons)
        self.compiled = True
        #: ``observe_kernel``'s per-workload arguments after ``skip_blocked`` (``static_t`` to
        #: ``elig``), also for callers that run the kernel inside their own compiled call
        #: (``sim_observe.SimObserver``)
        self.kernel_inputs = (
            self._static_t,
            self._static_cols,
            self._submit_f,
            self._est_f,
            self._demand_f,
            self._pool_cap,
            self._pool_nodes,
            self._log_ways_empty,
            self._log1p_int,
            self._elig,
            self._pred_f,
            self._pred_col,
        )

    def _init_kinds(self, jobs: QueueView, empty: ClusterView) -> int:
        """The job kinds, and how many there are: jobs with the same request and the same eligible
        groups get the same placement counts, so a decision sums over groups once per such kind,
        not once per job."""
        req, elig = self._req, self._elig
        n_groups = empty.n_groups
        if n_groups <= 62 and len(req.gpus) < (1 << (62 - n_groups)):
            bits = (jobs.eligible.astype(np.int64) << np.arange(n_groups, dtype=np.int64)).sum(axis=1)
            kinds, self._job_kind = _unique_inverse((req.inverse << n_groups) | bits)
            first = np.zeros(len(kinds), dtype=np.int64)
            first[self._job_kind[::-1]] = np.arange(len(jobs) - 1, -1, -1)  # a job of each kind
            # the distinct eligibility rows (``released_kernel`` sums once per row and bin)
            rows_bits, self._elig_id = _unique_inverse(bits)
            at = np.zeros(len(rows_bits), dtype=np.int64)
            at[self._elig_id] = np.arange(len(jobs))
            self._elig_rows = np.ascontiguousarray(elig[at])
        else:  # too many groups to pack: every job its own kind
            self._job_kind = np.arange(len(jobs), dtype=np.int64)
            first = self._job_kind
            self._elig_id = np.zeros(len(jobs), dtype=np.int64)
            self._elig_rows = np.zeros((0, n_groups))
        self._kind_req = req.inverse[first]
        self._kind_elig = elig[first]
        self._kind_req_c = np.ascontiguousarray(self._kind_req, dtype=np.int64)
        self._kind_elig_c = np.ascontiguousarray(self._kind_elig)
        #: the incremental case's kind values, by kind (``PlacementCounts.kinds``)
        self._kind_buf = np.zeros((len(first), 5))
        return len(first)

    def _init_kinds_kernel(self, empty: ClusterView, n_kinds: int) -> None:
        """The kinds kernel's inputs and the per-decision deduplication's scratch."""
        req = self._req
        self._levels = RequestLevels.of(req, empty)
        # the kinds kernel's inputs (int64, C-contiguous): request thresholds as ``RequestLevels``
        # without its int32 clipping (nodes' values are below 2**31: the same comparisons)
        level = np.where(req.whole, req.gpus * WHOLE_GPU_MILLI, np.where(req.gpus == 0, 0, req.milli))
        self._kernel_req = (
            _bins(empty),
            np.ascontiguousarray(level, dtype=np.int64),
            np.ascontiguousarray(req.gpus, dtype=np.int64),
            np.ascontiguousarray(req.cpu, dtype=np.int64),
            np.ascontiguousarray(req.mem, dtype=np.int64),
            np.ascontiguousarray(self._levels.gang),
            np.ascontiguousarray(req.m_nodes, dtype=np.int64),
            np.ascontiguousarray(req.need_ok),
        )
        # scratch for the per-decision deduplication: position of each kind (request) in the
        # decision's sorted list of distinct ones (written before every read)
        self._kind_pos = np.zeros(n_kinds, dtype=np.int64)
        self._req_pos = np.zeros(len(req.gpus), dtype=np.int64)

    def _init_kept(
        self, empty: ClusterView, n_kinds: int, incremental: bool | None, all_kinds: bool | None
    ) -> None:
        """What is kept across decisions, and which way (``incremental``, ``all_kinds``: chosen by
        the cluster's size when not given), all of it empty to start with."""
        req = self._req
        #: True when the caller's running jobs are always sorted by estimated end (``RunningJobs``)
        self.ends_sorted: bool | None = None
        # per-request placement counts, kept across free states on clusters large enough for the
        # update to cost less than a recount; the rows of the last version seen
        self._counts = PlacementCounts(req, self._levels)
        if incremental is None:
            incremental = int(empty.node_count.sum()) >= INCREMENTAL_FROM_NODES
        self.incremental = incremental
        # few kinds on a small cluster: every kind's values at once, per free state
        if all_kinds is None:
            all_kinds = not incremental and n_kinds * empty.n_groups <= _ALL_KINDS_CELLS
        self._all_kinds = all_kinds
        self._all_req = np.arange(len(req.gpus), dtype=np.int64)
        self._kinds_cache: dict[bytes, FloatArray] = {}
        #: free states whose per-kind values are kept (0: none, only the last version's); at most
        #: ``_STATES_KEPT``, and about 32 MB of values
        self.states_kept = max(16, min(_STATES_KEPT, (1 << 22) // (5 * max(n_kinds, 1))))
        self._kinds_version: object = None
        self._kinds_values = np.zeros((0, 5))
        self._version: object = None
        self._rows_key = b""
        self._rows: FloatArray = np.zeros((0, self.n_groups, 3))

    @classmethod
    def for_builder(
        cls,
        builder: SimViewBuilder,
        config: FeatureConfig = _DEFAULT,
        features: str | FeatureSet = DEFAULT_FEATURE_SET,
    ) -> WorkloadFeaturizer:
        """The featurizer of a ``SimViewBuilder``'s workload, estimates and predictions."""
        return cls(builder.all_jobs(), builder.empty_cluster(), config, features=features)

    def forget(self) -> None:
        """Drop everything kept across decisions (placement counts, per-state values, the last
        version's rows): the next decision counts from scratch, as a first one."""
        self._counts.reset()
        self._kinds_cache.clear()
        self._version = self._kinds_version = None
        self._rows_key = b""

    # -- per decision -----------------------------------------------------------------------------

    def values(
        self, queued: npt.ArrayLike, now: float, cluster: ClusterView, version: object = None
    ) -> FeatureValues:
        """The whole feature pool; equal to ``compute_features`` on the same decision."""
        d = self._decision(queued, now, cluster, version)
        job = np.empty((d.q, len(self._job_names)))
        for k, name in enumerate(self._job_names):
            job[:, k] = self._job_column(d, name)
        crit = np.array([self._cluster_value(d, name) for name in CLUSTER_FEATURES], dtype=np.float64)
        return FeatureValues(job=job, cluster=crit, ways=d.ways, now=float(now), job_names=self._job_names)

    def observe(
        self,
        queued: npt.ArrayLike,
        now: float,
        cluster: ClusterView,
        sampler: FeatureSampler,
        version: object = None,
    ) -> Observation:
        """The selected observation and critic features of a decision (``sampler``'s rule without
        exploration: ``sampler.select(values)``), computing no other column."""
        obs = self.observe_unless_blocked(queued, now, cluster, sampler, version, skip_blocked=False)
        assert obs is not None
        return obs

    def observe_unless_blocked(
        self,
        queued: npt.ArrayLike,
        now: float,
        cluster: ClusterView,
        sampler: FeatureSampler,
        version: object = None,
        skip_blocked: bool = True,
    ) -> Observation | None:
        """``observe``, or None (before computing any column) when ``skip_blocked`` and no queued
        job fits now."""
        if self.compiled:
            return self._observe_compiled(queued, now, cluster, sampler, version, skip_blocked)
        d = self._decision(queued, now, cluster, version)
        if skip_blocked and not d.can_now.any():
            return None
        # the mean of a boolean array, as np.mean computes it (count / q, one rounding)
        multi = np.count_nonzero(d.ways >= sampler.config.multi_ways) / d.q if d.q else 0.0
        fragmentation = self._cluster_value(d, "fragmentation")
        selection = sampler.select_state(SamplingState(fragmentation, multi))
        obs = np.empty((d.q, len(selection.observation)), dtype=np.float32)
        idx = d.idx
        static_t = self._static_t
        for k, row, name in self._plan(selection.observation):
            # a per-job constant is a gather of its precomputed row (the same values, cast alike)
            obs[:, k] = static_t[row].take(idx) if row >= 0 else self._job_column(d, name)
        critic = np.array(
            [
                fragmentation if c == _FRAGMENTATION else self._cluster_value(d, CLUSTER_FEATURES[c])
                for c in selection.critic
            ],
            dtype=np.float64,
        ).astype(np.float32)
        return Observation(obs, critic, selection, d.can_now)

    def _observe_compiled(
        self,
        queued: npt.ArrayLike,
        now: float,
        cluster: ClusterView,
        sampler: FeatureSampler,
        version: object,
        skip_blocked: bool,
    ) -> Observation | None:
        """``observe_unless_blocked`` through the compiled kernels (the same numbers): one pass for
        the columns (``observe_kernel``), numpy for ``log1p`` of the wait and ``demand_supply``'s
        two products, one pass for the observation and critic (``finish_kernel``); the rarely
        selected ``user_share``, ``queue_length`` and inexact released GPUs from ``_job_column``
        and ``_cluster_value``."""
        idx = np.ascontiguousarray(queued, dtype=np.int64)
        now = float(now)
        table, direct = self._kind_table(idx, cluster, version)
        q = len(idx)
        job, wait_scaled, share_q, elig_q = self._scratch(q)
        can_now = np.empty(q, dtype=bool)
        clus = self._clus  # zeroed by the kernel
        cfg = self.config
        multi = observe_kernel(
            idx,
            now,
            table,
            self._job_kind,
            direct,
            skip_blocked,
            *self.kernel_inputs,
            cluster.free_by_group,
            cluster.partial_free_by_group,
            self._total_cap,
            cluster.run_group,
            cluster.run_gpus,
            cluster.run_end_s,
            self._released_exact,
            cfg.time_unit_s,
            cfg.bsld_floor_s,
            cfg.near_horizon_s,
            float(sampler.config.multi_ways),
            self._demand_share,
            job,
            wait_scaled,
            can_now,
            clus,
            share_q,
            elig_q,
        )
        if multi < 0:
            return None
        return self.finish_observation(idx, now, multi, can_now, sampler, lambda: cluster)

    def finish_observation(
        self,
        idx: IntArray,
        now: float,
        multi: int,
        can_now: BoolArray,
        sampler: FeatureSampler,
        cluster: Callable[[], ClusterView],
    ) -> Observation:
        """The observation after ``observe_kernel`` wrote the scratch buffers (``_scratch(len(idx))``)
        and returned ``multi`` (>= 0): ``prepare_finish``, then ``finish_kernel``."""
        selection, finish = self.prepare_finish(idx, now, multi, sampler, cluster)
        obs = np.empty((len(idx), len(finish[1])), dtype=np.float32)
        critic = np.empty(len(finish[6]), dtype=np.float32)
        finish_kernel(*finish, obs, critic)
        return Observation(obs, critic, selection, can_now)

    def prepare_finish(
        self,
        idx: IntArray,
        now: float,
        multi: int,
        sampler: FeatureSampler,
        cluster: Callable[[], ClusterView],
        log1p: bool = True,
        products: bool = True,
    ) -> tuple[Selection, FinishArgs]:
        """The selection, and ``finish_kernel``'s arguments but its outputs, after
        ``observe_kernel`` wrote the scratch buffers and returned ``multi`` (>= 0): the kernel's
        columns, the selection's observation columns, numpy's ``log1p`` of the wait (when
        selected, and ``log1p``; else the wait / unit, for a caller that takes the same
        ``log1p`` itself), the horizon's ``log1p``, ``demand_supply``'s numpy products (when
        selected, and ``products``; else the unread scratch, for a caller that makes the same
        BLAS calls from its operands: ``products_operands``), the cluster values and the critic
        columns. The rarely selected columns left to numpy (``_job_column``, ``_cluster_value``)
        are written into the scratch here, from the view ``cluster()``."""
        q = len(idx)
        job, wait_scaled, share_q, elig_q = self._scratch(q)
        clus = self._clus
        selection, plan = self._select(sampler, float(clus[_FRAGMENTATION]), multi / q if q else 0.0)
        cols, critic_cols, wait, demand_supply, job_numpy, cluster_numpy, released = plan
        wait_log = pool_demand = wait_scaled
        if wait and log1p:
            wait_log = np.log1p(wait_scaled)
        if demand_supply and products:  # numpy's products (BLAS: their order), operands gathered
            pool_demand = elig_q @ (self._cap_g * (share_q @ elig_q))
        if released:  # fractional GPUs: the released GPUs with numpy's sums
            view = cluster()
            released_kernel(
                idx,
                now,
                self._est_f,
                self._elig,
                self._pool_cap,
                view.run_group,
                view.run_gpus,
                view.run_end_s,
                self.config.near_horizon_s,
                self._total_cap,
                self._elig_id,
                self._elig_rows,
                job,
                clus,
            )
        if job_numpy or cluster_numpy:
            bare = self._bare_decision(idx, now, cluster())
            for c in job_numpy:
                job[:, c] = self._job_column(bare, self._job_names[c])
            for c in cluster_numpy:
                clus[c] = self._cluster_value(bare, CLUSTER_FEATURES[c])
        return selection, (job, cols, wait_log, self._log_horizon, pool_demand, clus, critic_cols)

    def _select(
        self, sampler: FeatureSampler, fragmentation: float, multi: float
    ) -> tuple[Selection, _FinishPlan]:
        """``sampler.select_state`` of the state signals and its ``_finish_plan``, kept per
        signals for the sampler's config (the rule is a pure function of the state and the
        config; a training run sees a few dozen distinct states; kept for the last config object
        seen, up to 4,096 states)."""
        if sampler.config is not self._select_config:
            self._select_config = sampler.config
            self._selections.clear()
        key = (fragmentation, multi)
        kept = self._selections.get(key)
        if kept is None:
            if len(self._selections) >= _SELECTIONS_KEPT:
                self._selections.clear()
            selection = sampler.select_state(SamplingState(fragmentation, multi))
            plan = self._finish.get((selection.observation, selection.critic))
            if plan is None:
                plan = self._finish_plan(selection)
            kept = self._selections[key] = (selection, plan)
        return kept

    def _finish_plan(self, selection: Selection) -> _FinishPlan:
        """What a selection needs after the kernel (kept per selection): its observation and
        critic columns as arrays, whether numpy computes ``log1p`` of the wait and
        ``demand_supply``'s products, and the job and cluster columns left to ``_job_column`` and
        ``_cluster_value``."""
        inexact = not self._released_exact
        observation, critic = selection.observation, selection.critic
        names = [self._job_names[c] for c in observation]
        plan: _FinishPlan = (
            np.array(observation, dtype=np.int64),
            np.array(critic, dtype=np.int64),
            "wait" in names,
            "demand_supply" in names,
            tuple(c for c, name in zip(observation, names, strict=True) if name in _NUMPY_COLUMNS),
            tuple(c for c in critic if CLUSTER_FEATURES[c] == "queue_length"),
            inexact
            and (
                "future_availability" in names
                or any(CLUSTER_FEATURES[c] == "future_availability" for c in critic)
            ),
        )
        self._finish[(observation, critic)] = plan
        return plan

    def products_operands(self, q: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``demand_supply``'s operands for the last decision of ``q`` jobs: the jobs' demand
        shares and eligible groups (gathered by ``observe_kernel``) and the groups' capacities."""
        _, _, share, elig = self._scratch(q)
        return share, elig, self._cap_g

    def _scratch(self, q: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Per-decision work arrays for ``q`` jobs (views of buffers kept across decisions: none
        of them is returned): the kernel's columns, wait / unit, and ``demand_supply``'s
        gathered operands (C-contiguous, as fresh arrays would be). The views are kept per ``q``
        (a decision asks twice; four slicings cost more than the look-up)."""
        views = self._scratch_views.get(q)
        if views is not None:
            return views
        if q > len(self._buffers[1]):
            size = max(q, 2 * len(self._buffers[1]))
            self._buffers = (
                np.empty((size, len(self._job_names) + N_EXTRA)),
                np.empty(size),
                np.empty(size),
                np.empty((size, self.n_groups)),
            )
            self._scratch_views.clear()
        job, wait, share, elig = self._buffers
        views = self._scratch_views[q] = (job[:q], wait[:q], share[:q], elig[:q])
        return views

    def _bare_decision(self, idx: IntArray, now: float, cluster: ClusterView) -> _Decision:
        """A ``_Decision`` for the numpy columns that need no kind values."""
        d = _Decision()
        d.idx, d.now, d.q, d.cluster = idx, now, len(idx), cluster
        return d

    # -- internals --------------------------------------------------------------------------------

    def _plan(self, observation: tuple[int, ...]) -> tuple[tuple[int, int, str], ...]:
        """Per column of a selection's observation: its position, its row of ``_static_t`` (-1
        for a feature computed per decision) and its name."""
        plan = self._plans.get(observation)
        if plan is None:
            plan = self._plans[observation] = tuple(
                (k, self._static_col.get(self._job_names[c], -1), self._job_names[c])
                for k, c in enumerate(observation)
            )
        return plan

    def _decision(
        self, queued: npt.ArrayLike, now: float, cluster: ClusterView, version: object
    ) -> _Decision:
        d = _Decision()
        d.idx = idx = np.asarray(queued, dtype=np.int64)
        d.now, d.q, d.cluster = float(now), len(idx), cluster
        table, direct = self._kind_table(idx, cluster, version)
        per_job = table if direct else table.take(self._job_kind[idx], axis=0)
        d.ways = per_job[:, 0]
        d.stranded = per_job[:, 1]
        d.can_now = per_job[:, 2] > 0
        d.pool = per_job[:, 3:]
        return d

    def _kind_table(self, idx: IntArray, cluster: ClusterView, version: object) -> tuple[FloatArray, bool]:
        """The decision's kind values (ways, stranded GPUs, feasibility, pool's free GPUs and idle
        nodes): every kind of the workload ([K, 5], row ``_job_kind[job]``; ``all_kinds``), or
        one row per queued job ([Q, 5]; True)."""
        if len(cluster.node_count) != self.n_groups:
            raise ValueError(f"cluster has {cluster.n_groups} groups, the workload {self.n_groups}")
        if self._all_kinds:
            if version is not None and self.compiled:  # ``_per_kind_all``'s compiled case, inline
                if version != self._kinds_version:
                    self._kinds_version, self._kinds_values = version, self._kinds_on(cluster)
                return self._kinds_values, False
            return self._per_kind_all(cluster, version), False
        if self.incremental and self.compiled and version is not None and self._counts.compiled:
            # the kept counts' rows summed per queued kind in one compiled call (every kind's row
            # of ``_kind_buf`` that the queue reads is written; the others are stale, unread)
            self._counts.kinds(
                idx, self._job_kind, self._kind_req_c, self._kind_elig_c, cluster, self._kind_buf
            )
            return self._kind_buf, False
        kinds, kind_inv = _distinct(self._job_kind[idx], self._kind_pos)
        uniq, req_inv = _distinct(self._kind_req[kinds], self._req_pos)
        per_req = self._request_rows(uniq, cluster, version)  # [U, n_groups, 3]
        return _per_kind(per_req[req_inv], self._kind_elig[kinds], cluster).take(kind_inv, axis=0), True

    def _per_kind_all(self, cluster: ClusterView, version: object) -> FloatArray:
        """``_per_kind`` of every job kind of the workload on ``cluster``'s free state, kept per
        version and per free state (the node arrays' bytes; a training run revisits its states).

        Why: on the training clusters (16-68 nodes, about ten distinct requests) the whole
        workload's kinds cost no more numpy calls than a queue's, and a decision is then one
        gather instead of two deduplications, the placement counts and the per-kind sums."""
        if version is None:
            return self._kinds_on(cluster)
        if version == self._kinds_version:
            return self._kinds_values
        if self.compiled:  # the kernel costs less than the state's key: nothing kept per state
            self._kinds_version, self._kinds_values = version, self._kinds_on(cluster)
            return self._kinds_values
        key = b"".join(
            a.tobytes()
            for a in (
                cluster.free_gpus,
                cluster.free_share_milli,
                cluster.free_cpus_milli,
                cluster.free_mem_mib,
            )
        )
        values = self._kinds_cache.get(key)
        if values is None:
            values = self._kinds_on(cluster)
            if len(self._kinds_cache) >= self.states_kept:
                self._kinds_cache.clear()
            if self.states_kept:
                self._kinds_cache[key] = values
        self._kinds_version, self._kinds_values = version, values
        return values

    def _kinds_on(self, cluster: ClusterView) -> FloatArray:
        if self.compiled:
            out = np.empty((len(self._kind_req), 5))
            free_gpus, free_by_group = cluster.free_gpus, cluster.free_by_group
            share, cpu, mem = cluster.free_share_milli, cluster.free_cpus_milli, cluster.free_mem_mib
            idle_by_group, partial = cluster.idle_by_group, cluster.partial_free_by_group
            group_of_node = cluster.group_of_node
            # a view's arrays are int64 (its constructor and ``SimViewBuilder`` make them so): the
            # kernel's types without a conversion check per array (~0.3 us each); a strided one
            # gets numba's strided version of the kernel, the same arithmetic
            if not (
                free_gpus.dtype == share.dtype == cpu.dtype == mem.dtype == group_of_node.dtype == _INT64
                and free_by_group.dtype == idle_by_group.dtype == partial.dtype == _INT64
            ):
                free_gpus, share, cpu, mem = _i64(free_gpus), _i64(share), _i64(cpu), _i64(mem)
                free_by_group, idle_by_group = _i64(free_by_group), _i64(idle_by_group)
                partial, group_of_node = _i64(partial), _i64(group_of_node)
            kinds_kernel(
                free_gpus,
                share,
                cpu,
                mem,
                cluster.idle_node,
                group_of_node,
                free_by_group,
                idle_by_group,
                partial,
                *self._kernel_req,
                self._kind_req_c,
                self._kind_elig_c,
                out,
            )
            return out
        rows = request_rows(self._req, self._levels, self._all_req, cluster, node_table(cluster))
        return _per_kind(rows[self._kind_req], self._kind_elig, cluster)

    def _request_rows(self, uniq: IntArray, cluster: ClusterView, version: object) -> FloatArray:
        """[U, n_groups, 3]: ways, stranded GPUs and feasibility (0/1) of requests ``uniq`` on the
        current free state, as ``placement_ways`` computes them (every entry integer-valued).

        Without a version, counted on the whole state; with one, the same version again reuses
        the last rows, a new one updates the kept counts from the nodes that changed
        (``PlacementCounts``)."""
        if version is None:
            self._version, self._rows_key = None, b""
            return request_rows(self._req, self._levels, uniq, cluster, node_table(cluster))
        key = uniq.tobytes()
        if version == self._version and key == self._rows_key:
            return self._rows
        if self.incremental:
            out = self._counts.rows(uniq, cluster)
        else:
            out = request_rows(self._req, self._levels, uniq, cluster, node_table(cluster))
        self._version, self._rows_key, self._rows = version, key, out
        return out

    def _pool_free_idle(self, d: _Decision) -> FloatArray:
        """[Q, 2]: free whole GPUs and idle nodes of each job's pool (integer-valued: exact)."""
        assert d.pool is not None
        return d.pool

    def _eligs(self, d: _Decision) -> FloatArray:
        if d.elig is None:
            d.elig = self._elig.take(d.idx, axis=0)
        return d.elig

    def _waits(self, d: _Decision) -> FloatArray:
        if d.wait is None:
            d.wait = np.maximum(d.now - self._submit[d.idx], 0.0)
        return d.wait

    def _urgencies(self, d: _Decision) -> FloatArray:
        if d.urgency is None:
            wait = self._waits(d)
            d.urgency = _ratio(wait, wait + np.maximum(self._est[d.idx], self.config.bsld_floor_s))
        return d.urgency

    def _released(self, d: _Decision) -> FloatArray:
        if d.released is None:
            limits = np.concatenate((self._est[d.idx], (self.config.near_horizon_s,)))
            d.released = released_gpus(d.cluster, d.now, limits, self.ends_sorted)
        return d.released

    def _demands(self, d: _Decision) -> FloatArray:
        if d.demand is None:
            d.demand = self._demand[d.idx]
        return d.demand

    def _job_column(self, d: _Decision, name: str) -> FloatArray:
        """One per-job feature, with compute_features's expression (docs/features.md)."""
        k = self._static_col.get(name)
        if k is not None:
            static: FloatArray = self._static_t[k].take(d.idx)
            return static
        cfg = self.config
        if name == "wait":
            return _log_scale(self._waits(d), cfg.time_unit_s, cfg.horizon_s)
        if name == "urgency":
            return self._urgencies(d)
        if name == "can_schedule_now":
            return d.can_now.astype(np.float64)
        if name == "num_ways":
            return _ratio(np.log1p(d.ways), self._log_ways_empty[d.idx])
        if name == "fragmentation":
            return _ratio(d.stranded, self._pool_free_idle(d)[:, 0])
        if name == "free_nodes":
            return _ratio(self._pool_free_idle(d)[:, 1], self._pool_nodes[d.idx])
        if name == "future_availability":
            released_job = np.add.reduce(self._released(d)[: d.q] * self._eligs(d), axis=1)
            return np.minimum(_ratio(released_job, self._pool_cap[d.idx]), 1.0)
        if name == "demand_supply":
            # floating-point products: the same calls on arrays of the same shape and order
            elig = self._eligs(d)
            group_demand = self._cap_g * (self._demand_share[d.idx] @ elig)
            pool_demand = elig @ group_demand
            return _ratio(pool_demand, pool_demand + self._pool_free_idle(d)[:, 0])
        if name == "predicted_urgency":
            return predicted_urgency(self._waits(d), self._pred_sentinel[d.idx], cfg.bsld_floor_s)
        if name == "submit_time":
            submit = self._submit[d.idx]
            oldest = float(submit.min()) if d.q else d.now
            span = d.now - oldest
            if span > 0:
                return np.clip((submit - oldest) / span, 0.0, 1.0)
            return np.zeros(d.q)
        if name == "user_share":
            demand = self._demands(d)
            total = float(demand.sum())
            if total <= 0:
                return np.zeros(d.q)
            user = self._user[d.idx]
            if int(user.max()) > 4 * d.q + 1024:  # sparse codes (e.g. uids): compact them first
                user = np.unique(user, return_inverse=True)[1].reshape(-1)
            share: FloatArray = np.bincount(user, weights=demand)[user] / total
            return share
        raise KeyError(f"unknown job feature {name!r}")

    def _cluster_value(self, d: _Decision, name: str) -> float:
        """One cluster-level feature, with compute_features's expression."""
        c = d.cluster
        total_cap = self._total_cap
        # the per-group counts are integers: summed exactly by Python as by numpy, with less overhead
        if name == "free_gpus":
            return float(sum(c.free_by_group.tolist())) / total_cap if total_cap > 0 else 0.0
        if name == "fragmentation":
            total_free = float(sum(c.free_by_group.tolist()))
            partial_free = float(sum(c.partial_free_by_group.tolist()))
            return partial_free / total_free if total_free > 0 else 0.0
        if name == "queue_demand":
            total_demand = float(np.add.reduce(self._demands(d)))  # what ndarray.sum calls
            return total_demand / (total_demand + total_cap) if total_cap > 0 else 0.0
        if name == "queue_length":
            return float(min(np.log1p(d.q) / np.log1p(self.config.queue_ref), 1.0))
        if name == "mean_urgency":  # ndarray.mean: the same pairwise sum, divided by the count
            return float(np.add.reduce(self._urgencies(d))) / d.q if d.q else 0.0
        if name == "runnable":  # the mean of a boolean array: count / q, as np.mean rounds it
            return np.count_nonzero(d.can_now) / d.q if d.q else 0.0
        if name == "future_availability":
            near = float(np.add.reduce(self._released(d)[d.q]))
            return min(near / total_cap, 1.0) if total_cap > 0 else 0.0
        raise KeyError(f"unknown cluster feature {name!r}")
