"""Runtime-estimate models: oracle, noisy (over-estimates on the wall-time grid), history."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.jobs import JobTable, build_table
from shared.traces import LoadedTrace, apply_estimates

MIN, HOUR, DAY = 60.0, 3600.0, 86400.0
# The grid as users type it (written out here, not imported from the module under test).
GRID = [
    5 * MIN,
    10 * MIN,
    15 * MIN,
    30 * MIN,
    HOUR,
    2 * HOUR,
    4 * HOUR,
    6 * HOUR,
    8 * HOUR,
    12 * HOUR,
    DAY,
    2 * DAY,
    3 * DAY,
]


def on_grid(value: float) -> bool:
    return value in GRID or (value > 3 * DAY and value % DAY == 0)


def table(
    submit: list[float],
    runtime: list[float],
    users: list[str] | None = None,
    vcs: list[str] | None = None,
    estimate: list[float] | None = None,
) -> JobTable:
    n = len(submit)
    user_names = sorted(set(users or ["unknown"]))
    vc_names = sorted(set(vcs or ["default"]))
    return build_table(
        ids=[f"j{i}" for i in range(n)],
        submit=submit,
        runtime=runtime,
        estimate=estimate,
        gpus=[1] * n,
        user=[user_names.index(u) for u in (users or ["unknown"] * n)],
        vc=[vc_names.index(v) for v in (vcs or ["default"] * n)],
        users=user_names,
        vcs=vc_names,
    )


def test_oracle_equals_runtime_and_replaces_given_estimates() -> None:
    t = table([0, 1, 2], [50.0, 0.2, 7000.0], estimate=[9999.0, math.nan, math.nan])
    out = apply_estimates(t, "oracle")
    np.testing.assert_array_equal(out.estimate, [50.0, 1.0, 7000.0])  # never below 1 s
    np.testing.assert_array_equal(t.estimate[1:], [math.nan, math.nan])  # input untouched
    assert any("oracle" in note for note in out.meta.notes)


def test_noisy_keeps_given_estimates() -> None:
    t = table([0, 1], [50.0, 60.0], estimate=[123.0, math.nan])
    out = apply_estimates(t, "noisy", seed=3)
    assert out.estimate[0] == 123.0
    assert out.estimate[1] >= 60.0 and on_grid(out.estimate[1])


def test_noisy_is_seeded() -> None:
    t = table(list(range(200)), [float(10 + 37 * i) for i in range(200)])
    a = apply_estimates(t, "noisy", seed=1).estimate
    b = apply_estimates(t, "noisy", seed=1).estimate
    c = apply_estimates(t, "noisy", seed=2).estimate
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@settings(max_examples=60, deadline=None)
@given(
    runtimes=st.lists(st.floats(min_value=0.0, max_value=30 * DAY), min_size=1, max_size=40),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_noisy_over_estimates_on_the_grid(runtimes: list[float], seed: int) -> None:
    t = table([float(i) for i in range(len(runtimes))], runtimes)
    est = apply_estimates(t, "noisy", seed=seed).estimate
    assert np.all(est >= t.runtime)
    assert np.all(est >= 1.0)
    assert all(on_grid(float(e)) for e in est)


def test_noisy_on_real_trace_over_estimates(synthetic: LoadedTrace) -> None:
    est = apply_estimates(synthetic.table, "noisy", seed=0).estimate
    assert np.all(est >= synthetic.table.runtime)
    ratio = est / synthetic.table.runtime
    assert np.median(ratio) > 1.2  # users over-estimate, typically by well over 20%


def test_history_uses_only_finished_past_jobs() -> None:
    # user a: j0 [0, 100), j1 [10, 210), j2 [150, 550); j2 sees only j0 finished, j3 (at 300) sees
    # j0 and j1 but not j2, which is still running
    t = table([0, 10, 150, 300], [100.0, 200.0, 400.0, 30.0], users=["a"] * 4)
    est = apply_estimates(t, "history", seed=0, safety=1.5).estimate
    assert est[2] == 100.0 * 1.5
    assert est[3] == (100.0 + 200.0) / 2 * 1.5
    # j0, j1 have no finished job before them: the noisy fallback
    assert on_grid(est[0]) and est[0] >= 100.0
    assert on_grid(est[1]) and est[1] >= 200.0


def test_history_counts_a_job_ending_exactly_at_submit() -> None:
    t = table([0, 100], [100.0, 5.0], users=["a", "a"])
    assert apply_estimates(t, "history", seed=0, safety=1.0).estimate[1] == 100.0


def test_history_last_two_by_finish_time() -> None:
    # j0 ends at 1000, j1 at 20, j2 at 60; at 2000 the last two finished are j0 (1000) and j2 (60)
    t = table([0, 10, 20, 2000], [1000.0, 10.0, 40.0, 5.0], users=["a"] * 4)
    est = apply_estimates(t, "history", seed=0, safety=1.0).estimate
    assert est[3] == (1000.0 + 40.0) / 2


def test_history_ignores_the_future() -> None:
    base = table([0, 100, 200, 300], [50.0, 60.0, 70.0, 80.0], users=["a"] * 4)
    changed = base.with_fields(runtime=np.array([50.0, 60.0, 70.0, 9999.0]))
    a = apply_estimates(base, "history", seed=0).estimate
    b = apply_estimates(changed, "history", seed=0).estimate
    np.testing.assert_array_equal(a[:3], b[:3])


def test_history_other_users_do_not_leak() -> None:
    t = table([0, 200], [100.0, 10.0], users=["a", "b"], vcs=["v1", "v2"])
    est = apply_estimates(t, "history", seed=0, safety=1.0).estimate
    assert on_grid(est[1])  # b has no history and its VC none either: noisy


def test_history_falls_back_to_vc_for_unknown_users() -> None:
    t = table([0, 10, 500], [100.0, 300.0, 5.0], vcs=["v1", "v1", "v1"])  # all users unknown
    est = apply_estimates(t, "history", seed=0, safety=2.0).estimate
    assert est[2] == (100.0 + 300.0) / 2 * 2.0


def test_history_prefers_user_over_vc() -> None:
    t = table([0, 10, 500], [100.0, 300.0, 5.0], users=["a", "b", "a"], vcs=["v"] * 3)
    est = apply_estimates(t, "history", seed=0, safety=1.0).estimate
    assert est[2] == 100.0


def test_history_never_below_one_second() -> None:
    t = table([0, 0, 5], [0.0, 0.0, 3.0], users=["a"] * 3)
    est = apply_estimates(t, "history", seed=0).estimate
    assert np.all(est >= 1.0)


def test_history_is_deterministic_on_philly(philly: LoadedTrace) -> None:
    a = apply_estimates(philly.table, "history", seed=4).estimate
    b = apply_estimates(philly.table, "history", seed=4).estimate
    np.testing.assert_array_equal(a, b)
    assert np.all(a >= 1.0) and not np.isnan(a).any()


def test_trace_estimates_are_kept_by_history(hpc2n: LoadedTrace) -> None:
    t = hpc2n.table
    out = apply_estimates(t, "history", seed=0)
    given_mask = ~np.isnan(t.estimate)
    np.testing.assert_array_equal(out.estimate[given_mask], np.maximum(t.estimate[given_mask], 1.0))


def test_unknown_model() -> None:
    with pytest.raises(ValueError, match="unknown estimate model"):
        apply_estimates(table([0], [1.0]), "magic")
