"""No job the predictor could not have seen leaks into a prediction (issue 19, item 1).

The rule: a prediction at time t (a job's submit) uses only jobs whose logged finish (submit +
logged wait + runtime) is strictly before t. The proof by perturbation: change the runtimes of
every job that finishes after t (so much that any use of them would show) and check that every
prediction made at or before t is bit-for-bit the same, while later ones do change.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.domain.jobs import build_table
from shared.prediction import SOURCES, PredictorSettings, fit_schedule, logged_finish, predict_runtimes
from shared.traces import load_trace
from tests.prediction.helpers import FAST, synthetic_jobs


def test_jobs_finishing_after_t_do_not_change_predictions_up_to_t() -> None:
    table = synthetic_jobs(500)
    finish = logged_finish(table)
    t = float(table.submit[330])
    later = finish > t
    # the wait matters: some of the perturbed jobs would count as done by submit + runtime alone
    assert np.any(later & (table.submit + table.runtime < t))
    perturbed = table.with_fields(runtime=np.where(later, table.runtime * 7.0 + 13.0, table.runtime))
    assert np.all(logged_finish(perturbed)[later] > t)
    a, b = predict_runtimes(table, FAST), predict_runtimes(perturbed, FAST)
    upto = table.submit <= t
    assert (a.source[upto] == SOURCES.index("model")).sum() > 150, "the model must serve most of them"
    for name in ("runtime", "low", "high", "source", "fit"):
        np.testing.assert_array_equal(getattr(a, name)[upto], getattr(b, name)[upto], err_msg=name)
    np.testing.assert_array_equal(a.fit_times[a.fit_times < t], b.fit_times[b.fit_times < t])
    # and the perturbation is visible to the predictions made after t: the test has teeth
    assert not np.allclose(a.runtime[~upto], b.runtime[~upto])


def test_every_job_uses_the_latest_fit_made_strictly_before_its_submit() -> None:
    table = synthetic_jobs(500, seed=3)
    pred = predict_runtimes(table, FAST)
    served = pred.fit >= 0
    schedule, _ = fit_schedule(logged_finish(table), FAST)
    used_at = pred.fit_times[pred.fit[served]]
    assert np.isin(pred.fit_times, schedule).all()
    assert np.all(used_at < table.submit[served])
    nxt = np.searchsorted(schedule, used_at, side="right")
    later_fit = np.where(nxt < len(schedule), schedule[np.minimum(nxt, len(schedule) - 1)], np.inf)
    assert np.all(later_fit >= table.submit[served]), "a newer fit existed before the submit"


def test_fit_schedule_counts_batches_and_includes_ties() -> None:
    s = PredictorSettings(min_train=3, retrain_jobs=3, retrain_hours=1e6, retrain_growth=10.0)
    times, counts = fit_schedule(np.arange(1.0, 11.0), s)
    assert times.tolist() == [3.0, 6.0, 9.0] and counts.tolist() == [3, 6, 9]
    # jobs finishing in the same second are learned together: the first fit takes all three 2s
    tied = PredictorSettings(min_train=2, retrain_jobs=3, retrain_growth=10.0)
    times, counts = fit_schedule(np.asarray([1.0, 2.0, 2.0, 2.0, 3.0]), tied)
    assert times.tolist() == [2.0] and counts.tolist() == [4]


def test_fit_schedule_retrains_on_time_and_on_growth() -> None:
    hourly = PredictorSettings(min_train=2, retrain_jobs=1_000, retrain_hours=1.0, retrain_growth=10.0)
    times, _ = fit_schedule(np.asarray([0.0, 10.0, 20.0, 3_610.0, 3_620.0, 7_300.0]), hourly)
    assert times.tolist() == [10.0, 3_610.0, 7_300.0]
    growth = PredictorSettings(min_train=4, retrain_jobs=1_000, retrain_hours=1e6, retrain_growth=0.5)
    _, counts = fit_schedule(np.arange(20.0), growth)
    assert counts.tolist() == [4, 6, 9, 14]  # each fit 50% more jobs than the last


def test_batch_boundary_a_job_submitted_at_a_fit_time_uses_the_fit_before() -> None:
    """A job submitted in the very second a batch closes is predicted by the previous fit (and its
    features ignore the jobs finishing in that second): the boundary is strict on both."""
    table = synthetic_jobs(300, seed=5)
    schedule, _ = fit_schedule(logged_finish(table), FAST)
    boundary = float(schedule[2])
    j = int(np.searchsorted(table.submit, boundary))  # the first job submitted at/after it
    submit = table.submit.copy()
    submit[j] = boundary
    moved = table.with_fields(submit=submit)
    pred = predict_runtimes(moved, FAST)
    assert pred.fit_times[pred.fit[j]] < boundary
    # the jobs that finish exactly at the boundary do not reach job j: perturb them, nothing moves
    at_boundary = logged_finish(moved) == boundary
    assert at_boundary.any()
    bumped = moved.with_fields(runtime=np.where(at_boundary, moved.runtime * 5.0, moved.runtime))
    again = predict_runtimes(bumped, FAST)
    assert again.runtime[j] == pred.runtime[j]


def test_without_a_logged_wait_the_finish_is_submit_plus_runtime() -> None:
    table = build_table(ids=["a", "b"], submit=[0.0, 5.0], runtime=[10.0, 1.0], gpus=[1, 1])
    np.testing.assert_array_equal(logged_finish(table), [10.0, 6.0])
    waited = table.with_fields(logged_wait=np.asarray([100.0, np.nan]))
    np.testing.assert_array_equal(logged_finish(waited), [110.0, 6.0])


def test_no_leak_on_a_public_trace(traces_dir: Path) -> None:
    """The same proof on the RLTune paper's synthetic trace (960 jobs, logged waits)."""
    table = load_trace("rltune-synthetic", use_cache=False).table
    t = float(table.submit[600])
    later = logged_finish(table) > t
    perturbed = table.with_fields(runtime=np.where(later, table.runtime * 3.0, table.runtime))
    a, b = predict_runtimes(table, FAST), predict_runtimes(perturbed, FAST)
    upto = table.submit <= t
    assert a.fits > 3
    np.testing.assert_array_equal(a.runtime[upto], b.runtime[upto])
    np.testing.assert_array_equal(a.high[upto], b.high[upto])
