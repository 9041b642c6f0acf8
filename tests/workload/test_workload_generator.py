"""The generator's contract: determinism, invariants, and the statistics it was calibrated to."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable
from shared.workload import GeneratorParams, generate_for_cluster, generate_workload, stats
from shared.workload.params import WeightedTypeSet

EMBEDDED_TYPES = ("A10", "T4", "V100M16", "V100M32")


def assert_same(a: JobTable, b: JobTable) -> None:
    for name in ("ids", "submit", "runtime", "estimate", "gpus", "gpu_milli", "type_set", "cpus_milli"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("mem_mib", "user", "vc", "qos"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.type_sets == b.type_sets and a.users == b.users and a.vcs == b.vcs
    assert a.meta == b.meta


def check_invariants(t: JobTable, params: GeneratorParams, types: tuple[str, ...]) -> None:
    n = len(t)
    assert t.submit[0] == 0.0
    assert np.all(np.diff(t.submit) >= 0)
    assert np.all(t.runtime >= 1.0) and np.all(t.runtime <= params.max_runtime_s)
    assert np.all(t.estimate >= t.runtime)
    assert np.all(np.isin(t.estimate, params.estimate_ladder_s))
    assert np.all(t.gpus >= 1) and set(np.unique(t.gpus)) <= set(params.gpu_counts)
    frac = t.gpu_milli < WHOLE_GPU_MILLI
    assert np.all(t.gpus[frac] == 1)
    assert np.all((t.gpu_milli[frac] >= 1) & (t.gpu_milli[frac] <= 999))
    assert np.all(t.gpu_milli[~frac] == WHOLE_GPU_MILLI)
    assert t.type_sets[0] == ()
    for ts in t.type_sets:
        assert set(ts) <= set(types)
        assert set(ts) != set(types) or not ts  # "every type" is written as "any type"
    assert t.type_set.min() >= 0 and t.type_set.max() < len(t.type_sets)
    assert np.all(t.type_set[t.gpus > params.max_constrained_gpus] == 0)
    assert np.all(t.cpus_milli > 0) and np.all(t.mem_mib > 0)
    assert t.user.max() < len(t.users) and t.vc.max() < len(t.vcs)
    assert len(np.unique(t.ids)) == n
    assert t.meta.has_estimates


def test_same_seed_same_workload(params: GeneratorParams) -> None:
    a = generate_workload(5_000, 42, params, gpu_types=EMBEDDED_TYPES)
    b = generate_workload(5_000, 42, GeneratorParams(), gpu_types=EMBEDDED_TYPES)
    assert_same(a, b)


def test_different_seeds_differ() -> None:
    a, b = generate_workload(2_000, 1), generate_workload(2_000, 2)
    assert not np.array_equal(a.submit, b.submit)
    assert not np.array_equal(a.runtime, b.runtime)
    assert not np.array_equal(a.gpus, b.gpus)


def test_parts_use_independent_streams() -> None:
    """Changing the type-set table must not move arrivals or runtimes of the same seed."""
    base = generate_workload(3_000, 5)
    other = generate_workload(
        3_000, 5, GeneratorParams().replace(unmatched_types="drop", max_constrained_gpus=1)
    )
    np.testing.assert_array_equal(base.submit, other.submit)
    np.testing.assert_array_equal(base.runtime, other.runtime)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("types", [EMBEDDED_TYPES, None, ("T4",), ("X1", "X2", "X3")])
def test_invariants(seed: int, types: tuple[str, ...] | None, params: GeneratorParams) -> None:
    t = generate_workload(8_000, seed, gpu_types=types)
    check_invariants(t, params, types if types is not None else params.type_universe)


def test_default_workload_invariants(default_workload: JobTable, params: GeneratorParams) -> None:
    check_invariants(default_workload, params, EMBEDDED_TYPES)
    assert len(default_workload) == 20_000


def test_no_types_means_no_constraints() -> None:
    t = generate_workload(2_000, 0, gpu_types=())
    assert t.type_sets == [()] and np.all(t.type_set == 0)


def test_unknown_types_are_redrawn_or_dropped(params: GeneratorParams) -> None:
    types = ("X1", "X2", "X3")
    redrawn = generate_workload(20_000, 3, gpu_types=types)
    dropped = generate_workload(20_000, 3, params.replace(unmatched_types="drop"), gpu_types=types)
    assert np.all(dropped.type_set == 0)
    # Redrawn sets keep their size: openb's constrained sets have 1-6 types, so some become singles.
    sizes = {len(ts) for ts in redrawn.type_sets}
    assert 1 in sizes and sizes <= {0, 1, 2}  # a set of 3+ covers all three types: no constraint
    assert 0.2 < stats.type_constrained_fraction(redrawn) < 0.4


def test_empty_and_single() -> None:
    assert len(generate_workload(0, 0)) == 0
    one = generate_workload(1, 0)
    assert len(one) == 1 and one.submit[0] == 0.0


def test_generate_for_cluster_matches_embedded_default(
    embedded: ClusterSpec, default_workload: JobTable
) -> None:
    assert_same(generate_for_cluster(embedded, 20_000, 0), default_workload)


def test_target_load_scales_rate(params: GeneratorParams) -> None:
    rate = params.mean_arrival_rate()
    assert params.for_capacity(640).mean_arrival_rate() == pytest.approx(2 * rate)
    assert params.for_capacity(320, load=0.425).mean_arrival_rate() == pytest.approx(rate / 2)
    assert params.replace(target_load=None).mean_arrival_rate() == pytest.approx(
        1 / params.mean_interarrival_s
    )


# ---- statistics against the parameters ------------------------------------------------------


def test_gpu_count_frequencies(big_workload: JobTable, params: GeneratorParams) -> None:
    n = len(big_workload)
    for g, p in zip(params.gpu_counts, params.gpu_count_probs, strict=True):
        observed = float(np.mean(big_workload.gpus == g))
        tol = max(4 * np.sqrt(p * (1 - p) / n), 0.002)
        assert abs(observed - p) < tol, (g, observed, p)


def test_median_duration(big_workload: JobTable, params: GeneratorParams) -> None:
    assert np.median(big_workload.runtime) == pytest.approx(params.runtime_quantile(0.5), rel=0.10)
    # Per class, compare probabilities, not medians: the 4+-GPU law is bimodal and a sample median of
    # 2,500 jobs falling between its modes would swing by +-20% for nothing.
    for sel, g in ((big_workload.gpus == 1, 1), (big_workload.gpus == 2, 2), (big_workload.gpus >= 4, 4)):
        below = float(np.mean(big_workload.runtime[sel] <= params.runtime_quantile(0.5, g)))
        assert below == pytest.approx(0.5, abs=4 * 0.5 / np.sqrt(sel.sum()))


def test_duration_tail(big_workload: JobTable, params: GeneratorParams) -> None:
    for q in (0.1, 0.9):
        assert np.quantile(big_workload.runtime, q) == pytest.approx(params.runtime_quantile(q), rel=0.10)


def test_gpu_seconds_match_expectation(params: GeneratorParams) -> None:
    """The analytic E[demand x runtime] behind target_load agrees with a large sample."""
    t = generate_workload(200_000, 11)
    observed = float(np.mean(t.gpu_demand * t.runtime))
    assert observed == pytest.approx(params.expected_gpu_seconds_per_job(), rel=0.06)


def test_fractional_jobs(big_workload: JobTable, params: GeneratorParams) -> None:
    frac = big_workload.gpu_milli < WHOLE_GPU_MILLI
    assert frac.mean() == pytest.approx(params.fractional_fraction, abs=0.01)
    observed_mean_share = big_workload.gpu_milli[frac].mean() / 1000
    assert observed_mean_share == pytest.approx(params.mean_fractional_share, rel=0.03)
    assert set(np.unique(big_workload.gpu_milli[frac])) <= set(params.fractional_shares)


def test_type_constrained_fraction(big_workload: JobTable, params: GeneratorParams) -> None:
    """On openb's own types no set is dropped or merged, so the fraction follows the tables."""

    def nonempty(table: tuple[WeightedTypeSet, ...]) -> float:
        return sum(ws.weight for ws in table if ws.types) / sum(ws.weight for ws in table)

    frac = float(np.mean(big_workload.gpu_milli < WHOLE_GPU_MILLI))
    whole = float(np.mean((big_workload.gpu_milli == WHOLE_GPU_MILLI) & (big_workload.gpus <= 8)))
    expected = frac * nonempty(params.type_sets_fractional) + whole * nonempty(params.type_sets_whole)
    assert stats.type_constrained_fraction(big_workload) == pytest.approx(expected, abs=0.01)


