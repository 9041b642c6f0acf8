"""One scheduling cycle for the simulator and the placer: ``cycle_on`` and ``run_applied``.

The bar: a cluster that starts exactly what ``SimulatorDecider`` decides at each event (the
simulator's cycle run by ``cycle_on`` on a description of the cluster: running jobs with their
allocations and estimated ends, the queue in policy order) gets ``Simulator.run``'s schedule, job
for job and node for node, on the random scenarios the compiled core is held to, for every base
policy, backfill mode, placer, estimate source and reservation count.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.jobs import build_table
from shared.policies import POLICY_NAMES, make_policy
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.state import Alloc
from shared.sim.applied import RefusedStart, SimulatorDecider, run_applied
from shared.sim.config import SimConfig
from shared.sim.cycle_on import PendingRequest, RunningAt, cycle_on
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec, predictable
from tests.sim.test_compiled import whole_gpus
from tests.sim.test_properties import Scenario, scenarios


def both(bound: BoundWorkload, policy: str, cfg: SimConfig) -> None:
    sim = Simulator(bound, make_policy(policy), cfg)
    sim.core = "python"
    sim.record_allocations = True
    expect = sim.run()
    applied_policy = make_policy(policy)
    decider = SimulatorDecider(bound, applied_policy, cfg, sim.est)
    got = run_applied(bound, decider, sim.est, policy=applied_policy)
    np.testing.assert_array_equal(got.result.start, expect.start)
    np.testing.assert_array_equal(got.result.end, expect.end)
    mine = {j: (a.group, tuple(a.nodes), tuple(a.whole)) for j, a in got.allocations.items()}
    theirs = {j: (g, nodes, whole) for j, (g, nodes, whole, _, _) in sim.allocations.items()}
    assert mine == theirs


# derandomized: the same 120 scenarios on every run, so that CI is not a lottery over the known
# divergence below (ties in estimated ends); a random search finds it within a few thousand
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(
    scenario=st.one_of(scenarios(), scenarios().map(whole_gpus)),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(["easy", "greedy", "none"]),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    oracle=st.booleans(),
    max_res=st.sampled_from([0, 1]),
)
def test_the_applied_cycle_gives_the_simulators_schedule(
    scenario: Scenario, policy: str, backfill: str, placement: str, oracle: bool, max_res: int
) -> None:
    cfg = SimConfig(
        backfill=backfill,  # type: ignore[arg-type]
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
        max_reservations=max_res,
    )
    both(scenario.bind(), policy, cfg)


def test_the_applied_cycle_on_a_philly_prefix(philly_bound: BoundWorkload) -> None:
    """1,500 Philly jobs at offered load 1.2 under EASY: long queues (class heads, pre-checks,
    lazy reservations, gangs)."""
    sim = Simulator(philly_bound, make_policy("fcfs"), SimConfig())
    assert sim.run().timeline_queued.max() > 64, "too light to exercise long queues"
    for policy in ("fcfs", "sjf"):
        both(philly_bound, policy, SimConfig())


@pytest.fixture(scope="module")
def philly_bound() -> BoundWorkload:
    from shared.sim.evaluate import prepare_workload

    work = prepare_workload("philly", None, n_jobs=1500, seed=0, estimates="history", target_load=1.2)
    return bind_jobs(predictable(work.bound.jobs.take(np.arange(1500))), work.spec)


def test_the_textbook_backfill_case_starts_job_4_at_once() -> None:
    """Issue 18's case on 4 single-slot nodes, described as a cluster at t=3: job 2 runs (2 slots,
    ends t=10), job 3 (3 slots) waits and reserves t=10, job 4 (1 slot, estimate 100) fits on a
    node the reservation does not need and starts now."""
    spec = one_group_spec(4, 1)
    running = [RunningAt(Alloc(0, [0, 1], [1, 1], [1000, 1000], [1024, 1024]), 0.0, 10.0)]
    pending = [
        PendingRequest(3, 1000, 3000, 3072, (0,), 5.0),
        PendingRequest(1, 1000, 1000, 1024, (0,), 100.0),
    ]
    out = cycle_on(spec, 3.0, running, pending, SimConfig())
    assert list(out.starts) == [1]
    assert out.reserved == {0: 10.0}


def test_a_decision_that_does_not_fit_is_refused_with_the_job_named() -> None:
    jobs = build_table(
        ids=["a", "b"], submit=[0.0, 0.0], runtime=[5.0, 5.0], estimate=[5.0, 5.0], gpus=[2, 2]
    )
    bound = bind_jobs(jobs, one_group_spec(1, 2))

    class Greedy:
        def decide(self, view: object) -> dict[int, Alloc]:
            a = Alloc(0, [0], [2], [1000], [1024])
            return {0: a, 1: Alloc(0, [0], [2], [1000], [1024])}

    with pytest.raises(RefusedStart, match="job b does not fit"):
        run_applied(bound, Greedy(), np.array([5.0, 5.0]))


def test_jobs_ending_together_are_released_in_the_same_order_by_both() -> None:
    """Found by a random search of the scenario above. Two nodes of 2 GPUs, first-fit, FCFS, EASY.
    At t=1 job 3 runs on node 1 until 2; jobs 4 and 5 start on node 0, also until 2; gang 6 (2 GPUs)
    waits and reserves t=2 on the node freed first; share 7 (until 3) fits now on node 1 unless the
    reservation pinned node 1. The simulator released job 3 first (then the lowest id) and pinned
    node 1; ``cycle_on`` gave the running job an id past the pending rows, released jobs 4 and 5
    first, pinned node 0 and started job 7 at t=1 instead of t=2. Both now release ties in
    estimated end in the order the jobs started, whatever their ids: job 3 first."""
    sub = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    rt = [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0, 2.0]
    jobs = build_table(
        ids=[f"j{k}" for k in range(8)],
        submit=sub,
        runtime=rt,
        estimate=rt,
        gpus=[1, 1, 1, 1, 1, 1, 2, 1],
        gpu_milli=[1000] * 7 + [100],
    )
    both(bind_jobs(jobs, one_group_spec(2, 2)), "fcfs", SimConfig(placement="first-fit"))


def test_jobs_started_together_are_released_in_the_order_they_started() -> None:
    """Ties in start time too: two nodes of 4 GPUs, first-fit, SJF (estimate, then GPUs), all jobs
    at t=0. SJF starts y (1 GPU, until 3) on node 0, then x (4 GPUs, until 3, the lower id) on
    node 1; gang g (6 GPUs) waits and reserves t=3; z (1 GPU, until 4) runs past it. Released in
    start order, y then x: g fits only once both are gone, plans 4 + 2 GPUs on nodes 0 and 1 and
    pins all of node 0, so z waits until 3. (Released by id, x first: g fitted with y still on node
    0, planned 3 + 3, and z started at once on node 0, in the simulator; ``cycle_on``, which
    numbers the pending jobs by rank, released y first and kept z waiting.) The Python loop,
    the compiled core and the applied cycle agree."""
    rt = [3.0, 3.0, 3.0, 4.0]
    jobs = build_table(ids=["x", "y", "g", "z"], submit=[0.0] * 4, runtime=rt, estimate=rt, gpus=[4, 1, 6, 1])
    bound = bind_jobs(jobs, one_group_spec(2, 4))
    cfg = SimConfig(placement="first-fit")
    for core in ("python", "compiled"):
        sim = Simulator(bound, make_policy("sjf"), cfg)
        sim.core = core
        assert sim.run().start.tolist() == [0.0, 0.0, 3.0, 3.0], core
    both(bound, "sjf", cfg)
