"""The per-workload featurizer gives ``compute_features``'s numbers bit for bit, and the fit-matrix
route of single-node whole-GPU requests gives the histogram's.

Checkpoints were trained on ``compute_features``'s values, so "close" is not enough: every
comparison here is exact (``np.array_equal``), on random clusters filled by the simulator's own
placer, random queues (any subset, any order) and random times.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_features_ways import scenarios, start_some

from shared.domain.jobs import build_table
from shared.features import FeatureSampler, SamplingConfig, SimViewBuilder, compute_features
from shared.features.catalog import PREDICTED
from shared.features.fast import WorkloadFeaturizer
from shared.features.ways import _node_states, _whole_gpu_fit, distinct_requests, request_ways
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.state import ClusterState


def _predictions(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Runtime predictions as ``attach_predictions`` leaves them, every case mixed: a prediction
    with its band, a cold-start one (no band: NaN bounds), and none at all (NaN)."""
    predicted = rng.choice([1.0, 45.0, 600.0, 7_200.0, 2e6], n)
    low = predicted / rng.choice([1.0, 1.5, 20.0, 5e3], n)
    high = predicted * rng.choice([1.0, 2.0, 30.0], n)
    kind = rng.integers(0, 3, n)  # 0: full, 1: cold start, 2: none
    low[kind > 0] = high[kind > 0] = np.nan
    predicted[kind == 2] = np.nan
    return {"predicted": predicted, "predicted_lo": low, "predicted_hi": high}


def _filled(
    scenario: tuple,  # type: ignore[type-arg]
    predictions: bool = False,
) -> tuple[BoundWorkload, ClusterState, list[int], list[int], np.random.Generator] | None:
    """The scenario's workload, bound, and a cluster state filled with some of its jobs; with
    ``predictions``, the jobs carry runtime predictions (``_predictions``; drawn after the rest)."""
    spec, rows, n_running, slack, seed = scenario
    n = len(rows["gpus"])
    rng = np.random.default_rng(seed)
    gpus = [g if m == 1000 else 1 for g, m in zip(rows["gpus"], rows["milli"], strict=True)]
    table = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=rng.uniform(0, 5_000, n).round(1).tolist(),
        runtime=[100.0] * n,
        estimate=rng.choice([30.0, 600.0, 7_200.0, 9e5], n).tolist(),
        gpus=gpus,
        gpu_milli=rows["milli"],
        cpus_milli=rows["cpus"],
        mem_mib=rows["mem"],
        type_set=rows["type"],
        type_sets=[(), ("A",), ("B",)],
        user=rng.integers(0, 4, n).tolist(),
        vc=rng.integers(0, 3, n).tolist(),
        vcs=["a", "b", "c"],
    )
    if predictions:
        table = table.with_fields(**_predictions(n, rng))
    bound = bind_jobs(table, spec, node_slack=slack)
    if len(bound.jobs) == 0:
        return None
    state, running, run_group = start_some(bound, rng.permutation(len(bound.jobs))[:n_running], slack)
    return bound, state, running, run_group, rng


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_featurizer_equals_compute_features_exactly(scenario: tuple) -> None:  # type: ignore[type-arg]
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    featurizer = WorkloadFeaturizer.for_builder(builder)
    now = float(rng.uniform(0, 6_000))
    ends = np.sort(now + rng.uniform(-50, 5_000, len(running)))  # some past their estimate
    cv = builder.cluster_view(state, running, run_group, ends)
    for _ in range(3):
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        reference = compute_features(builder.queue_view(queued), cv, now)
        for version in (None, 7, 7):  # uncached, then cached under one version
            values = featurizer.values(queued, now, cv, version)
            assert np.array_equal(values.job, reference.job)
            assert np.array_equal(values.cluster, reference.cluster)
            assert np.array_equal(values.ways, reference.ways)
        for sampling in (SamplingConfig(), SamplingConfig(mode="fixed")):
            sampler = FeatureSampler(sampling)
            selection = sampler.select(reference)
            obs, critic = selection.apply(reference)
            o = featurizer.observe(queued, now, cv, sampler)
            assert o.selection == selection
            assert o.obs.dtype == np.float32 and o.obs.flags["C_CONTIGUOUS"]
            assert np.array_equal(o.obs, obs.astype(np.float32))
            assert np.array_equal(o.critic, critic.astype(np.float32))
            assert np.array_equal(o.can_now, reference.column("can_schedule_now") == 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans())
