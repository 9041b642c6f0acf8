"""The featurizer's fast placement counts and released GPUs give the reference's numbers exactly.

``fast_ways.request_rows`` (one node table, one fit matrix) and ``PlacementCounts`` (counts kept
across states, updated from the nodes that changed) must equal ``ways.request_ways``;
``fast.released_gpus`` must equal ``compute._released_gpus``; and the featurizer must equal
``compute_features`` in each of its modes (nothing kept, counts kept, every kind kept per state)
along a simulated sequence of starts and ends, where what is kept is actually reused. Every
comparison is exact: checkpoints were trained on the reference's floats.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_features_fast import _filled
from test_features_ways import scenarios

from shared.features import FeatureSampler, SimViewBuilder, compute_features
from shared.features.compute import _released_gpus
from shared.features.fast import WorkloadFeaturizer, released_gpus
from shared.features.fast_ways import PlacementCounts, RequestLevels, node_table, request_rows
from shared.features.ways import _node_states, distinct_requests, request_ways
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.placement import make_placer
from shared.scheduling.state import Alloc, ClusterState


class _Run:
    """Random starts (best-fit) and ends of a workload's jobs on a cluster state."""

    def __init__(self, bound: BoundWorkload, state: ClusterState, seed: int) -> None:
        self.bound, self.state = bound, state
        self.rng = np.random.default_rng(seed)
        self.placer = make_placer("best-fit")
        self.allocs: dict[int, Alloc] = {}
        self.ends: dict[int, float] = {}

    def step(self, now: float, burst: int = 1) -> None:
        jobs = self.bound.jobs
        for _ in range(burst):
            if self.allocs and self.rng.random() < 0.45:
                j = list(self.allocs)[int(self.rng.integers(len(self.allocs)))]
                self.state.give(self.allocs.pop(j))
                del self.ends[j]
                continue
            j = int(self.rng.integers(len(jobs)))
            if j in self.allocs:
                continue
            a = self.placer.place(self.state, *self.bound.request(j), None, self.bound.node_slack)
            if a is not None:
                self.state.take(a)
                self.allocs[j] = a
                self.ends[j] = now + float(self.rng.uniform(-50, 5_000))

    def running(self) -> tuple[list[int], list[int], np.ndarray]:
        """Running jobs, their groups and estimated ends, sorted by end (as ``RunningJobs``)."""
        order = sorted(self.allocs, key=lambda j: self.ends[j])
        return order, [self.allocs[j].group for j in order], np.array([self.ends[j] for j in order])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_request_rows_equal_request_ways(scenario: tuple) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    cv = builder.cluster_view(state, running, run_group, np.zeros(len(running)))
    req = distinct_requests(builder.all_jobs(), cv)
    levels = RequestLevels.of(req, cv)
    for rows in (np.arange(len(req.gpus)), np.sort(rng.permutation(len(req.gpus))[: rng.integers(1, 4)])):
        reference = request_ways(req, rows, cv, _node_states(cv))
        assert np.array_equal(request_rows(req, levels, rows, cv, node_table(cv)), reference)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_kept_counts_follow_starts_and_ends_exactly(scenario: tuple, compiled: bool) -> None:  # type: ignore[type-arg]
    """Both updates: the compiled one (``kernels_ways.sync_kernel``, the default) and numpy's."""
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, _, _, rng = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    req = distinct_requests(builder.all_jobs(), builder.empty_cluster())
    levels = RequestLevels.of(req, builder.empty_cluster())
    # a small bound, so that bursts of starts and ends also take the start-over path
    counts = PlacementCounts(req, levels, max_changed=3)
    assert counts.compiled
    counts.compiled = compiled
    run = _Run(bound, state, int(rng.integers(2**31)))
    before: np.ndarray | None = None
    small_changes = 0
    for step in range(40):
        run.step(0.0, burst=int(rng.integers(1, 4)))
        cv = builder.cluster_view(state, [], [], [])
        free = np.stack((cv.free_gpus, cv.free_share_milli, cv.free_cpus_milli, cv.free_mem_mib))
        changed = 0 if before is None else int((free != before).any(axis=0).sum())
        small_changes += 0 < changed <= 3
        before = free
        # a random subset of the requests: some seen before (updated), some new (counted)
        rows = np.sort(rng.permutation(len(req.gpus))[: int(rng.integers(1, len(req.gpus) + 1))])
        reference = request_ways(req, rows, cv, _node_states(cv))
        assert np.array_equal(counts.rows(rows, cv), reference), step
    # every change of 1-3 nodes was an update of the kept counts, not a recount
    assert counts.updates == small_changes


