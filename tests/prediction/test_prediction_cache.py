"""The prediction cache: a second call is served without fitting, any changed input misses, a
damaged entry is rewritten, and with the cache off nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.config import get_settings
from shared.domain.jobs import JobTable
from shared.prediction import RuntimePredictions, predict_runtimes, predictor
from tests.prediction.helpers import FAST, synthetic_jobs

ARRAYS = ("runtime", "low", "high", "source", "fit", "fit_times", "train_sizes", "shrink")


class CountingFits:
    """Wraps the predictor's fit step to count the fits actually made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._real = predictor._fit_and_predict
        monkeypatch.setattr(predictor, "_fit_and_predict", self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self._real(*args, **kwargs)


def entries(cache: Path) -> list[Path]:
    folder = cache / "predictions"
    return sorted(folder.glob("*.npz")) if folder.exists() else []


def assert_same(a: RuntimePredictions, b: RuntimePredictions) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        np.testing.assert_array_equal(x, y, err_msg=name)
        assert x.dtype == y.dtype, name
    assert a.fit_seconds == b.fit_seconds and a.settings == b.settings


@pytest.fixture(scope="module")
def table() -> JobTable:
    return synthetic_jobs(300, seed=3)


def test_second_call_hits_without_fitting(
    table: JobTable, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits = CountingFits(monkeypatch)
    first = predict_runtimes(table, FAST)
    assert not first.cached and fits.calls == first.fits > 0
    assert len(entries(isolated_cache)) == 1
    second = predict_runtimes(table, FAST)
    assert second.cached and fits.calls == first.fits  # nothing fitted the second time
    assert_same(first, second)
    assert "cached" in second.summary() and "cached" not in first.summary()


def test_a_changed_runtime_or_setting_misses(
    table: JobTable, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    predict_runtimes(table, FAST)
    fits = CountingFits(monkeypatch)
    runtime = table.runtime.copy()
    runtime[len(table) // 2] += 1.0
    changed = predict_runtimes(table.with_fields(runtime=runtime), FAST)
    assert not changed.cached and fits.calls > 0
    calls = fits.calls
    other = predict_runtimes(table, FAST.model_copy(update={"seed": 1}))
    assert not other.cached and fits.calls > calls
    assert len(entries(isolated_cache)) == 3


def test_a_corrupt_entry_is_rewritten(
    table: JobTable, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = predict_runtimes(table, FAST)
    [entry] = entries(isolated_cache)
    entry.write_bytes(b"not an npz file")
    fits = CountingFits(monkeypatch)
    again = predict_runtimes(table, FAST)
    assert not again.cached and fits.calls == first.fits
    np.testing.assert_array_equal(again.runtime, first.runtime)
    third = predict_runtimes(table, FAST)
    assert third.cached and fits.calls == first.fits  # the rewritten entry serves
    assert_same(again, third)


def test_cache_off_never_writes(
    table: JobTable, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not predict_runtimes(table, FAST, use_cache=False).cached
    monkeypatch.setenv("HYLO_PREDICTION_CACHE", "0")
    get_settings.cache_clear()
    assert not get_settings().prediction_cache
    a, b = predict_runtimes(table, FAST), predict_runtimes(table, FAST)
    assert not a.cached and not b.cached
    assert entries(isolated_cache) == [] and not (isolated_cache / "predictions").exists()
