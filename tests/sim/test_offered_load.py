"""The one definition of offered load (``shared.domain.load``), held by hand-computed cases, and
its promise: on a cold start with room for every job, the measured utilization over the arrival
span is the in-span load."""

from __future__ import annotations

import numpy as np
import pytest

import shared.traces.offered_load as traces_load
import shared.workload as workload
from shared.domain.jobs import JobTable, build_table
from shared.domain.load import (
    LoadOutOfReach,
    arrival_scaling,
    check_definition,
    load_over,
    offered_load,
    reachable_loads,
)
from shared.metrics import Window, summarize_window
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.sim.config import SimConfig
from shared.sim.evaluate import rescale_arrivals
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec


def _three() -> JobTable:
    # a: 2 GPUs at 0 for 100 s; b: 1 GPU at 50 for 100 s; c: half a GPU at 100 for 30 s
    return build_table(
        ids=["a", "b", "c"],
        submit=[0, 50, 100],
        runtime=[100, 100, 30],
        gpus=[2, 1, 1],
        gpu_milli=[1000, 1000, 500],
    )


def test_in_span_counts_work_up_to_the_last_arrival() -> None:
    # span [0, 100]: a 2 x 100, b 1 x 50 (it runs on past 100), c 0.5 x 0: 250 / (4 x 100)
    assert offered_load(_three(), 4) == pytest.approx(0.625)


def test_capped_counts_each_runtime_up_to_the_span() -> None:
    # a 2 x 100, b 1 x 100, c 0.5 x 30: 315 / (4 x 100), the definition before issue 18
    assert offered_load(_three(), 4, "capped") == pytest.approx(0.7875)


def test_load_over_an_interval() -> None:
    # [60, 110]: a busy 60..100 (2 x 40), b 60..110 (1 x 50), c 100..110 (0.5 x 10): 135 / (4 x 50)
    assert load_over(_three(), 4, 60, 110) == pytest.approx(0.675)
    # over the arrival span it is the in-span load itself
    assert load_over(_three(), 4, 0, 100) == pytest.approx(offered_load(_three(), 4))
    assert load_over(_three(), 4, 100, 100) == 0.0


def test_no_span_no_capacity_no_load() -> None:
    one = _three().take([0])
    assert offered_load(one, 4) == 0.0
    assert offered_load(_three(), 0) == 0.0


def test_one_definition_everywhere() -> None:
    """The presets' measure, the generator package's and --load's are the same function."""
    assert traces_load.offered_load is offered_load
    assert workload.offered_load is offered_load
    assert "in-span" in traces_load.METHOD


def _pair() -> JobTable:
    # a: 3 GPUs at 0 for 100 s; b: 1 GPU at 100 for 100 s (span 100 s), on 4 GPUs
    return build_table(ids=["a", "b"], submit=[0, 100], runtime=[100, 100], gpus=[3, 1])


def test_arrival_scaling_by_hand() -> None:
    # in-span: b arrives last and counts nothing; a counts 3 x min(100, 100 f) over 4 x 100 f:
    # 0.75 for f <= 1, 0.75 / f above -> 0.25 at f = 3
    assert arrival_scaling(_pair(), 4, 0.25) == (0.0, pytest.approx(3.0))
    # capped: (3 + 1) x min(100, 100 f) / (4 x 100 f): 1 for f <= 1, 1 / f above -> f = 4
    assert arrival_scaling(_pair(), 4, 0.25, "capped") == (0.0, pytest.approx(4.0))
    assert reachable_loads(_pair(), 4)[1] == pytest.approx(0.75)
    assert reachable_loads(_pair(), 4, "capped")[1] == pytest.approx(1.0)


def test_out_of_reach_says_what_is_reachable_and_names_the_option() -> None:
    with pytest.raises(LoadOutOfReach) as err:
        arrival_scaling(_pair(), 4, 0.9)  # in-span reaches 0.75 at most (3 of 4 GPUs, a alone)
    message = str(err.value)
    assert err.value.highest == pytest.approx(0.75)
    assert "offered load 0.9 is out of reach for this workload on 4 GPUs (in-span definition)" in message
    assert "reachable loads are up to 0.75" in message and "pass --load" in message
    assert isinstance(err.value, ValueError)  # the commands' ValueError handling catches it
    # the same target is reachable under the capped definition (up to 1): gaps x 1 / 0.9
    assert arrival_scaling(_pair(), 4, 0.9, "capped")[1] == pytest.approx(1 / 0.9)


def test_check_definition() -> None:
    assert check_definition("capped") == "capped"
    with pytest.raises(ValueError, match="choose from in-span, capped"):
        check_definition("span")


@pytest.mark.parametrize("definition", ["in-span", "capped"])
def test_rescaled_workload_offers_the_target(definition: str) -> None:
    rng = np.random.default_rng(3)
    n = 200
    t = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=np.sort(rng.uniform(0, 10_000, n)),
        runtime=rng.lognormal(6, 1.5, n),
        gpus=rng.integers(1, 5, n),
    )
    d = check_definition(definition)
    out = rescale_arrivals(t, 16, 0.8, d)
    assert offered_load(out, 16, d) == pytest.approx(0.8, rel=1e-9)


def test_utilization_over_the_span_is_the_in_span_load_when_nothing_waits() -> None:
    """What the definition means, checked against the simulator and the metrics: with room for
    every job at once (here 8 nodes x 4 GPUs for jobs of at most 4 GPUs, 30 at most at once), every
    job starts on arrival and the measured utilization over the arrival span is the in-span load;
    the capped load overstates it."""
    rng = np.random.default_rng(0)
    n = 12
    t = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=np.sort(rng.integers(0, 1_000, n)).astype(float),
        runtime=rng.integers(50, 2_000, n).astype(float),
        estimate=np.full(n, 2_000.0),
        gpus=rng.integers(1, 4, n),
    )
    spec = one_group_spec(8, 4)
    bound = bind_jobs(t, spec)
    result = Simulator(bound, make_policy("fcfs"), SimConfig()).run()
    m = summarize_window(result, Window(0, n))
    assert m.queued_frac == 0.0 and m.wait_s.mean == 0.0
    jobs = bound.jobs
    assert m.utilization == pytest.approx(offered_load(jobs, spec.total_gpus), rel=1e-9)
    assert offered_load(jobs, spec.total_gpus, "capped") > m.utilization + 0.05
