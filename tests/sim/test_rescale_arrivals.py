"""Rescaling arrivals to a target offered load, under both definitions (``shared.domain.load``).

Every expected submit time is worked out by hand in the comments from the definitions:
in-span counts each job's work up to the last arrival, capped each runtime up to the span."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.jobs import JobTable, build_table
from shared.sim.evaluate import rescale_arrivals


def _table() -> JobTable:
    # three 1-GPU jobs of 50 s arriving at 10, 60 and 110 (span 100 s)
    return build_table(
        ids=["a", "b", "c"], submit=[10, 60, 110], runtime=[50, 50, 50], gpus=[1, 1, 1], estimate=[50, 50, 50]
    )


def test_in_span_half_the_load_doubles_every_gap() -> None:
    # in-span on 1 GPU: a runs 50 s inside the span, b 50 s (it ends at the last arrival), c none:
    # 100 / (1 x 100) = 1.0. Stretching gaps by f >= 1 keeps 100 GPU-s over 100 f s: 0.5 -> f = 2
    out = rescale_arrivals(_table(), 1, 0.5)
    np.testing.assert_allclose(out.submit, [10, 110, 210])
    np.testing.assert_array_equal(out.runtime, [50, 50, 50])


def test_in_span_higher_load_compresses_and_cuts_work_at_the_last_arrival() -> None:
    # on 3 GPUs the in-span load is 100 / 300 = 1/3. For 0.4 the gaps shrink (f < 1): a still runs
    # 50 s before the last arrival (at 100 f >= 50 for f >= 0.5), b only 50 f s:
    # (50 + 50 f) / (3 x 100 f) = 0.4 -> f = 5/7
    out = rescale_arrivals(_table(), 3, 0.4)
    np.testing.assert_allclose(out.submit, [10, 10 + 50 * 5 / 7, 10 + 100 * 5 / 7])


def test_in_span_out_of_reach_names_the_most_and_the_option() -> None:
    # all at once (f -> 0) each job counts its demand x its place before the last arrival:
    # 1 x 1 + 1 x 1/2 + 1 x 0 = 1.5 GPUs on 1 GPU; 2.0 is out of reach
    with pytest.raises(ValueError, match=r"offered load 2 is out of reach") as err:
        rescale_arrivals(_table(), 1, 2.0)
    assert "reachable loads are up to 1.5" in str(err.value)
    assert "pass --load" in str(err.value) and "HYLO_SIM_LOAD" in str(err.value)
    assert "of at most 1.5" in str(err.value)


def test_capped_definition_is_kept_as_before() -> None:
    # capped on 1 GPU: 150 GPU-s over the 100 s span = 1.5; for 0.75 the span must be 200
    np.testing.assert_allclose(rescale_arrivals(_table(), 1, 0.75, "capped").submit, [10, 110, 210])
    # on 3 GPUs 150 / (3 S) = 0.75 -> S = 66.7 s (> 50 s, so no runtime is capped)
    np.testing.assert_allclose(
        rescale_arrivals(_table(), 3, 0.75, "capped").submit, [10, 10 + 100 / 3, 10 + 200 / 3]
    )
    # on 1 GPU, target 2.5: a span S >= 50 gives 150 / S = 2.5 -> S = 60; no cap binds yet
    np.testing.assert_allclose(rescale_arrivals(_table(), 1, 2.5, "capped").submit, [10, 40, 70])


def test_capped_out_of_reach_is_the_demand_of_every_job_at_once() -> None:
    # with S <= 50 every job counts S: the load is 3 S / S = 3 at most, so 3.5 is out of reach
    with pytest.raises(ValueError, match=r"reachable loads are up to 3 \(the GPU demand of all its jobs"):
        rescale_arrivals(_table(), 1, 3.5, "capped")


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_non_positive_target_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="target load must be > 0"):
        rescale_arrivals(_table(), 1, bad)


def test_unknown_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown load definition 'uncapped'; choose from in-span, capped"):
        rescale_arrivals(_table(), 1, 0.5, "uncapped")  # type: ignore[arg-type]
