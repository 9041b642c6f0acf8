"""The predictor's outputs: cold start, the band, the ``predicted`` estimate model, the cost record."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.jobs import TraceMeta, build_table
from shared.prediction import SOURCES, PredictionError, PredictorSettings, predict_runtimes
from shared.traces import ESTIMATE_MODELS, apply_estimates
from tests.prediction.helpers import FAST, synthetic_jobs


def test_cold_start_uses_estimate_then_history_then_what_finished() -> None:
    # u0's first job has an estimate; u1's first has none and nothing finished (default);
    # u1's second comes after u1's first finished (history x safety); no fit ever (min_train)
    table = build_table(
        ids=["a", "b", "c", "d"],
        submit=[0.0, 10.0, 500.0, 600.0],
        runtime=[100.0, 200.0, 50.0, 70.0],
        estimate=[400.0, np.nan, np.nan, np.nan],
        gpus=[1, 1, 1, 1],
        user=[0, 1, 1, 2],
        users=["u0", "u1", "u2"],
        vc=[0, 0, 0, 1],
        vcs=["v0", "v1"],
    )
    pred = predict_runtimes(table, PredictorSettings(min_train=100, safety=1.5, default_runtime_s=1234.0))
    assert pred.fits == 0 and pred.fit_seconds == 0.0
    names = [SOURCES[s] for s in pred.source]
    assert names == ["user estimate", "default", "history", "trace median"]
    np.testing.assert_allclose(pred.runtime, [400.0, 1234.0, 300.0, 100.0])  # median of 100, 200, 50
    assert np.isnan(pred.low).all() and np.isnan(pred.high).all()  # no band before a fit


def test_model_predictions_have_an_ordered_band_and_a_cost_record() -> None:
    table = synthetic_jobs(500, seed=1)
    pred = predict_runtimes(table, FAST)
    model = pred.source == SOURCES.index("model")
    assert model.mean() > 0.8
    assert np.all(pred.low[model] <= pred.runtime[model])
    assert np.all(pred.runtime[model] <= pred.high[model])
    assert np.all(pred.runtime >= 1.0)
    assert pred.fits >= 5 and pred.fit_seconds > 0
    assert len(pred.train_sizes) == pred.fits and np.all(pred.train_sizes <= FAST.max_train)
    assert np.all((pred.shrink >= 0) & (pred.shrink <= 1))
    assert "fits" in pred.summary()
    # it learns: far better than one guess for everyone (users differ by up to 150x)
    err = np.abs(np.log(pred.runtime[model] / table.runtime[model]))
    flat = np.abs(np.log(np.median(table.runtime) / table.runtime[model]))
    assert np.median(err) < 0.5 * np.median(flat)


def test_predictions_are_deterministic() -> None:
    table = synthetic_jobs(300, seed=2)
    # use_cache=False: the second call would otherwise be served from the prediction cache
    a, b = predict_runtimes(table, FAST, use_cache=False), predict_runtimes(table, FAST, use_cache=False)
    np.testing.assert_array_equal(a.runtime, b.runtime)
    np.testing.assert_array_equal(a.high, b.high)


def test_more_categories_than_the_regressor_takes() -> None:
    """HPC2N has 257 users; the regressor takes 254 categories per column; the rest are missing."""
    table = synthetic_jobs(700, seed=4, users=300, estimates=False)
    pred = predict_runtimes(table, FAST)
    assert np.isfinite(pred.runtime).all() and pred.fits > 0


def test_predicted_estimate_model_sets_every_estimate() -> None:
    assert "predicted" in ESTIMATE_MODELS
    table = synthetic_jobs(300, seed=6)
    filled = apply_estimates(table, "predicted", seed=0)
    assert np.isfinite(filled.estimate).all() and np.all(filled.estimate >= 1.0)
    assert not np.array_equal(filled.estimate, table.estimate)  # user estimates are replaced too
    assert "estimates: predicted" in filled.meta.notes[-1] and "fits" in filled.meta.notes[-1]


def test_bad_times_are_one_line_naming_the_table() -> None:
    table = synthetic_jobs(50)
    broken = table.with_fields(runtime=np.where(np.arange(50) == 7, np.nan, table.runtime))
    with pytest.raises(PredictionError) as err:
        predict_runtimes(broken)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("synthetic.swf: 1 jobs have a runtime") and "job j7" in message


def test_bad_settings_are_one_line() -> None:
    table = synthetic_jobs(50)
    with pytest.raises(PredictionError, match=r"^synthetic.swf: predictor setting quantiles"):
        predict_runtimes(table, PredictorSettings(quantiles=(0.6, 0.9)))
    with pytest.raises(PredictionError, match="retrain_jobs must be >= 1"):
        predict_runtimes(table, PredictorSettings(retrain_jobs=0))


def test_unsorted_table_is_refused() -> None:
    table = synthetic_jobs(20)
    shuffled = table.with_fields(submit=table.submit[::-1].copy())
    with pytest.raises(PredictionError, match="not sorted by submit"):
        predict_runtimes(shuffled)


def test_empty_table() -> None:
    table = build_table(ids=[], submit=[], runtime=[], gpus=[], meta=TraceMeta(name="none"))
    pred = predict_runtimes(table)
    assert len(pred.runtime) == 0 and pred.fits == 0


def test_settings_come_from_the_environment_and_bad_ones_name_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HYLO_PREDICTOR_RETRAIN_JOBS", "500")
    monkeypatch.setenv("HYLO_PREDICTOR_MIN_TRAIN", "1")
    settings = PredictorSettings()
    assert settings.retrain_jobs == 500
    with pytest.raises(
        PredictionError, match=r"^synthetic.swf: predictor setting min_train must be >= 2, got 1"
    ):
        predict_runtimes(synthetic_jobs(50), settings)
