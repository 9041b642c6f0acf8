"""``SimViewBuilder.cluster_view`` assembles its view without ``ClusterView``'s constructor (when
value checks are off): every field, derived ones included, must equal the constructor's.

The featurizer tests compare ``WorkloadFeaturizer`` with ``compute_features`` on the builder's
views, so a wrong derived field (idle nodes, free GPUs per group) would fool both sides; here the
assembled view is compared with the one the constructor builds from the same arrays, with the
constructor's value checks on, along random starts and ends on random clusters (fractional GPUs,
several groups, node slack).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fast_ways import _Run
from test_features_fast import _filled
from test_features_ways import scenarios

from shared.domain.cluster import parse_cluster_spec
from shared.features import ClusterView, SimViewBuilder


def _fields(view: ClusterView) -> dict[str, object]:
    names = [f.name for f in dataclasses.fields(ClusterView)]
    assert set(vars(view)) == set(names)  # nothing missing, nothing extra
    return {name: getattr(view, name) for name in names}


def _assert_same(fast: ClusterView, slow: ClusterView) -> None:
    got, expected = _fields(fast), _fields(slow)
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            other = got[name]
            assert isinstance(other, np.ndarray), name
            assert other.dtype == value.dtype and other.shape == value.shape, name
            assert np.array_equal(other, value), name
        else:
            assert got[name] == value, name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), compiled=st.booleans())
def test_assembled_view_equals_the_constructors(scenario: tuple, compiled: bool) -> None:  # type: ignore[type-arg]
    """Both assemblies: the compiled one (``kernels_view.view_kernel``, the default) and numpy's."""
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, _, _, rng = filled
    fast = SimViewBuilder(bound, bound.jobs.estimate)
    assert fast.compiled
    fast.compiled = compiled
    checked = SimViewBuilder(bound, bound.jobs.estimate, check_values=True)
    run = _Run(bound, state, int(rng.integers(2**31)))
    now = 0.0
    for _ in range(12):
        now += float(rng.uniform(0, 300))
        run.step(now, burst=int(rng.integers(1, 4)))
        running, groups, ends = run.running()
        view = fast.cluster_view(state, running, groups, ends)
        _assert_same(view, checked.cluster_view(state, running, groups, ends))
        # the view is a snapshot: later starts and ends do not change it
        free = view.free_gpus.copy()
        run.step(now, burst=2)
        assert np.array_equal(view.free_gpus, free)


def test_assembled_views_share_read_only_shape_arrays() -> None:
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": "a", "gpu_type": "A", "count": 3, "gpus": 4, "cpus": 16, "mem_gib": 64},
                {"name": "b", "gpu_type": "B", "count": 2, "gpus": 2, "cpus": 8, "mem_gib": 32},
            ],
        },
        "test",
    )
    rows = {"gpus": [1, 2, 1], "milli": [1000, 1000, 500], "cpus": [-1] * 3, "mem": [-1] * 3, "type": [0] * 3}
    filled = _filled((spec, rows, 2, 0, 1))
    assert filled is not None
    bound, state, _, _, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    a = builder.cluster_view(state, [], [], [])
    b = builder.cluster_view(state, [], [], [])
    assert a.group_of_node is b.group_of_node  # built once per cluster
    with pytest.raises(ValueError):
        a.group_of_node[0] = 1  # shared by every view: read-only
    with pytest.raises(ValueError, match="differ in length"):
        builder.cluster_view(state, [0], [], [])


def test_compiled_view_refuses_a_state_of_another_size() -> None:
    """A state whose groups hold other node counts than the builder's cluster is refused before
    anything is written (the kernel writes by position)."""
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
    bound, state, running, groups, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    ends = np.zeros(len(running))
    builder.cluster_view(state, running, groups, ends)  # the right size: fine
    gs = state.groups[0]
    gs.whole, gs.cpu, gs.mem = gs.whole[:-1], gs.cpu[:-1], gs.mem[:-1]
    with pytest.raises(ValueError, match="do not hold the cluster's 3 nodes"):
        builder.cluster_view(state, running, groups, ends)


def test_groups_of_mixed_integer_types_fall_back_to_numpy() -> None:
    """Groups whose arrays are not all of one type (numba takes the groups as one tuple type):
    numpy's assembly, the same view."""
    groups = [
        {"name": "a", "gpu_type": "A", "count": 2, "gpus": 4, "cpus": 16, "mem_gib": 64},
        {"name": "b", "gpu_type": "B", "count": 3, "gpus": 8, "cpus": 32, "mem_gib": 128},
    ]
    spec = parse_cluster_spec({"name": "c", "node_groups": groups}, "test")
    rows = {
        "gpus": [1, 2, 8],
        "milli": [1000] * 3,
        "cpus": [1_000] * 3,
        "mem": [4_096] * 3,
        "type": [0, 0, 0],
    }
    filled = _filled((spec, rows, 2, 0, 1))
    assert filled is not None
    bound, state, running, run_group, _ = filled
    gs = state.groups[0]
    gs.whole, gs.cpu, gs.mem = gs.whole.astype(np.int32), gs.cpu.astype(np.int32), gs.mem.astype(np.int32)
    ends = np.arange(len(running), dtype=np.float64)
    numpy_builder = SimViewBuilder(bound, bound.jobs.estimate)
    numpy_builder.compiled = False
    checked = SimViewBuilder(bound, bound.jobs.estimate, check_values=True)
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    view = builder.cluster_view(state, running, run_group, ends)
    assert not builder.compiled  # numpy's assembly from now on
    _assert_same(view, checked.cluster_view(state, running, run_group, ends))
    _assert_same(view, numpy_builder.cluster_view(state, running, run_group, ends))
