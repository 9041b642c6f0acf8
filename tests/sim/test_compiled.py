"""The compiled simulator core (``shared.sim.compiled``) against the Python loop.

The bar is the same schedule, decision for decision: every job's start, end, node group, nodes
and GPUs per node, the timeline and the cycle count, on random small clusters and traces, for the
six base policies under every backfill mode, both placers, estimates and oracle runtimes, one
reservation or one per pool, with and without node slack. And the dispatch rule: what the core does
not support runs on the Python loop, and says why.

Scenarios come from ``test_properties``: whole GPUs, gangs, GPU shares, CPU-only jobs, CPU and
memory requests, GPU types, node slack, bursts that make queues long enough for the per-shape
pre-check.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.pairwise_sum import pairwise
from shared.policies import POLICY_NAMES, make_policy
from shared.policies.classic import WFP3
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.test_properties import Scenario, scenarios

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def whole_gpus(s: Scenario) -> Scenario:
    """The scenario with its GPU shares made whole GPUs (groups that track no shares)."""
    milli = np.where(s.jobs.gpu_milli < WHOLE_GPU_MILLI, WHOLE_GPU_MILLI, s.jobs.gpu_milli)
    return dataclasses.replace(s, jobs=dataclasses.replace(s.jobs, gpu_milli=milli))


def run(
    bound: BoundWorkload, policy: str, cfg: SimConfig, core: str, rng: tuple[int, int] | None = None
) -> tuple[Simulator, SimResult]:
    sim = Simulator(bound, make_policy(policy), cfg)
    sim.core = core
    sim.record_allocations = True
    res = sim.run(rng)
    assert sim.last_core == core, sim.core_reason
    return sim, res


def assert_same(a: tuple[Simulator, SimResult], b: tuple[Simulator, SimResult]) -> None:
    (sa, ra), (sb, rb) = a, b
    np.testing.assert_array_equal(ra.start, rb.start)
    np.testing.assert_array_equal(ra.end, rb.end)
    np.testing.assert_array_equal(ra.nodes_used, rb.nodes_used)
    np.testing.assert_array_equal(sa.job_group, sb.job_group)
    assert sa.allocations == sb.allocations
    np.testing.assert_array_equal(ra.timeline_t, rb.timeline_t)
    np.testing.assert_array_equal(ra.timeline_busy, rb.timeline_busy)
    np.testing.assert_array_equal(ra.timeline_queued, rb.timeline_queued)
    assert ra.cycles == rb.cycles
    np.testing.assert_array_equal(ra.metric_mask, rb.metric_mask)


@SETTINGS
@given(
    scenario=st.one_of(scenarios(), scenarios().map(whole_gpus)),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(["easy", "greedy", "none"]),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    oracle=st.booleans(),
    max_res=st.sampled_from([0, 1]),
    cut=st.one_of(st.none(), st.tuples(st.integers(0, 40), st.integers(0, 40))),
)
def test_compiled_core_gives_the_python_schedule(
    scenario: Scenario,
    policy: str,
    backfill: str,
    placement: str,
    oracle: bool,
    max_res: int,
    cut: tuple[int, int] | None,
) -> None:
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill,  # type: ignore[arg-type]
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
        max_reservations=max_res,
    )
    rng = None if cut is None else (min(min(cut), len(bound.jobs)), min(max(cut), len(bound.jobs)))
    assert_same(run(bound, policy, cfg, "python", rng), run(bound, policy, cfg, "compiled", rng))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), policy=st.sampled_from(POLICY_NAMES))
def test_compiled_core_gives_the_plain_schedule(scenario: Scenario, policy: str) -> None:
    """Against the Python loop with every shortcut off (a full cycle at every event, reservations
    replayed on full copies): the reference the shortcuts are held to."""
    bound = scenario.bind()
    cfg = SimConfig(node_slack=scenario.node_slack)
    plain = Simulator(bound, make_policy(policy), cfg)
    plain.precheck_queue, plain.visit_chunk, plain.skip_idle_cycles = 10**9, 10**9, False
    plain.retire_dominated = False
    plain.overlay_reservations = plain.node_release_profiles = plain.light_replay = False
    a = plain.run()
    assert plain.last_core == "python"
    _, b = run(bound, policy, cfg, "compiled")
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.nodes_used, b.nodes_used)


# ---------------------------------------------------------------------------------------------
# the dispatch rule


def small_bound(wide: bool = False) -> BoundWorkload:
    from shared.domain.jobs import build_table
    from shared.scheduling.binding import bind_jobs
    from tests.sim.sim_helpers import one_group_spec, predictable

    jobs = build_table(
        ids=[f"j{k}" for k in range(6)],
        submit=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        runtime=[100.0, 50.0, 20.0, 10.0, 5.0, 1.0],
        estimate=[100.0, 50.0, 20.0, 10.0, 5.0, 1.0],
        gpus=[4, 8, 2, 1, 1, 4],
        gpu_milli=[500 if k == 3 else WHOLE_GPU_MILLI for k in range(6)],
    )
    return bind_jobs(predictable(jobs), one_group_spec(2, 64 if wide else 4))


def test_default_runs_compiled_and_equals_python() -> None:
    bound = small_bound()
    for policy in POLICY_NAMES:
        a = run(bound, policy, SimConfig(), "python")
        sim = Simulator(bound, make_policy(policy), SimConfig())
        sim.record_allocations = True
        res = sim.run()
        assert sim.last_core == "compiled" and sim.core_reason is None
        assert_same(a, (sim, res))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("wide", "64-bit mask"),
        ("shortcut", "shortcut"),
        ("subclass", "policy"),
        ("record", "record_reservations"),
        ("cpsat", "placement"),
        ("used", "usage"),
    ],
)
def test_unsupported_runs_fall_back_to_python(change: str, reason: str) -> None:
    bound = small_bound(wide=change == "wide")
    policy = make_policy("multifactor")
    if change == "subclass":
        # a subclass of a policy whose keys the core computes itself (a static policy's keys are
        # taken up front, so a subclass of one runs compiled: tests/policies/test_new_policy.py)

        class MyWFP3(WFP3):
            pass

        policy = MyWFP3()
    cfg = SimConfig(placement="cp-sat") if change == "cpsat" else SimConfig()
    sim = Simulator(bound, policy, cfg)
    if change == "shortcut":
        sim.lone_arrivals = False
    if change == "used":
        sim.core = "python"
        sim.run()  # the policy keeps the usage of this run
        sim.core = "auto"
    sim.run(record_reservations=change == "record")
    assert sim.last_core == "python"
    assert sim.core_reason is not None and reason in sim.core_reason
    sim.core = "compiled"
    if change != "record":
        with pytest.raises(ValueError, match="compiled core cannot run"):
            sim.run()


def test_numpy_pairwise_sum() -> None:
    """The multifactor policy sums usage with numpy; the core repeats its additions exactly."""
    rng = np.random.default_rng(3)
    for n in [*range(0, 300), 511, 1000, 4097]:
        a = rng.random(n) * 10 ** rng.uniform(-3, 8, n)
        assert pairwise(a, 0, n) == a.sum(), n


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=scenarios(),
    policy=st.sampled_from(["wfp3", "unicep", "multifactor"]),
    backfill=st.sampled_from(["easy", "greedy", "none"]),
    chunk=st.sampled_from([1, 2, 3]),
)
def test_chunked_heads_give_the_python_schedule(
    scenario: Scenario, policy: str, backfill: str, chunk: int
) -> None:
    """Clock-dependent keys of many class heads go on the visit heap in doubling chunks (64 at
    first: only real traces have that many heads); with chunks of 1-3 the small random traces
    take that path, and the schedule is still the Python loop's."""
    import shared.sim.compiled.run as compiled_run

    bound = scenario.bind()
    cfg = SimConfig(backfill=backfill, node_slack=scenario.node_slack)  # type: ignore[arg-type]
    saved = compiled_run.HEAD_CHUNK
    compiled_run.HEAD_CHUNK = chunk
    try:
        assert_same(run(bound, policy, cfg, "python"), run(bound, policy, cfg, "compiled"))
    finally:
        compiled_run.HEAD_CHUNK = saved
