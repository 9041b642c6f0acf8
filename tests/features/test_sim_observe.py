"""``SimObserver`` (view, kinds and columns in one compiled call, from the state's node arrays)
gives the observation ``WorkloadFeaturizer.observe_unless_blocked`` gives on the builder's view
(with numpy's expressions: ``compiled = False``).

Along random starts and ends on random clusters (fractional GPUs with groups tracking shares,
several groups, node slack), each decision is observed by both, with a new version after every
change and with the same version again (the kept buffers), on the simulator's state and on a
lightweight state of the same arrays (the shape the compiled simulator hands the policy: groups
with ``whole``, ``cpu``, ``mem``, ``maxfrac``, ``n``). Blocked queues give None on both.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_ways import _Run
from test_features_fast import _filled
from test_features_ways import scenarios

from shared.domain.cluster import parse_cluster_spec
from shared.features import FeatureSampler, RunningJobs, SamplingConfig, SimViewBuilder
from shared.features.fast import Observation, WorkloadFeaturizer
from shared.features.sim_observe import UNSUPPORTED, SimObserver

_VERSIONS = itertools.count(1)


def _light(state: object) -> SimpleNamespace:
    """A state object of the same arrays, with only what the policy reads of a group."""
    groups = [
        SimpleNamespace(whole=g.whole, cpu=g.cpu, mem=g.mem, maxfrac=g.maxfrac, n=g.n)
        for g in state.groups  # type: ignore[attr-defined]
    ]
    return SimpleNamespace(groups=groups)


def _same(a: Observation | None, b: Observation | None) -> None:
    assert (a is None) == (b is None)
    if a is not None and b is not None:
        assert a.obs.dtype == b.obs.dtype == np.float32 and a.obs.flags.c_contiguous
        assert np.array_equal(a.obs, b.obs) and np.array_equal(a.critic, b.critic)
        assert a.selection == b.selection and np.array_equal(a.can_now, b.can_now)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), features=st.sampled_from(["classic", "predicted", "predicted+none"]))
def test_fused_observation_equals_the_views(scenario: tuple, features: str) -> None:  # type: ignore[type-arg]
    """Also for the ``predicted`` feature set, with the workload's predictions and without any
    ("predicted+none")."""
    filled = _filled(scenario, predictions=features == "predicted")
    if filled is None:
        return
    pool = features.split("+")[0]
    bound, state, _, _, rng = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    featurizer = WorkloadFeaturizer(
        builder.all_jobs(), builder.empty_cluster(), incremental=False, all_kinds=True, features=pool
    )
    featurizer.ends_sorted = True
    reference = WorkloadFeaturizer.for_builder(builder, features=pool)
    reference.compiled = False  # numpy's expressions
    observer = SimObserver(builder, featurizer)
    assert observer.usable
    sampler = FeatureSampler(SamplingConfig(feature_set=pool))
    run = _Run(bound, state, int(rng.integers(2**31)))
    now = 0.0
    for step in range(12):
        now += float(rng.uniform(0, 300))
        run.step(now, burst=int(rng.integers(1, 4)))
        jobs, groups, ends = run.running()
        running = RunningJobs()
        for j, g, e in zip(jobs, groups, ends.tolist(), strict=True):
            running.add(j, g, e)
        view = builder.cluster_view(state, running.jobs, running.group, running.est_end)
        version = next(_VERSIONS)
        queued = rng.choice(
            len(bound.jobs), size=int(rng.integers(1, min(40, len(bound.jobs)) + 1)), replace=False
        )
        skip = bool(step % 2)
        target = state if step % 3 else _light(state)
        for again in (False, True):  # a new version, then the same one (the kept buffers)
            got = observer.observe(
                target.groups, running, queued, now, sampler, version, skip, lambda v=view: v
            )
            assert got is not UNSUPPORTED
            want = reference.observe_unless_blocked(queued, now, view, sampler, version, skip)
            _same(got, want)  # type: ignore[arg-type]
            if again:
                assert observer._version == version


def test_a_state_of_another_size_is_refused() -> None:
    group = {"name": "g", "gpu_type": "A", "count": 3, "gpus": 4, "cpus": 16, "mem_gib": 64}
    spec = parse_cluster_spec({"name": "c", "node_groups": [group]}, "test")
    rows = {
        "gpus": [1, 2],
        "milli": [1000, 1000],
        "cpus": [1_000, 1_000],
        "mem": [4_096, 4_096],
        "type": [0, 0],
    }
    filled = _filled((spec, rows, 1, 0, 0))
    assert filled is not None
    bound, state, _, _, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    observer = SimObserver(builder, WorkloadFeaturizer.for_builder(builder))
    light = _light(state)
    g = light.groups[0]
    g.whole, g.cpu, g.mem = g.whole[:-1], g.cpu[:-1], g.mem[:-1]
    with pytest.raises(ValueError, match="do not hold the cluster's 3 nodes"):
        observer.observe(light.groups, RunningJobs(), np.array([0, 1]), 0.0, FeatureSampler(), 1, False, list)
    with pytest.raises(ValueError, match="the state has 2 groups"):
        observer.observe(
            light.groups * 2, RunningJobs(), np.array([0, 1]), 0.0, FeatureSampler(), 2, False, list
        )


def test_groups_of_mixed_integer_types_are_unsupported() -> None:
    """Arrays numba cannot take as one tuple type: ``UNSUPPORTED`` (the caller uses the view)."""
    groups = [
        {"name": "a", "gpu_type": "A", "count": 2, "gpus": 4, "cpus": 16, "mem_gib": 64},
        {"name": "b", "gpu_type": "A", "count": 2, "gpus": 4, "cpus": 16, "mem_gib": 64},
    ]
    spec = parse_cluster_spec({"name": "c", "node_groups": groups}, "test")
    rows = {
        "gpus": [1, 2],
        "milli": [1000, 1000],
        "cpus": [1_000, 1_000],
        "mem": [4_096, 4_096],
        "type": [0, 0],
    }
    filled = _filled((spec, rows, 0, 0, 0))
    assert filled is not None
    bound, state, _, _, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    observer = SimObserver(builder, WorkloadFeaturizer.for_builder(builder))
    light = _light(state)
    light.groups[1].whole = light.groups[1].whole.astype(np.int32)
    got = observer.observe(
        light.groups, RunningJobs(), np.array([0, 1]), 0.0, FeatureSampler(), 1, False, list
    )
    assert got is UNSUPPORTED and not observer.usable