def test_released_gpus_equal_the_reference() -> None:
    rng = np.random.default_rng(0)
    for trial in range(400):
        n_run = int(rng.choice([0, 1, 5, 40, 300, 900]))
        n_groups = int(rng.integers(1, 6))
        ends = 1_000.0 + rng.uniform(-100, 20_000, n_run).round(int(rng.integers(0, 3)))
        if trial % 2:
            ends = np.sort(ends)
        cluster = SimpleNamespace(
            n_groups=n_groups,
            run_group=rng.integers(0, n_groups, n_run),
            # fractional shares: the sums are not exact, so the order of additions matters
            run_gpus=rng.choice([0.11, 0.32, 0.5, 0.07, 0.93, 1.0, 2.0, 8.0], n_run),
            run_end_s=ends,
        )
        n_q = int(rng.choice([1, 3, 64, 65, 200, 1024]))
        # estimates repeat (a few distinct values) or not; the near horizon is last
        values = rng.choice([30.0, 600.0, 3_600.0, 7_200.0, 1e5], n_q)
        within = np.append(values if trial % 3 else rng.uniform(0, 1e5, n_q), 3_600.0)
        sorted_ends = (None, bool(trial % 2), False)[trial % 3]
        expected = _released_gpus(cluster, 1_000.0, within, sorted_ends)  # type: ignore[arg-type]
        got = released_gpus(cluster, 1_000.0, within, sorted_ends)  # type: ignore[arg-type]
        assert got.flags["C_CONTIGUOUS"]
        assert np.array_equal(got, expected), trial


@pytest.mark.parametrize(("incremental", "all_kinds"), [(False, False), (True, False), (False, True)])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_featurizer_modes_equal_compute_features_along_a_run(
    incremental: bool,
    all_kinds: bool,
    scenario: tuple,  # type: ignore[type-arg]
) -> None:
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, _, _, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    featurizer = WorkloadFeaturizer(
        builder.all_jobs(), builder.empty_cluster(), incremental=incremental, all_kinds=all_kinds
    )
    featurizer.ends_sorted = True
    sampler = FeatureSampler()
    run = _Run(bound, state, int(rng.integers(2**31)))
    now = 0.0
    for version in range(1, 25):
        now += float(rng.uniform(0, 300))
        if version % 5:  # now and then a decision on the same state (a new version all the same)
            run.step(now, burst=int(rng.integers(1, 3)))
        running, groups, ends = run.running()
        cv = builder.cluster_view(state, running, groups, ends)
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        reference = compute_features(builder.queue_view(queued), cv, now)
        values = featurizer.values(queued, now, cv, version)
        assert np.array_equal(values.job, reference.job), version
        assert np.array_equal(values.cluster, reference.cluster), version
        assert np.array_equal(values.ways, reference.ways), version
        obs, critic = sampler.select(reference).apply(reference)
        o = featurizer.observe(queued, now, cv, sampler, version)
        assert np.array_equal(o.obs, obs.astype(np.float32)), version
        assert np.array_equal(o.critic, critic.astype(np.float32)), version
    featurizer.forget()
    assert np.array_equal(featurizer.values(queued, now, cv, 99).job, reference.job)
