"""Predictions attached to a workload: computed on the trace as loaded, the same whatever the
estimate model, and never stored in the trace cache."""

from __future__ import annotations

import numpy as np

from shared.prediction import attach_predictions, has_predictions, predict_runtimes
from shared.sim.evaluate import prepare_workload
from shared.traces import apply_estimates
from shared.workload import generate_workload

N_JOBS = 600


def test_prepared_predictions_do_not_depend_on_the_estimate_model() -> None:
    noisy = prepare_workload(None, None, n_jobs=N_JOBS, seed=3, estimates="noisy", predictions=True)
    history = prepare_workload(None, None, n_jobs=N_JOBS, seed=3, estimates="predicted")
    plain = prepare_workload(None, None, n_jobs=N_JOBS, seed=3, estimates="noisy")
    assert has_predictions(noisy.bound.jobs) and has_predictions(history.bound.jobs)
    assert not has_predictions(plain.bound.jobs)
    np.testing.assert_array_equal(noisy.bound.jobs.predicted, history.bound.jobs.predicted)
    # the estimates differ (the generator's, the predictions), the predictions do not
    assert not np.array_equal(noisy.bound.jobs.estimate, history.bound.jobs.estimate)
    assert (noisy.bound.jobs.predicted >= 1.0).all()


def test_attached_predictions_are_the_predictors_and_predicted_estimates_reuse_them() -> None:
    table = generate_workload(N_JOBS, seed=5)
    attached = attach_predictions(table)
    direct = predict_runtimes(table)
    np.testing.assert_array_equal(attached.predicted, np.maximum(direct.runtime, 1.0))
    np.testing.assert_array_equal(attached.predicted_hi, direct.high)
    assert attach_predictions(attached) is attached  # already there: nothing recomputed
    estimated = apply_estimates(attached, "predicted")
    np.testing.assert_array_equal(estimated.estimate, np.maximum(np.ceil(attached.predicted), 1.0))
    assert "runtime predictions" in attached.meta.notes[-1]
