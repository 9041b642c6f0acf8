"""Per-job metrics, timeline integrals and window summaries against hand-computed numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.jobs import build_table
from shared.metrics import (
    Window,
    WindowMetrics,
    bounded_slowdown,
    busy_gpu_seconds,
    idle_gpu_seconds_while_waiting,
    integrate_steps,
    job_metrics,
    selection_index,
    summarize_window,
)
from shared.metrics.timeline import mean_over, value_at
from shared.scheduling.result import SimResult

NAN = float("nan")


# --- per job -----------------------------------------------------------------------------------


def test_per_job_three_jobs(three_jobs: SimResult) -> None:
    # wait = start - submit: A 0-0=0, B 100-10=90, C 20-20=0
    # JCT  = end - submit:   A 100, B 140, C 5
    # BSLD = max(1, JCT / max(runtime, 10)): A 100/100=1, B 140/50=2.8, C 5/10=0.5 -> 1
    jm = job_metrics(three_jobs)
    np.testing.assert_allclose(jm.wait, [0.0, 90.0, 0.0])
    np.testing.assert_allclose(jm.jct, [100.0, 140.0, 5.0])
    np.testing.assert_allclose(jm.bsld, [1.0, 2.8, 1.0])
    assert jm.n_unstarted == 0 and jm.n_unfinished == 0
    assert len(jm) == 3


def test_per_job_bound_is_configurable(three_jobs: SimResult) -> None:
    # bound 1 s: C = 5 / max(5, 1) = 1; bound 100 s: B = 140 / max(50, 100) = 1.4
    np.testing.assert_allclose(job_metrics(three_jobs, bsld_bound=1.0).bsld, [1.0, 2.8, 1.0])
    np.testing.assert_allclose(job_metrics(three_jobs, bsld_bound=100.0).bsld, [1.0, 1.4, 1.0])


def test_bounded_slowdown_values_and_nan() -> None:
    # 5 s job that took 20 s: 20 / max(5, 10) = 2; a NaN JCT stays NaN instead of becoming 1
    out = bounded_slowdown([20.0, NAN, 3.0], [5.0, 5.0, 100.0])
    assert out[0] == pytest.approx(2.0)
    assert math.isnan(out[1])
    assert out[2] == 1.0
    with pytest.raises(ValueError, match="positive"):
        bounded_slowdown([1.0], [1.0], bound=0.0)


def test_per_job_unstarted_counted(cut_off: SimResult) -> None:
    jm = job_metrics(cut_off)
    assert jm.n_unstarted == 1 and jm.n_unfinished == 1
    assert math.isnan(jm.wait[3]) and math.isnan(jm.jct[3]) and math.isnan(jm.bsld[3])
    assert not jm.started[3] and not jm.finished[3]


def test_per_job_index_errors(three_jobs: SimResult) -> None:
    with pytest.raises(IndexError):
        job_metrics(three_jobs, [0, 3])
    with pytest.raises(ValueError, match="one-dimensional"):
        job_metrics(three_jobs, [[0, 1]])


# --- timeline integrals ------------------------------------------------------------------------


def test_integrate_steps_clips_and_extends() -> None:
    t = [10.0, 20.0]
    v = [1.0, 3.0]
    # before t=10 the value is 0; the last step (3) holds forever
    assert integrate_steps(t, v, 0.0, 10.0) == 0.0
    assert integrate_steps(t, v, 5.0, 15.0) == pytest.approx(5.0)  # 1 * 5
    assert integrate_steps(t, v, 15.0, 30.0) == pytest.approx(5.0 + 30.0)  # 1*5 + 3*10
    assert integrate_steps(t, v, 12.0, 12.0) == 0.0
    assert integrate_steps([], [], 0.0, 10.0) == 0.0


def test_integrate_steps_duplicate_times() -> None:
    # two rows at t=5: the first lasts zero seconds, only the second counts
    assert integrate_steps([0.0, 5.0, 5.0], [1.0, 100.0, 2.0], 0.0, 10.0) == pytest.approx(5 + 10)


def test_integrate_steps_errors() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        integrate_steps([2.0, 1.0], [1.0, 1.0], 0.0, 3.0)
    with pytest.raises(ValueError, match="before its start"):
        integrate_steps([0.0], [1.0], 3.0, 1.0)
    with pytest.raises(ValueError, match="values"):
        integrate_steps([0.0, 1.0], [1.0], 0.0, 1.0)
    with pytest.raises(ValueError, match="queued"):
        idle_gpu_seconds_while_waiting([0.0], [1.0], [1, 1], 4, 0.0, 1.0)


def test_value_at_and_mean_over() -> None:
    t, v = [0.0, 10.0, 10.0, 20.0], [1.0, 2.0, 3.0, 4.0]
    # before the first row 0; at a time with two rows the later one (the state after both cycles)
    assert [value_at(t, v, x) for x in (-1.0, 0.0, 5.0, 10.0, 15.0, 25.0)] == [0.0, 1.0, 1.0, 3.0, 3.0, 4.0]
    # [5, 15]: 1 for 5 s, 3 for 5 s -> mean 2; an empty interval gives the value at its start
    assert mean_over(t, v, 5.0, 15.0) == pytest.approx(2.0)
    assert mean_over(t, v, 10.0, 10.0) == 3.0
    with pytest.raises(ValueError, match="before its start"):
        mean_over(t, v, 2.0, 1.0)


def test_timeline_integrals_three_jobs(three_jobs: SimResult) -> None:
    r = three_jobs
    # busy: 2*10 + 2*10 + 3*5 + 2*75 + 4*50 = 20 + 20 + 15 + 150 + 200 = 405 GPU-s
    assert busy_gpu_seconds(r.timeline_t, r.timeline_busy, 0.0, 150.0) == pytest.approx(405.0)
    # idle while queued > 0: [10,20) 2*10 + [20,25) 1*5 + [25,100) 2*75 = 20 + 5 + 150 = 175
    idle = idle_gpu_seconds_while_waiting(r.timeline_t, r.timeline_busy, r.timeline_queued, 4, 0.0, 150.0)
    assert idle == pytest.approx(175.0)


# --- window summary ----------------------------------------------------------------------------


def test_summarize_three_jobs(three_jobs: SimResult) -> None:
    m = summarize_window(three_jobs, range(3))
    assert (m.n_jobs, m.n_unstarted, m.n_unfinished, m.excluded) == (3, 0, 0, 0)
    # wait [0, 90, 0]: mean 30; sorted [0, 0, 90], linear percentiles at rank q/100 * 2:
    # p50 -> rank 1 = 0; p95 -> rank 1.9 = 0 + 0.9*90 = 81; p99 -> rank 1.98 = 88.2
    assert m.wait_s.mean == pytest.approx(30.0)
    assert (m.wait_s.p50, m.wait_s.p95, m.wait_s.p99) == pytest.approx((0.0, 81.0, 88.2))
    assert m.wait_s.n == 3
    # JCT [100, 140, 5]: mean 245/3; sorted [5, 100, 140]: p50 100, p95 100 + 0.9*40 = 136, p99 139.2
    assert m.jct_s.mean == pytest.approx(245.0 / 3.0)
    assert (m.jct_s.p50, m.jct_s.p95, m.jct_s.p99) == pytest.approx((100.0, 136.0, 139.2))
    # BSLD [1, 2.8, 1]: mean 1.6; sorted [1, 1, 2.8]: p50 1, p95 1 + 0.9*1.8 = 2.62, p99 2.764
    assert m.bsld.mean == pytest.approx(1.6)
    assert (m.bsld.p50, m.bsld.p95, m.bsld.p99) == pytest.approx((1.0, 2.62, 2.764))
    # life: t0 = first submit 0, t1 = last end 150; own span: first to last arrival, [0, 20]
    assert (m.t0_s, m.t1_s, m.makespan_s, m.last_arrival_s) == (0.0, 150.0, 150.0, 20.0)
    # utilization over [0, 20]: busy 2*10 + 2*10 = 40 GPU-s -> 40 / (4 * 20) = 0.5
    assert m.utilization == pytest.approx(0.5)
    # idle while waiting over [0, 20]: [10, 20) 2 idle GPUs -> 20 / 80 = 0.25
    assert m.idle_frac_while_waiting == pytest.approx(0.25)
    # queue over [0, 20]: 0 jobs for 10 s, 1 for 10 s -> mean 0.5, non-empty half the time
    assert (m.queue_mean, m.queued_frac) == pytest.approx((0.5, 0.5))
    # the totals cover the life [0, 150]: busy 405 GPU-s, idle while waiting 175 GPU-s
    assert m.busy_gpu_hours == pytest.approx(405.0 / 3600.0)
    assert m.idle_gpu_hours_while_waiting == pytest.approx(175.0 / 3600.0)
    assert m.capacity_gpus == 4.0 and m.policy == "hand"


def test_summarize_subwindow_counts_all_running_jobs(three_jobs: SimResult) -> None:
    # window = jobs B, C: own span [10, 20] (B's and C's submits), life [10, 150] (B's end).
    # A is outside the window but its 2 GPUs still count as busy: [10, 20) 2 busy -> 20 / 40 = 0.5,
    # 2 idle while B waits -> 0.5; B waits the whole span: queue 1, non-empty all the time
    m = summarize_window(three_jobs, Window(1, 2))
    assert m.label == "jobs[1:3]"
    assert (m.t0_s, m.t1_s, m.makespan_s, m.last_arrival_s) == (10.0, 150.0, 140.0, 20.0)
    assert m.utilization == pytest.approx(0.5)
    assert m.idle_frac_while_waiting == pytest.approx(0.5)
    assert (m.queue_mean, m.queued_frac) == (1.0, 1.0)
    # totals over the life: idle while waiting, all 175 GPU-s lie in [10, 100)
    assert m.idle_gpu_hours_while_waiting == pytest.approx(175.0 / 3600.0)
    assert m.wait_s.mean == pytest.approx(45.0)  # (90 + 0) / 2


def test_summarize_single_job_window(three_jobs: SimResult) -> None:
    # only C: its span is the instant 20, so the shares are those of the step in force at 20
    # (after that cycle: 3 busy GPUs, B waiting): utilization 3/4, 1 idle GPU while B waits -> 1/4
    m = summarize_window(three_jobs, [2])
    assert m.utilization == pytest.approx(0.75)
    assert m.idle_frac_while_waiting == pytest.approx(0.25)
    assert (m.queue_mean, m.queued_frac) == (1.0, 1.0)
    # its life [20, 25]: 1 GPU idle while B waits for 5 s
    assert m.idle_gpu_hours_while_waiting == pytest.approx(5.0 / 3600.0)
    assert m.makespan_s == 5.0


def test_summarize_unstarted_job_extends_window(cut_off: SimResult) -> None:
    # D never started: counted, not averaged. Stats cover the 3 finished jobs (same as before);
    # t1 = end of the timeline (160) because D's work is not done.
    # own span [0, 130] (D's submit): busy 2*10 + 2*10 + 3*5 + 2*75 + 4*30 = 325 -> 325 / 520
    #   idle while waiting: [10, 100) 20 + 5 + 150 = 175 ([100, 130) nobody waits) -> 175 / 520
    #   queue: 1 job during [10, 100) -> 90 / 130, and non-empty as long
    # life [0, 160]: busy 405 GPU-s; idle while waiting 175 + [150, 160) 4*10 = 215 GPU-s
    m = summarize_window(cut_off, slice(None))
    assert (m.n_jobs, m.n_unstarted, m.n_unfinished) == (4, 1, 1)
    assert m.wait_s.n == 3 and m.wait_s.mean == pytest.approx(30.0)
    assert m.jct_s.n == 3 and m.bsld.n == 3
    assert (m.t0_s, m.t1_s, m.last_arrival_s) == (0.0, 160.0, 130.0)
    assert m.utilization == pytest.approx(325.0 / 520.0)
    assert m.idle_frac_while_waiting == pytest.approx(175.0 / 520.0)
    assert (m.queue_mean, m.queued_frac) == pytest.approx((90.0 / 130.0, 90.0 / 130.0))
    assert m.busy_gpu_hours == pytest.approx(405.0 / 3600.0)
    assert m.idle_gpu_hours_while_waiting == pytest.approx(215.0 / 3600.0)
    assert math.isnan(m.job_waits_s[3])


def test_summarize_only_unstarted_job(cut_off: SimResult) -> None:
    # window = D alone: span the instant 130 (after that cycle 4 GPUs busy, D waiting): utilization
    # 1, nothing idle; life [130, 160]: 4 GPUs idle while D waits over [150, 160] = 40 GPU-s
    m = summarize_window(cut_off, [3])
    assert m.utilization == 1.0 and m.idle_frac_while_waiting == 0.0
    assert (m.queue_mean, m.queued_frac) == (1.0, 1.0)
    assert m.idle_gpu_hours_while_waiting == pytest.approx(40.0 / 3600.0)
    assert m.wait_s.n == 0 and math.isnan(m.wait_s.mean)
    d = m.to_json_dict()
    json.dumps(d, allow_nan=False)  # strict JSON: NaN statistics become null
    assert d["wait_s"]["mean"] is None and "job_waits_s" not in d


def test_a_long_job_does_not_dilute_the_window_utilization() -> None:
    # 4 GPUs: A (1 GPU) runs for 10^6 s; B and C (3 GPUs, 100 s each) arrive at 0 and 100.
    # Over the window's span [0, 100] all 4 GPUs are busy: utilization 1. Up to the last end
    # (10^6) it would be (4*200 + 1*(10^6 - 200)) / (4 * 10^6) = 0.25, the idle cluster the
    # issue saw (1.9% on openb at load 0.7, whose pods run to the trace end).
    jobs = build_table(
        ids=["A", "B", "C"], submit=[0.0, 0.0, 100.0], runtime=[1e6, 100.0, 100.0], gpus=[1, 3, 3]
    )
    result = SimResult(
        jobs=jobs,
        start=np.array([0.0, 0.0, 100.0]),
        end=np.array([1e6, 100.0, 200.0]),
        capacity_gpus=4,
        timeline_t=np.array([0.0, 100.0, 200.0, 1e6]),
        timeline_busy=np.array([4.0, 4.0, 1.0, 0.0]),
        timeline_queued=np.zeros(4, dtype=np.int64),
    )
    m = summarize_window(result, range(3))
    assert m.utilization == 1.0 and (m.queue_mean, m.queued_frac) == (0.0, 0.0)
    assert m.makespan_s == 1e6 and m.busy_gpu_hours == pytest.approx((800.0 + 1e6 - 200.0) / 3600.0)


def test_queue_statistics_read_back_from_json_without_them(three_jobs: SimResult) -> None:
    # summaries written before the queue statistics existed read back with NaN for them
    d = summarize_window(three_jobs, range(3)).to_json_dict()
    for key in ("queue_mean", "queued_frac", "last_arrival_s"):
        del d[key]
    back = WindowMetrics.model_validate(d)
    assert math.isnan(back.queue_mean) and math.isnan(back.queued_frac) and math.isnan(back.last_arrival_s)


def test_summarize_metric_mask_and_excluded(three_jobs: SimResult) -> None:
    # A is a warm-up job: dropped from the window (n_masked = 1); t0 becomes B's submit (10)
    three_jobs.metric_mask = np.array([False, True, True])
    m = summarize_window(three_jobs, range(3), excluded=7)
    assert (m.n_jobs, m.n_masked, m.excluded, m.t0_s) == (2, 1, 7, 10.0)
    unmasked = summarize_window(three_jobs, range(3), respect_metric_mask=False)
    assert (unmasked.n_jobs, unmasked.n_masked) == (3, 0)
    with pytest.raises(ValueError, match="no scored jobs"):
        summarize_window(three_jobs, [0])
    with pytest.raises(ValueError, match="excluded"):
        summarize_window(three_jobs, [1], excluded=-1)


def test_selection_forms_agree(three_jobs: SimResult) -> None:
    forms: list[object] = [
        Window(1, 2),
        range(1, 3),
        slice(1, 3),
        [1, 2],
        [2, 1, 1],
        np.array([False, True, True]),
        np.array([1, 2], dtype=np.int32),
    ]
    for form in forms:
        np.testing.assert_array_equal(selection_index(form, 3), [1, 2])  # type: ignore[arg-type]
    base = summarize_window(three_jobs, range(1, 3))
    assert summarize_window(three_jobs, np.array([False, True, True])) == base


def test_selection_errors(three_jobs: SimResult) -> None:
    with pytest.raises(IndexError):
        selection_index(range(2, 5), 3)
    with pytest.raises(IndexError):
        selection_index([-1], 3)
    with pytest.raises(ValueError, match="shape"):
        selection_index(np.array([True, False]), 3)
    with pytest.raises(TypeError):
        selection_index(np.array([0.5]), 3)
    with pytest.raises(ValueError, match="no scored jobs"):
        summarize_window(three_jobs, [])


def test_window_metrics_json_roundtrip(three_jobs: SimResult) -> None:
    m = summarize_window(three_jobs, Window(0, 3), excluded=2)
    text = json.dumps(m.to_json_dict(), allow_nan=False)
    back = WindowMetrics.model_validate_json(text)
    assert back.model_dump() == m.model_dump()
    assert back.job_waits_s == ()  # per-job waits stay in memory only


# --- properties --------------------------------------------------------------------------------


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[float], list[float], list[int], int, float, float]:
    capacity = draw(st.integers(min_value=1, max_value=64))
    n = draw(st.integers(min_value=0, max_value=30))
    gaps = draw(st.lists(st.floats(0.0, 1e4), min_size=n, max_size=n))
    t = np.cumsum(gaps).tolist()
    busy = draw(st.lists(st.floats(0.0, float(capacity)), min_size=n, max_size=n))
    queued = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    t0 = draw(st.floats(-1e3, 1e5))
    t1 = t0 + draw(st.floats(1e-3, 1e5))
    return t, busy, queued, capacity, t0, t1


@settings(max_examples=300, deadline=None)
@given(timelines())
def test_utilization_in_unit_interval(
    case: tuple[list[float], list[float], list[int], int, float, float],
) -> None:
    t, busy, queued, capacity, t0, t1 = case
    denom = capacity * (t1 - t0)
    util = busy_gpu_seconds(t, busy, t0, t1) / denom
    idle = idle_gpu_seconds_while_waiting(t, busy, queued, capacity, t0, t1) / denom
    eps = 1e-9
    assert -eps <= util <= 1.0 + eps
    assert -eps <= idle <= 1.0 + eps
    assert util + idle <= 1.0 + eps  # busy and idle-while-waiting GPU-seconds never overlap


@settings(max_examples=100, deadline=None)
@given(
    n_jobs=st.integers(1, 8),
    capacity=st.integers(1, 16),
    data=st.data(),
)
def test_summarize_window_utilization_property(n_jobs: int, capacity: int, data: st.DataObject) -> None:
    submit = sorted(data.draw(st.lists(st.floats(0, 1e3), min_size=n_jobs, max_size=n_jobs)))
    wait = data.draw(st.lists(st.floats(0, 1e3), min_size=n_jobs, max_size=n_jobs))
    runtime = data.draw(st.lists(st.floats(1, 1e3), min_size=n_jobs, max_size=n_jobs))
    n_rows = data.draw(st.integers(1, 20))
    t = np.sort(np.asarray(data.draw(st.lists(st.floats(0, 3e3), min_size=n_rows, max_size=n_rows))))
    busy = np.asarray(data.draw(st.lists(st.floats(0, capacity), min_size=n_rows, max_size=n_rows)))
    jobs = build_table(
        ids=[f"j{i}" for i in range(n_jobs)], submit=submit, runtime=runtime, gpus=[1] * n_jobs
    )
    start = jobs.submit + np.asarray(wait)
    result = SimResult(
        jobs=jobs,
        start=start,
        end=start + jobs.runtime,
        capacity_gpus=capacity,
        timeline_t=t,
        timeline_busy=busy,
        timeline_queued=np.ones(n_rows, dtype=np.int64),
    )
    m = summarize_window(result, range(n_jobs))
    assert m.makespan_s > 0
    assert -1e-9 <= m.utilization <= 1.0 + 1e-9
    assert -1e-9 <= m.idle_frac_while_waiting <= 1.0 + 1e-9
    # over the same span busy and idle-while-waiting GPUs never overlap
    assert m.utilization + m.idle_frac_while_waiting <= 1.0 + 1e-9
    assert -1e-9 <= m.queued_frac <= 1.0 + 1e-9 and m.queue_mean >= 0.0
    assert m.bsld.p50 >= 1.0
