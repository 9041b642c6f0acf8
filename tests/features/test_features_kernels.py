"""The compiled decision path (``shared.features.kernels``) gives the numpy path's numbers bit for bit.

``WorkloadFeaturizer.compiled`` switches between the two; every comparison is exact (bytes), on
random clusters filled by the simulator's placer (fractional, whole-GPU and gang requests), random
queues and times, in each of the featurizer's modes, with and without versions. The pieces that
repeat numpy's own algorithms are checked against numpy directly: ``pairwise_sum`` against
``np.add.reduce``, ``RunningJobs`` against a sorted list.
"""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_features_fast import _filled
from test_features_ways import scenarios

from shared.features import FeatureSampler, RunningJobs, SamplingConfig, SimViewBuilder
from shared.features.fast import Observation, WorkloadFeaturizer
from shared.features.kernels import pairwise_sum


def _same(a: Observation | None, b: Observation | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert a.selection == b.selection
    assert a.obs.dtype == b.obs.dtype == np.float32 and a.obs.flags["C_CONTIGUOUS"]
    assert a.obs.shape == b.obs.shape and a.obs.tobytes() == b.obs.tobytes()
    assert a.critic.dtype == np.float32 and a.critic.tobytes() == b.critic.tobytes()
    assert np.array_equal(a.can_now, b.can_now)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([(None, None), (True, False), (False, True), (False, False)]))
def test_compiled_observe_equals_the_numpy_path(scenario: tuple, mode: tuple) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    incremental, all_kinds = mode
    fast = WorkloadFeaturizer(
        builder.all_jobs(), builder.empty_cluster(), incremental=incremental, all_kinds=all_kinds
    )
    slow = WorkloadFeaturizer(
        builder.all_jobs(), builder.empty_cluster(), incremental=incremental, all_kinds=all_kinds
    )
    assert fast.compiled
    slow.compiled = False
    now = float(rng.uniform(0, 6_000))
    ends = np.sort(now + rng.uniform(-50, 5_000, len(running)))
    cv = builder.cluster_view(state, running, run_group, ends)
    samplers = [FeatureSampler(SamplingConfig()), FeatureSampler(SamplingConfig(mode="fixed"))]
    # every job feature and cluster feature selected at least once (the rarely used numpy columns too)
    samplers.append(FeatureSampler(SamplingConfig(n_observation=17, n_critic=7)))
    for _ in range(3):
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        for version in (None, 3, 3):
            for sampler in samplers:
                for skip in (False, True):
                    got = fast.observe_unless_blocked(queued, now, cv, sampler, version, skip)
                    want = slow.observe_unless_blocked(queued, now, cv, sampler, version, skip)
                    _same(got, want)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([(None, None), (True, False), (False, True)]), st.booleans())
def test_compiled_observe_equals_the_numpy_path_on_the_predicted_set(
    scenario: tuple,  # type: ignore[type-arg]
    mode: tuple,  # type: ignore[type-arg]
    predictions: bool,
) -> None:
    """The ``predicted`` set's columns (``predicted_urgency`` from the kernel, the others static),
    with and without the workload's predictions, every job and cluster feature selected too."""
    filled = _filled(scenario, predictions)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    incremental, all_kinds = mode
    fast, slow = (
        WorkloadFeaturizer(
            builder.all_jobs(),
            builder.empty_cluster(),
            incremental=incremental,
            all_kinds=all_kinds,
            features="predicted",
        )
        for _ in range(2)
    )
    slow.compiled = False
    now = float(rng.uniform(0, 6_000))
    ends = np.sort(now + rng.uniform(-50, 5_000, len(running)))
    cv = builder.cluster_view(state, running, run_group, ends)
    samplers = [
        FeatureSampler(SamplingConfig(feature_set="predicted")),
        FeatureSampler(SamplingConfig(feature_set="predicted", mode="fixed")),
        FeatureSampler(SamplingConfig(feature_set="predicted", n_observation=21, n_critic=7)),
    ]
    for _ in range(3):
        queued = rng.permutation(len(bound.jobs))[: int(rng.integers(1, len(bound.jobs) + 1))]
        for version in (None, 3, 3):
            for sampler in samplers:
                for skip in (False, True):
                    got = fast.observe_unless_blocked(queued, now, cv, sampler, version, skip)
                    want = slow.observe_unless_blocked(queued, now, cv, sampler, version, skip)
                    _same(got, want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_kinds_kernel_equals_the_numpy_counts(scenario: tuple) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    fz = WorkloadFeaturizer.for_builder(builder)
    cv = builder.cluster_view(state, running, run_group, np.zeros(len(running)))
    fz.compiled = True
    got = fz._kinds_on(cv)
    fz.compiled = False
    want = fz._kinds_on(cv)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [*range(0, 140), 255, 256, 257, 1000, 1031, 8192, 8193, 20_001, 100_003])
def test_pairwise_sum_is_numpys_sum(n: int) -> None:
    rng = np.random.default_rng(n)
    for a in (
        rng.random(n),
        rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n),
        1.0 / rng.integers(1, 97, n),
    ):
        assert pairwise_sum(a) == np.add.reduce(a)
        assert pairwise_sum(a) == a.sum()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 9)), max_size=200))
def test_running_jobs_stay_sorted_by_end_like_a_list(ops: list[tuple[bool, int, int]]) -> None:
    """Adds and removes keep the arrays equal to a list sorted by end, later additions after
    earlier ones with the same end (``bisect.insort_right``)."""
    running = RunningJobs(capacity=2)  # grows along the way
    model: list[tuple[float, int, int]] = []  # (end, insertion counter, job)
    group_of: dict[int, int] = {}
    counter = 0
    for add, job, end in ops:
        if add and job not in group_of:
            group_of[job] = job % 3
            running.add(job, job % 3, float(end))
            bisect.insort_right(model, (float(end), counter, job))
            counter += 1
        elif not add and job in group_of:
            running.remove(job)
            del group_of[job]
            model = [m for m in model if m[2] != job]
        assert running.jobs.tolist() == [m[2] for m in model]
        assert running.est_end.tolist() == [m[0] for m in model]
        assert running.group.tolist() == [group_of[m[2]] for m in model]
        assert len(running) == len(model)
