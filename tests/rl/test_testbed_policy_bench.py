"""``bench/testbed_policy.py`` (issue 23, item 1): the bursts it trains and measures on, the
makespan bound it reports, and the held-out rule (the live experiment's draws are refused)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.config import get_settings
from shared.policies import make_policy
from tests.bench_script import load_bench

tb = load_bench("testbed_policy")


def _has_trace() -> bool:
    return bool((get_settings().traces_dir / tb.TRACE_FILE).is_file())


needs_trace = pytest.mark.skipif(not _has_trace(), reason="traces folder lacks the Slurm workload")


@needs_trace
def test_bursts_are_whole_draws_far_apart() -> None:
    w, windows = tb.bursts(range(0, 30), [5, 6])
    assert [(x.start, x.size) for x in windows] == [(0, 30), (30, 30)]
    submit = w.jobs.submit
    span = tb.LOADER_SPAN_S * 30 / tb.LOADER_JOBS * tb.SECONDS_PER_EPOCH / tb.LOADER_SECONDS_PER_EPOCH
    assert submit[:30].min() >= 0 and submit[:30].max() <= span
    assert submit[30:].min() >= tb.GAP_S and submit[30:].max() <= tb.GAP_S + span
    assert (np.diff(submit) >= 0).all()
    # the experiment's job model: time limits in whole minutes, never below the runtime
    assert (w.jobs.estimate % 60 == 0).all() and (w.jobs.estimate >= w.jobs.runtime).all()
    # the same rows in both draws, other arrivals
    assert (w.jobs.gpus[:30] == w.jobs.gpus[30:]).all()
    assert not np.allclose(submit[:30], submit[30:] - tb.GAP_S)


@needs_trace
@pytest.mark.parametrize("loop", ["slurm-cadence", "hylo"])
def test_makespan_never_beats_its_lower_bound(loop: str) -> None:
    w, windows = tb.bursts(range(156, 196), [101])
    for name in ("fcfs", "unicep"):
        fig = tb.simulate(w, make_policy(name), windows[0], loop)
        assert fig["bound_s"] <= fig["makespan_s"] + 1e-9
        assert 0 < fig["utilization"] <= 1


def test_the_experiments_draws_are_refused() -> None:
    with pytest.raises(SystemExit, match="live judge"):
        tb.main(["evaluate", "--seeds", "7-9"])
    with pytest.raises(SystemExit, match="7, 8, 9"):
        tb.main(["train", "--out", "/nonexistent/never", "--train-seeds", "8,20", "--val-seeds", "30"])


def test_seed_lists() -> None:
    assert tb.parse_seeds("100-102,7") == [100, 101, 102, 7]