def test_predicted_set_equals_compute_features_exactly(scenario: tuple, predictions: bool) -> None:  # type: ignore[type-arg]
    """The ``predicted`` set: the featurizer's pool and observations are ``compute_features``'s,
    with the workload's predictions (every kind: banded, cold start, none) and without any."""
    filled = _filled(scenario, predictions)
    if filled is None:
        return
    bound, state, running, run_group, rng = filled
    jobs = bound.jobs
    builder = SimViewBuilder(bound, jobs.estimate)
    featurizer = WorkloadFeaturizer.for_builder(builder, features="predicted")
    now = float(rng.uniform(0, 6_000))
    ends = np.sort(now + rng.uniform(-50, 5_000, len(running)))
    cv = builder.cluster_view(state, running, run_group, ends)
    for _ in range(3):
        queued = rng.permutation(len(jobs))[: int(rng.integers(1, len(jobs) + 1))]
        reference = compute_features(builder.queue_view(queued), cv, now, features="predicted")
        assert reference.job.shape == (len(queued), len(PREDICTED.job_features))
        classic = compute_features(builder.queue_view(queued), cv, now)
        assert np.array_equal(reference.job[:, : classic.job.shape[1]], classic.job)  # classic + 4
        if not predictions:
            assert not reference.column("predicted_known").any()
        for version in (None, 7, 7):
            values = featurizer.values(queued, now, cv, version)
            assert values.job_names == PREDICTED.job_features
            assert np.array_equal(values.job, reference.job)
            assert np.array_equal(values.cluster, reference.cluster)
        for sampling in (
            SamplingConfig(feature_set="predicted"),
            SamplingConfig(feature_set="predicted", mode="fixed"),
            SamplingConfig(feature_set="predicted", n_observation=21, n_critic=7),
        ):
            sampler = FeatureSampler(sampling)
            selection = sampler.select(reference)
            obs, critic = selection.apply(reference)
            o = featurizer.observe(queued, now, cv, sampler)
            assert o.selection == selection
            assert np.array_equal(o.obs, obs.astype(np.float32))
            assert np.array_equal(o.critic, critic.astype(np.float32))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_single_node_whole_requests_match_the_histogram_route(scenario: tuple) -> None:  # type: ignore[type-arg]
    """A whole-GPU request one node holds is the gang rule with M = 1: the fit matrix must give the
    histogram's ways, stranded GPUs and feasibility."""
    filled = _filled(scenario)
    if filled is None:
        return
    bound, state, running, run_group, _ = filled
    builder = SimViewBuilder(bound, bound.jobs.estimate)
    cv = builder.cluster_view(state, running, run_group, np.zeros(len(running)))
    req = distinct_requests(builder.all_jobs(), cv)
    rows = np.flatnonzero(req.whole)
    if not len(rows):
        return
    nodes = _node_states(cv)
    got = request_ways(req, rows, cv, nodes)
    w, s, f = _whole_gpu_fit(nodes, cv, req.gpus[rows], req.cpu[rows], req.mem[rows], req.m_nodes[rows])
    assert np.array_equal(got[:, :, 0], w)
    assert np.array_equal(got[:, :, 1], s)
    assert np.array_equal(got[:, :, 2] > 0, f & req.need_ok[rows])


def test_cache_is_dropped_when_the_version_changes() -> None:
    """Equal versions promise an unchanged state; a new version must not reuse placement counts."""
    from feature_views import cluster_view, queue_view

    qv = queue_view([dict(gpus=2, cpu=0, mem=0, eligible=[0]), dict(gpus=1, cpu=0, mem=0, eligible=[0])], 1)
    empty = cluster_view(groups=[(2, 2, 8_000, 32_768)], free=[(2, 8_000, 32_768)] * 2)
    featurizer = WorkloadFeaturizer(qv, empty)
    full = cluster_view(groups=[(2, 2, 8_000, 32_768)], free=[(0, 0, 0), (1, 4_000, 16_384)])
    idx = np.arange(2)
    assert featurizer.values(idx, 0.0, empty, version=1).column("can_schedule_now").tolist() == [1, 1]
    # the 2-GPU job no longer fits anywhere, the 1-GPU job on node 1 only
    now_full = featurizer.values(idx, 0.0, full, version=2)
    assert now_full.column("can_schedule_now").tolist() == [0, 1]
    assert now_full.ways.tolist() == [0, 1]
