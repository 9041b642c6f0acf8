"""Parameter validation, the analytic helpers, and the statistics/fitting code of the calibration."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from shared.workload import DurationClass, GeneratorParams, LogNormalComponent, stats
from shared.workload.calibrate import fit_lognormal_mixture, main


def test_defaults_are_valid_and_serializable(params: GeneratorParams) -> None:
    again = GeneratorParams.model_validate(json.loads(params.model_dump_json()))
    assert again == params and again.fingerprint() == params.fingerprint()


@pytest.mark.parametrize(
    "changes",
    [
        {"gpu_counts": (1, 2)},  # lengths differ from the weights
        {"fractional_shares": (0, 500), "fractional_share_weights": (1.0, 1.0)},
        {"max_runtime_s": 400_000.0},  # above the ladder's top: estimate >= runtime impossible
        {"estimate_ladder_s": (600.0, 300.0)},
        {
            "duration_classes": (
                DurationClass(min_gpus=2, components=(LogNormalComponent(weight=1, median_s=9, sigma=1),)),
            )
        },
        {"diurnal_amplitude": 1.0},
        {"type_sets_whole": ()},
        {"unknown_knob": 1},
    ],
)
def test_invalid_params_are_rejected(params: GeneratorParams, changes: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        params.replace(**changes)


def test_runtime_quantile_inverts_cdf(params: GeneratorParams) -> None:
    for q in (0.1, 0.5, 0.9):
        assert params.runtime_cdf(params.runtime_quantile(q)) == pytest.approx(q, abs=1e-6)
    assert params.runtime_cdf(0.5) == 0.0 and params.runtime_cdf(params.max_runtime_s) == 1.0


def test_clipped_mean_of_a_point_mass() -> None:
    p = GeneratorParams().replace(
        duration_classes=(
            DurationClass(min_gpus=1, components=(LogNormalComponent(weight=1, median_s=500, sigma=0),)),
        )
    )
    assert p.mean_runtime(1) == 500 and p.mean_runtime(64) == 500


def test_fold_gpu_counts() -> None:
    folded = stats.fold_gpu_counts([1, 3, 12, 24, 64, 128], (1, 2, 4, 8, 16, 32, 64))
    assert folded.tolist() == [1, 4, 16, 32, 64, 64]


def test_zipf_mle_recovers_exponent() -> None:
    ranks = np.arange(1, 51)
    counts = np.round(1e6 * ranks**-1.3 / np.sum(ranks**-1.3))
    assert stats.zipf_mle(counts) == pytest.approx(1.3, abs=0.01)


def test_mixture_fit_recovers_components() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [np.exp(rng.normal(math.log(60), 0.2, 6000)), np.exp(rng.normal(math.log(5000), 1.0, 14000))]
    )
    fit = fit_lognormal_mixture(x, 2)
    assert fit[0] == pytest.approx((0.3, 60, 0.2), rel=0.1)
    assert fit[1] == pytest.approx((0.7, 5000, 1.0), rel=0.1)


def test_active_window_skips_sparse_edges() -> None:
    day = stats.DAY
    t = np.concatenate([[0.0, 3 * day], 10 * day + np.linspace(0, 5 * day - 1, 1000), [40 * day]])
    start, end = stats.active_window(t)
    assert start == 10 * day and end == 15 * day


def test_calibrate_without_traces_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--traces", str(tmp_path)]) == 2
    assert "no traces" in capsys.readouterr().err


def test_defaults_match_the_traces(traces_dir: Path, params: GeneratorParams) -> None:
    """The counts pasted into params.py are still what the trace files give (development checkout only)."""
    from shared.traces.openb import load_openb
    from shared.traces.philly import load_philly

    philly = load_philly(traces_dir / "philly" / "pollux_philly.csv")
    folded = stats.fold_gpu_counts(philly.gpus, params.gpu_counts)
    assert tuple(float(np.sum(folded == g)) for g in params.gpu_counts) == params.gpu_count_weights
    openb = load_openb(traces_dir / "alibaba" / "openb_pod_list_gpuspec33.csv")
    gpu = openb.take(np.flatnonzero(openb.gpus > 0))
    assert stats.fractional_fraction(gpu) == pytest.approx(params.fractional_fraction, abs=5e-5)
    assert len(np.unique(philly.vc)) == params.n_vcs
