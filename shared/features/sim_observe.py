"""A simulated decision's observation from the simulator's state in one compiled call.

Why: on the small training clusters (``WorkloadFeaturizer``'s ``all_kinds`` case) a training
decision used to build a ``ClusterView`` (``SimViewBuilder.cluster_view``: ``view_kernel`` and a
new object of 21 fields), compute every job kind's values from it (``kinds_kernel``) and then the
queue's columns (``observe_kernel``): three compiled calls with ~65 arguments between them and the
Python around them, 100-150 us a decision inside a training episode, where the simulator's work
has evicted the policy's code from the caches. ``sim_observe_kernel`` runs the three kernels in
one call on buffers kept across decisions, reading the state's node arrays and the running jobs'
arrays directly; no ``ClusterView`` is built (one is, through the caller's callback, only for the
rarely selected columns numpy computes). The kernels are the same functions on the same inputs:
the same numbers (``tests/features/test_sim_observe.py`` compares the observations with
``WorkloadFeaturizer.observe`` on the view along simulated episodes).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from numba import njit
from numba.core.errors import NumbaError

from shared.features.fast import Observation, WorkloadFeaturizer
from shared.features.kernels import kinds_kernel, observe_kernel
from shared.features.kernels_view import view_kernel
from shared.features.sampling import FeatureSampler
from shared.features.sim_views import RunningJobs, SimViewBuilder
from shared.features.views import BoolArray, ClusterView, IntArray

__all__ = ["UNSUPPORTED", "SimObserver", "Unsupported", "sim_observe_kernel"]


class Unsupported(enum.Enum):
    """``SimObserver``'s answer for a state the fused call cannot take (the caller then goes
    through the view, which gives the same numbers)."""

    UNSUPPORTED = "unsupported"


UNSUPPORTED = Unsupported.UNSUPPORTED


#: ``WorkloadFeaturizer.kernel_inputs``: ``observe_kernel``'s per-workload arrays (``static_t`` to
#: ``pred``) and ``pred_col``
KernelInputs = tuple[
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    np.ndarray,
    int,
]

#: ``WorkloadFeaturizer._kernel_req``: ``kinds_kernel``'s histogram width and request arrays
KindRequests = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class _Group(Protocol):
    """What the observer reads of a node group's state (``shared.scheduling.state.GroupState``)."""

    whole: IntArray
    cpu: IntArray
    mem: IntArray
    maxfrac: IntArray | None