def test_arrivals_are_bursty(big_workload: JobTable, default_workload: JobTable) -> None:
    assert stats.interarrival_cv(big_workload.submit) > 1.5
    assert stats.interarrival_cv(default_workload.submit) > 1.5
    assert stats.same_second_fraction(big_workload.submit) > 0.03
    assert stats.hourly_dispersion(big_workload.submit) > 10


def test_plain_poisson_when_modulation_is_off(params: GeneratorParams) -> None:
    """With bursts, batches and cycles off the engine must give a Poisson process of the set rate."""
    flat = params.replace(
        burst_multiplier=1.0,
        diurnal_amplitude=0.0,
        weekend_factor=1.0,
        batch_continue_prob=0.0,
        target_load=None,
    )
    t = generate_workload(50_000, 4, flat)
    gaps = np.diff(t.submit)
    assert gaps.mean() == pytest.approx(params.mean_interarrival_s, rel=0.03)
    assert stats.interarrival_cv(t.submit) == pytest.approx(1.0, abs=0.05)


def test_estimates_over_estimate(big_workload: JobTable, params: GeneratorParams) -> None:
    ratio = big_workload.estimate / big_workload.runtime
    assert np.all(ratio >= 1.0)
    assert np.median(ratio) > 1.0
    assert np.mean(big_workload.estimate == params.estimate_ladder_s[-1]) > 0.02  # maximum requesters


def test_users_and_vcs_are_skewed(big_workload: JobTable, params: GeneratorParams) -> None:
    users = np.bincount(big_workload.user, minlength=params.n_users)
    assert users.max() / len(big_workload) > 0.05  # Zipf: the top user submits a large share
    assert stats.zipf_mle(np.bincount(big_workload.vc)) == pytest.approx(params.vc_zipf_s, abs=0.15)
    # each user lives in exactly one VC
    pairs = np.unique(np.stack([big_workload.user, big_workload.vc]), axis=1)
    assert len(np.unique(pairs[0])) == pairs.shape[1]
