"""Rescaling arrivals to a target offered load (placement studies on the sparse openb trace)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.jobs import build_table
from shared.sim.evaluate import rescale_arrivals


def _table() -> object:
    # three 1-GPU jobs of 50 s arriving at 10, 60 and 110: work 150 GPU-s over a 100 s span
    return build_table(
        ids=["a", "b", "c"], submit=[10, 60, 110], runtime=[50, 50, 50], gpus=[1, 1, 1], estimate=[50, 50, 50]
    )


def test_half_the_load_doubles_every_gap() -> None:
    # on 1 GPU the load is 150 / (1 x 100) = 1.5; for 0.75 the span must be 200
    out = rescale_arrivals(_table(), 1, 0.75)  # type: ignore[arg-type]
    np.testing.assert_allclose(out.submit, [10, 110, 210])
    np.testing.assert_array_equal(out.runtime, [50, 50, 50])


def test_higher_load_compresses() -> None:
    # on 3 GPUs the load is 150 / (3 x 100) = 0.5; for 0.75 the span shrinks to 150 / (3 x 0.75)
    # = 66.7 s (> 50 s, so no runtime is capped)
    out = rescale_arrivals(_table(), 3, 0.75)  # type: ignore[arg-type]
    np.testing.assert_allclose(out.submit, [10, 10 + 100 / 3, 10 + 200 / 3])


def test_runtimes_longer_than_the_span_count_only_for_the_span() -> None:
    # on 1 GPU, target 2.5: a span S >= 50 gives 150 / S = 2.5 -> S = 60; no cap binds yet
    out = rescale_arrivals(_table(), 1, 2.5)  # type: ignore[arg-type]
    np.testing.assert_allclose(out.submit, [10, 40, 70])
    # with S <= 50 every job counts S: the load is 3 S / S = 3 at most, so 3.5 is out of reach
    # the error says how far the workload reaches: all three jobs at once on the 1 GPU
    with pytest.raises(ValueError, match="out of reach for this workload: at most 3 on 1 GPUs"):
        rescale_arrivals(_table(), 1, 3.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_non_positive_target_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="target load must be > 0"):
        rescale_arrivals(_table(), 1, bad)  # type: ignore[arg-type]
