"""The compiled kernels of the large-cluster decision give the reference's numbers exactly.

``PlacementCounts.kinds`` (the kept counts summed per job kind in one call, with the compiled
snapshot and count) must equal ``ways.request_ways``'s rows summed over each kind's eligible
groups, along a run of starts and ends; ``kernels.released_kernel`` (``future_availability`` with
fractional GPUs, numpy's sums) must equal the expressions of ``compute_features`` on
``compute._released_gpus``. Every comparison is exact: checkpoints were trained on the reference's
floats.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_ways import _Run
from test_features_fast import _filled
from test_features_ways import scenarios

from shared.features import SimViewBuilder
from shared.features.compute import _ratio, _released_gpus
from shared.features.fast import WorkloadFeaturizer
from shared.features.kernels import released_kernel
from shared.features.ways import _node_states, request_ways

_FUTURE, _C_FUTURE = 14, 6


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_kind_table_equals_the_reference_rows_along_a_run(scenario: tuple) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, _, _, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    fz = WorkloadFeaturizer(builder.all_jobs(), builder.empty_cluster(), incremental=True)
    counts = fz._counts
    counts.max_changed = 3  # bursts take the start-over (snapshot) path too
    table = np.full((len(fz._kind_req), 5), np.nan)
    run = _Run(bound, state, int(rng.integers(2**31)))
    elig = builder.all_jobs().eligible
    for step in range(25):
        run.step(0.0, burst=int(rng.integers(1, 4)))
        if step % 7 == 6:
            counts.reset()  # counted from scratch, as after ``forget``
        cv = builder.cluster_view(state, [], [], [])
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        counts.kinds(queued, fz._job_kind, fz._kind_req_c, fz._kind_elig_c, cv, table)
        req = fz._job_req[queued]
        uniq, inverse = np.unique(req, return_inverse=True)
        rows = request_ways(fz._req, uniq, cv, _node_states(cv))[inverse]  # [Q, groups, 3]
        e = elig[queued]
        want = np.concatenate(
            (
                (rows * e[:, :, None]).sum(axis=1),
                np.stack(((cv.free_by_group * e).sum(axis=1), (cv.idle_by_group * e).sum(axis=1)), axis=1),
            ),
            axis=1,
        )
        assert np.array_equal(table[fz._job_kind[queued]], want), step


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans(), st.booleans())
def test_released_kernel_equals_the_reference(scenario: tuple, sorted_ends: bool, patterns: bool) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    fz = WorkloadFeaturizer(builder.all_jobs(), builder.empty_cluster())
    now = float(rng.uniform(0, 6_000))
    # fractional GPUs: the running jobs' demands replaced by sums that round differently by order
    ends = (
        now + rng.choice([-10.0, 30.0, 600.0, 7_200.0, 1e4], len(running)) + rng.uniform(0, 1, len(running))
    )
    if sorted_ends:
        ends = np.sort(ends)
    cv = builder.cluster_view(state, running, run_group, ends)
    cv.__dict__["run_gpus"] = rng.choice([0.1, 0.2, 0.3, 0.05, 1.0, 0.7], len(running))
    elig = builder.all_jobs().eligible.astype(np.float64)
    for _ in range(3):
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        q = len(queued)
        within = np.concatenate((fz._est[queued], (fz.config.near_horizon_s,)))
        released = _released_gpus(cv, now, within)
        want_job = np.minimum(_ratio((released[:q] * elig[queued]).sum(axis=1), fz._pool_cap[queued]), 1.0)
        total_cap = fz._total_cap
        want_near = min(float(released[q].sum()) / total_cap, 1.0) if total_cap > 0 else 0.0
        job = np.zeros((q, 30))
        clus = np.zeros(8)
        ids, rows = (fz._elig_id, fz._elig_rows) if patterns else (fz._elig_id, np.zeros((0, fz.n_groups)))
        released_kernel(
            np.ascontiguousarray(queued, dtype=np.int64),
            now,
            fz._est_f,
            fz._elig,
            fz._pool_cap,
            cv.run_group,
            np.ascontiguousarray(cv.run_gpus),
            cv.run_end_s,
            fz.config.near_horizon_s,
            total_cap,
            ids,
            rows,
            job,
            clus,
        )
        assert job[:, _FUTURE].tobytes() == want_job.tobytes()
        assert clus[_C_FUTURE] == want_near


def test_row_sums_follow_numpys_pairwise_order() -> None:
    """Rows of 1-40 groups (numpy's 8-lane tree from 8 values on): the kernel's per-job sums are
    ``np.add.reduce(released * elig, axis=1)``'s bits, not a sequential sum's."""
    rng = np.random.default_rng(3)
    for n_groups in (1, 5, 8, 9, 15, 16, 23, 40):
        q, n_run = 60, 500
        elig = (rng.random((q, n_groups)) < 0.7).astype(np.float64)
        elig[:, 0] = 1.0
        pool_cap = elig @ np.full(n_groups, 8.0)
        est = rng.choice([60.0, 600.0, 3_600.0], q)
        run_end = np.sort(rng.uniform(0, 5_000, n_run))
        run_group = rng.integers(0, n_groups, n_run)
        run_gpus = rng.choice([0.1, 0.3, 0.7, 0.05], n_run)
        job = np.zeros((q, 30))
        clus = np.zeros(8)
        idx = np.arange(q, dtype=np.int64)
        released_kernel(
            idx, 0.0, est, elig, pool_cap, run_group, run_gpus, run_end, 600.0, 8.0 * n_groups,
            np.zeros(q, dtype=np.int64), np.zeros((0, n_groups)), job, clus,
        )  # fmt: skip
        limits = np.concatenate((est, (600.0,)))
        k = np.searchsorted(np.sort(limits), run_end, side="left")
        hist = np.zeros((q + 2, n_groups))
        np.add.at(hist, (k, run_group), run_gpus)  # in input order, as np.bincount
        cum = np.cumsum(hist, axis=0)[np.searchsorted(np.sort(limits), limits, side="left")]
        want = np.minimum((cum[:q] * elig).sum(axis=1) / pool_cap, 1.0)
        assert job[:, _FUTURE].tobytes() == want.tobytes(), n_groups
