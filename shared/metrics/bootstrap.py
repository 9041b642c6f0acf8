"""Bootstrap confidence intervals for per-window metrics, single and paired.

Why the bootstrap over windows: per-window metrics (mean wait of 1,000 jobs, say) are skewed and
correlated with the window's load, so normal-theory intervals are unreliable with a few dozen
windows. Why paired: all policies run on the same windows, and the window-to-window variation in
load dwarfs the differences between policies; resampling windows *jointly* for both policies
cancels that shared variation and gives much tighter, honest intervals on the difference.

Percentile bootstrap, fully vectorized: one ``(n_boot, n)`` index matrix, one gather, one mean.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import FloatArray

DEFAULT_N_BOOT = 2000
DEFAULT_CI = 0.95


@dataclass(frozen=True)
class BootstrapCI:
    """Mean of ``n`` values with a percentile-bootstrap interval ``[low, high]`` at level ``ci``.

    ``n_nan`` counts values that were NaN (windows with no data) and left out.
    """

    mean: float
    low: float
    high: float
    ci: float
    n: int
    n_nan: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def no_data(cls, ci: float, n_nan: int) -> BootstrapCI:
        """All-NaN result for reports, where a policy may have no value in any window."""
        nan = float("nan")
        return cls(mean=nan, low=nan, high=nan, ci=ci, n=0, n_nan=n_nan)


@dataclass(frozen=True)
class PairedDifference:
    """Candidate ``a`` against reference ``b`` on the same windows.

    - ``mean_diff = mean(a - b)`` in the metric's unit, with bootstrap interval ``diff_low/high``;
    - ``rel_improvement = (mean(b) - mean(a)) / mean(b)`` for lower-is-better metrics (wait, JCT,
      BSLD) and ``(mean(a) - mean(b)) / mean(b)`` for higher-is-better ones (utilization), so a
      positive value always means ``a`` is better; interval ``rel_low/high``. It is a ratio of
      means, not a mean of per-window ratios, so light windows with tiny waits cannot dominate it;
    - ``frac_a_better`` / ``frac_tie``: share of windows where ``a`` wins / ties exactly.
    """

    mean_diff: float
    diff_low: float
    diff_high: float
    rel_improvement: float
    rel_low: float
    rel_high: float
    frac_a_better: float
    frac_tie: float
    lower_is_better: bool
    ci: float
    n: int
    n_nan: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def no_data(cls, lower_is_better: bool, ci: float, n_nan: int) -> PairedDifference:
        """All-NaN result for reports, where no window has values for both policies."""
        nan = float("nan")
        return cls(nan, nan, nan, nan, nan, nan, nan, nan, lower_is_better, ci, 0, n_nan)


def _check_params(n_boot: int, ci: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be strictly between 0 and 1, got {ci}")


def _as_1d(values: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _percentile_interval(samples: FloatArray, ci: float) -> tuple[float, float]:
    alpha = (1.0 - ci) / 2.0
    low, high = np.nanquantile(samples, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _resample_index(n: int, n_boot: int, seed: int) -> npt.NDArray[np.intp]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_boot, n))


def bootstrap_ci(
    values: npt.ArrayLike, n_boot: int = DEFAULT_N_BOOT, ci: float = DEFAULT_CI, seed: int = 0
) -> BootstrapCI:
    """Percentile-bootstrap interval for the mean of ``values`` (NaNs dropped and counted).

    Deterministic for a given ``seed``. A single value gives a zero-width interval.
    """
    _check_params(n_boot, ci)
    arr = _as_1d(values, "values")
    keep = ~np.isnan(arr)
    arr = arr[keep]
    n_nan = int(np.count_nonzero(~keep))
    if len(arr) == 0:
        raise ValueError("bootstrap_ci needs at least one non-NaN value")
    means = arr[_resample_index(len(arr), n_boot, seed)].mean(axis=1)
    low, high = _percentile_interval(means, ci)
    return BootstrapCI(mean=float(arr.mean()), low=low, high=high, ci=ci, n=len(arr), n_nan=n_nan)


def _relative(mean_a: FloatArray, mean_b: FloatArray, lower_is_better: bool) -> FloatArray:
    gain = mean_b - mean_a if lower_is_better else mean_a - mean_b
    with np.errstate(divide="ignore", invalid="ignore"):
        rel: FloatArray = np.where(mean_b != 0, gain / np.where(mean_b != 0, mean_b, 1.0), np.nan)
    return rel


def paired_difference(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    lower_is_better: bool = True,
    n_boot: int = DEFAULT_N_BOOT,
    ci: float = DEFAULT_CI,
    seed: int = 0,
) -> PairedDifference:
    """Compare per-window values ``a`` (candidate) with ``b`` (reference) on the same windows.

    Windows where either value is NaN are dropped from both (and counted in ``n_nan``), keeping
    the pairing intact. Each bootstrap replicate draws one set of windows and uses it for both
    ``a`` and ``b``. The relative improvement is NaN when ``mean(b)`` is zero.
    """
    _check_params(n_boot, ci)
    arr_a = _as_1d(a, "a")
    arr_b = _as_1d(b, "b")
    if arr_a.shape != arr_b.shape:
        raise ValueError(f"paired values need equal lengths, got {len(arr_a)} and {len(arr_b)}")
    keep = ~(np.isnan(arr_a) | np.isnan(arr_b))
    n_nan = int(np.count_nonzero(~keep))
    arr_a, arr_b = arr_a[keep], arr_b[keep]
    n = len(arr_a)
    if n == 0:
        raise ValueError("paired_difference needs at least one window where both values are present")

    idx = _resample_index(n, n_boot, seed)
    boot_a = arr_a[idx].mean(axis=1)
    boot_b = arr_b[idx].mean(axis=1)
    diff_low, diff_high = _percentile_interval(boot_a - boot_b, ci)
    rel_boot = _relative(boot_a, boot_b, lower_is_better)
    rel_low, rel_high = (
        _percentile_interval(rel_boot, ci) if np.any(~np.isnan(rel_boot)) else (np.nan, np.nan)
    )
    mean_a, mean_b = np.array([arr_a.mean()]), np.array([arr_b.mean()])
    better = arr_a < arr_b if lower_is_better else arr_a > arr_b
    return PairedDifference(
        mean_diff=float(mean_a[0] - mean_b[0]),
        diff_low=diff_low,
        diff_high=diff_high,
        rel_improvement=float(_relative(mean_a, mean_b, lower_is_better)[0]),
        rel_low=float(rel_low),
        rel_high=float(rel_high),
        frac_a_better=float(np.mean(better)),
        frac_tie=float(np.mean(arr_a == arr_b)),
        lower_is_better=lower_is_better,
        ci=ci,
        n=n,
        n_nan=n_nan,
    )