@njit(cache=True)
def sim_observe_kernel(
    changed: bool,
    wholes: tuple[np.ndarray, ...],
    cpus: tuple[np.ndarray, ...],
    mems: tuple[np.ndarray, ...],
    fracs: tuple[np.ndarray, ...],
    has_frac: np.ndarray,
    gpn: np.ndarray,
    cap_cpu: np.ndarray,
    cap_mem: np.ndarray,
    demand_view: np.ndarray,
    run_job: np.ndarray,
    run_group: np.ndarray,
    run_end: np.ndarray,
    n_run: int,
    ints: np.ndarray,
    idle: np.ndarray,
    run_gpus: np.ndarray,
    group_of_node: np.ndarray,
    kind_req: KindRequests,
    kind_req_of: np.ndarray,
    kind_elig: np.ndarray,
    kinds: np.ndarray,
    idx: np.ndarray,
    now: float,
    job_kind: np.ndarray,
    skip_blocked: bool,
    static: KernelInputs,
    total_cap: float,
    released_exact: bool,
    unit: float,
    bsld_floor: float,
    near_horizon: float,
    multi_ways: float,
    demand_share: np.ndarray,
    job: np.ndarray,
    wait_scaled: np.ndarray,
    can_now: np.ndarray,
    cluster: np.ndarray,
    share_q: np.ndarray,
    elig_q: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """``observe_kernel``'s result for the queue ``idx`` on the state given by the groups' node
    arrays and the first ``n_run`` running jobs (job, group, estimated end; buffers of at least
    ``n_run``). When ``changed`` (a new free state), first the view's arrays into ``ints``,
    ``idle`` and ``run_gpus`` (``view_kernel``, the layout ``SimViewBuilder._compiled_view``
    reads, the free shares of group ``g`` then ``fracs[g]`` where ``has_frac[g]``, as it copies a
    group's ``maxfrac``) and every job kind's values into ``kinds`` (``kinds_kernel``, as
    ``WorkloadFeaturizer._kinds_on``); else those buffers are the state's already. Returns -2,
    having written nothing else, when ``view_kernel`` rejects the state or a tracked group's
    shares are not one per node."""
    n = len(idle)
    n_groups = len(gpn)
    run = run_job[:n_run]
    groups = run_group[:n_run]
    ends = run_end[:n_run]
    gpus = run_gpus[:n_run]
    free_g = ints[4 * n + n_groups : 4 * n + 2 * n_groups]
    partial_g = ints[4 * n + 2 * n_groups :]
    if changed:
        for g in range(n_groups):
            if has_frac[g] and len(fracs[g]) != len(wholes[g]):
                return -2
        if not view_kernel(wholes, cpus, mems, gpn, cap_cpu, cap_mem, run, demand_view, ints, idle, gpus):
            return -2
        start = 0
        for g in range(n_groups):
            if has_frac[g]:
                frac = fracs[g]
                for k in range(len(frac)):
                    ints[n + start + k] = frac[k]
            start += len(wholes[g])
        n_bins, level, req_gpus, req_cpu, req_mem, gang, m_nodes, need_ok = kind_req
        kinds_kernel(
            ints[:n],
            ints[n : 2 * n],
            ints[2 * n : 3 * n],
            ints[3 * n : 4 * n],
            idle,
            group_of_node,
            free_g,
            ints[4 * n : 4 * n + n_groups],
            partial_g,
            n_bins,
            level,
            req_gpus,
            req_cpu,
            req_mem,
            gang,
            m_nodes,
            need_ok,
            kind_req_of,
            kind_elig,
            kinds,
        )
    (
        static_t,
        static_cols,
        submit,
        est,
        demand,
        pool_cap,
        pool_nodes,
        log_ways_empty,
        log1p_int,
        elig,
        pred,
        pred_col,
    ) = static
    return observe_kernel(
        idx,
        now,
        kinds,
        job_kind,
        False,
        skip_blocked,
        static_t,
        static_cols,
        submit,
        est,
        demand,
        pool_cap,
        pool_nodes,
        log_ways_empty,
        log1p_int,
        elig,
        pred,
        pred_col,
        free_g,
        partial_g,
        total_cap,
        groups,
        gpus,
        ends,
        released_exact,
        unit,
        bsld_floor,
        near_horizon,
        multi_ways,
        demand_share,
        job,
        wait_scaled,
        can_now,
        cluster,
        share_q,
        elig_q,
    )


class SimObserver:
    """``WorkloadFeaturizer.observe_unless_blocked`` on ``SimViewBuilder.cluster_view``'s view, in
    one compiled call (``sim_observe_kernel``) per decision; see the module docstring.

    ``usable`` says whether the pair allows it: a compiled featurizer in its ``all_kinds`` case (a
    small cluster: every kind's values per free state, kept per ``version``) and a compiled view
    builder without value checks. A state whose arrays numba cannot take as one tuple type is
    answered with ``UNSUPPORTED`` (and ``enabled`` turned off): the caller then goes through the
    view (the same numbers)."""

    def __init__(self, builder: SimViewBuilder, featurizer: WorkloadFeaturizer) -> None:
        self.builder = builder
        self.featurizer = featurizer
        fz = featurizer
        self.enabled = True
        fixed = builder._fixed_fields()
        n, n_groups = builder._n_nodes, len(builder._gpn)
        self._ints = np.zeros(4 * n + 3 * n_groups, dtype=np.int64)
        self._idle = np.zeros(n, dtype=bool)
        self._run_gpus = np.zeros(0)
        self._kinds = np.zeros((len(fz._kind_req), 5))
        self._group_of_node = np.ascontiguousarray(fixed["group_of_node"], dtype=np.int64)
        self._version: object = None
        self._has_frac = np.zeros(n_groups, dtype=bool)  # which groups track shares (``maxfrac``)
        #: the state's node arrays per group: free whole GPUs, CPUs, memory, shares (``maxfrac``,
        #: or the whole GPUs as an unread placeholder)
        self._tuples: tuple[tuple[IntArray, ...], ...] = ((), (), (), ())

    @property
    def usable(self) -> bool:
        fz, builder = self.featurizer, self.builder
        return self.enabled and fz.compiled and fz._all_kinds and builder.compiled and not builder._check

    def observe(
        self,
        groups: Sequence[_Group],
        running: RunningJobs,
        idx: IntArray,
        now: float,
        sampler: FeatureSampler,
        version: object,
        skip_blocked: bool,
        cluster: Callable[[], ClusterView],
    ) -> Observation | Unsupported | None:
        """The decision's observation (None when ``skip_blocked`` and no job fits now), or
        ``UNSUPPORTED`` when this state cannot go through the fused call: ``columns``, then
        ``WorkloadFeaturizer.finish_observation``."""
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        got = self.columns(groups, running, idx, now, sampler, version, skip_blocked)
        if got is UNSUPPORTED or got is None:
            return got
        multi, can_now = got
        return self.featurizer.finish_observation(idx, float(now), multi, can_now, sampler, cluster)

    def columns(
        self,
        groups: Sequence[_Group],
        running: RunningJobs,
        idx: IntArray,
        now: float,
        sampler: FeatureSampler,
        version: object,
        skip_blocked: bool,
    ) -> tuple[int, BoolArray] | Unsupported | None:
        """``sim_observe_kernel`` on the queue ``idx`` (int64, C-contiguous): the featurizer's
        scratch buffers written, (``multi``, ``can_now``) as ``observe_kernel`` gives them; None
        when ``skip_blocked`` and no job fits now; ``UNSUPPORTED`` when this state cannot go
        through the fused call. ``version`` as ``WorkloadFeaturizer``'s (equal: an unchanged free
        state and running jobs)."""
        fz, builder = self.featurizer, self.builder
        changed = version is None or version != self._version
        job_buf, group_buf, end_buf, n_run = running.buffers()
        if changed:
            has_frac = self._has_frac
            if len(groups) != len(has_frac):
                raise ValueError(f"the state has {len(groups)} groups, the cluster {len(has_frac)}")
            for g, gs in enumerate(groups):
                has_frac[g] = gs.maxfrac is not None
            self._tuples = (
                tuple([gs.whole for gs in groups]),
                tuple([gs.cpu for gs in groups]),
                tuple([gs.mem for gs in groups]),
                tuple([gs.whole if gs.maxfrac is None else gs.maxfrac for gs in groups]),
            )
            if len(self._run_gpus) < n_run:
                self._run_gpus = np.zeros(max(n_run, 2 * len(self._run_gpus), 64))
        wholes, cpus, mems, fracs = self._tuples
        q = len(idx)
        job, wait_scaled, share_q, elig_q = fz._scratch(q)
        can_now = np.empty(q, dtype=bool)
        cfg = fz.config
        try:
            multi = sim_observe_kernel(
                changed,
                wholes,
                cpus,
                mems,
                fracs,
                self._has_frac,
                builder._gpn,
                builder._cap_cpu,
                builder._cap_mem,
                builder._demand_f,
                job_buf,
                group_buf,
                end_buf,
                n_run,
                self._ints,
                self._idle,
                self._run_gpus,
                self._group_of_node,
                fz._kernel_req,
                fz._kind_req_c,
                fz._kind_elig_c,
                self._kinds,
                idx,
                float(now),
                fz._job_kind,
                skip_blocked,
                fz.kernel_inputs,
                fz._total_cap,
                fz._released_exact,
                cfg.time_unit_s,
                cfg.bsld_floor_s,
                cfg.near_horizon_s,
                float(sampler.config.multi_ways),
                fz._demand_share,
                job,
                wait_scaled,
                can_now,
                fz._clus,
                share_q,
                elig_q,
            )
        except NumbaError:  # e.g. groups of different integer types: not one tuple type
            self.enabled = False
            return UNSUPPORTED
        if multi == -2:
            raise ValueError(
                f"the state's groups do not hold the cluster's {len(self._idle)} nodes, "
                "or a running job is unknown"
            )
        self._version = version
        if multi < 0:
            return None
        return multi, can_now
