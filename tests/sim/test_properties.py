"""Property tests of the simulator over random small traces and clusters.

Instrumentation: the simulator's ``ClusterState`` is replaced (in the simulator module only) by a
subclass that calls the real ``take``/``give`` and then ``check_invariants``, and logs every
allocation with the job it was made for (read from the calling ``start_job`` frame). Nothing of
the simulator's logic is replaced. The log is then replayed independently: each allocation must
satisfy its job's request, and summing the allocations of the jobs running at any instant (ends at
t before starts at t, as the simulator applies them) must never exceed a node's GPUs, CPUs or
memory, nor a physical GPU's 1000 milli-GPUs.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared.sim.simulator as simulator_module
from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable, build_table
from shared.policies import POLICY_NAMES, make_policy
from shared.scheduling.binding import BoundWorkload, bind_jobs, nodes_needed
from shared.scheduling.placement import make_placer
from shared.scheduling.result import SimResult
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import predictable

SETTINGS = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TYPES = ("A", "B", "C")
TYPE_SETS = [(), ("A",), ("B",), ("C",), ("A", "B")]
STATIC_POLICIES = ("fcfs", "sjf", "sjf-oracle", "f1")

# ---------------------------------------------------------------------------------------------
# random scenarios


@dataclass
class Scenario:
    spec: ClusterSpec
    jobs: JobTable
    node_slack: int

    def bind(self) -> BoundWorkload:
        return bind_jobs(self.jobs, self.spec, node_slack=self.node_slack)


group_st = st.fixed_dictionaries(
    {
        "gpu_type": st.sampled_from(TYPES),
        "count": st.integers(1, 4),
        "gpus": st.integers(1, 8),
        "cpus": st.sampled_from([4, 16, 32, 64, 96]),
        "mem_gib": st.sampled_from([32, 128, 256, 768]),
    }
)

# (kind, gpus, milli, submit, runtime, extra estimate, type set, cpus_milli, mem_mib, user);
# skewed towards requests that the cluster can hold, so that most jobs are kept and contend
job_st = st.tuples(
    st.sampled_from(["whole"] * 6 + ["frac"] * 3 + ["cpu"]),
    st.sampled_from([1, 1, 1, 2, 2, 3, 4, 4, 6, 8, 12, 16]),
    st.sampled_from([100, 250, 500, 700, 999]),
    st.integers(0, 120),
    st.integers(1, 300),
    st.sampled_from([0, 0, 1, 10, 50, 300, -1]),
    st.sampled_from([0, 0, 0, 0, 1, 2, 3, 4]),
    st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(1, 24_000)),
    st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(1, 96 * 1024)),
    st.integers(0, 2),
)


@st.composite
def scenarios(draw: st.DrawFn, underestimates: bool = True) -> Scenario:
    """A random cluster and trace. Estimates are runtime + extra (extra >= 0); with
    ``underestimates`` some jobs are estimated at half their runtime instead. A burst puts 33-40
    jobs, untyped and no wider than the cluster, on one group of 1-2 nodes within 5 s, so that
    long queues form (more than 32 queued jobs take the simulator's per-shape pre-check)."""
    burst = draw(st.booleans())
    groups = draw(st.lists(group_st, min_size=1, max_size=1 if burst else 3))
    if burst:  # a small cluster, to make the queue long
        groups = [{**groups[0], "count": min(groups[0]["count"], 2)}]
    cpu_only = "run" if burst else draw(st.sampled_from(["exclude", "run"]))
    spec = parse_cluster_spec(
        {
            "name": "random",
            "node_groups": [{"name": f"g{k}", **g} for k, g in enumerate(groups)],
            "cpu_only_jobs": cpu_only,
        },
        "hypothesis",
    )
    n = draw(st.integers(33, 40) if burst else st.integers(1, 40))
    rows = draw(st.lists(job_st, min_size=n, max_size=n))
    largest = max(g["count"] * g["gpus"] for g in groups)
    gpus, milli, submit, estimate, type_set = [], [], [], [], []
    for kind, g, m, sub, run, extra, ts, *_ in rows:
        whole = min(g, largest) if burst else g
        gpus.append(0 if kind == "cpu" else 1 if kind == "frac" else whole)
        milli.append(m if kind == "frac" else WHOLE_GPU_MILLI)
        submit.append(float(sub % 6 if burst else sub))
        if extra < 0:
            estimate.append(run / 2 if underestimates else float(run))
        else:
            estimate.append(float(run + extra))
        type_set.append(0 if burst else ts)
    jobs = build_table(
        ids=[f"j{k}" for k in range(len(rows))],
        submit=submit,
        runtime=[float(r[4]) for r in rows],
        estimate=estimate,
        gpus=gpus,
        gpu_milli=milli,
        type_set=type_set,
        cpus_milli=[r[7] for r in rows],
        mem_mib=[r[8] for r in rows],
        user=[r[9] for r in rows],
        type_sets=list(TYPE_SETS),
        users=["u0", "u1", "u2"],
    )
    return Scenario(spec, predictable(jobs), draw(st.sampled_from([0, 0, 1])))


# ---------------------------------------------------------------------------------------------
# instrumentation


class CheckedState(ClusterState):
    """The real cluster state, checked after every change, logging (job, time, allocation)."""

    logs: ClassVar[list[list[tuple[int, float, Alloc]]]] = []

    def __init__(self, spec: ClusterSpec, track_groups: set[int] | None = None) -> None:
        super().__init__(spec, track_groups)
        self.spec = spec
        self.log: list[tuple[int, float, Alloc]] = []
        self.me = id(self)  # copies (copy.copy) keep this value, so they can tell they are copies
        CheckedState.logs.append(self.log)

    def take(self, a: Alloc) -> None:
        super().take(a)
        if self.me != id(self):
            return  # a scratch copy made by a placer (CP-SAT's warm start), not the cluster
        self.check_invariants(self.spec)
        caller = sys._getframe(1)
        assert caller.f_code.co_name == "start_job", caller.f_code.co_name
        j, now = caller.f_locals["j"], caller.f_locals["now"]
        self.log.append((int(j), float(now), replace(a, nodes=list(a.nodes), whole=list(a.whole))))

    def give(self, a: Alloc) -> None:
        super().give(a)
        if self.me == id(self):
            self.check_invariants(self.spec)


@contextmanager
def checked_state() -> Iterator[list[list[tuple[int, float, Alloc]]]]:
    original = simulator_module.ClusterState
    CheckedState.logs = []
    simulator_module.ClusterState = CheckedState  # type: ignore[misc]
    try:
        yield CheckedState.logs
    finally:
        simulator_module.ClusterState = original  # type: ignore[misc]


def run_checked(
    bound: BoundWorkload, policy: str, cfg: SimConfig, record: bool = False
) -> tuple[SimResult, Simulator, list[tuple[int, float, Alloc]]]:
    with checked_state() as logs:
        sim = Simulator(bound, make_policy(policy), cfg)
        sim.core = "python"  # the instrumented state is the Python loop's (the compiled core's
        # schedules are held to it in tests/sim/test_compiled.py)
        res = sim.run(record_reservations=record)
    assert len(logs) == 1
    return res, sim, logs[0]


# ---------------------------------------------------------------------------------------------
# independent checks


def check_basic(res: SimResult, bound: BoundWorkload) -> None:
    jobs = bound.jobs
    assert not np.isnan(res.start).any(), "a job never started"
    assert not np.isnan(res.end).any()
    assert (res.start >= jobs.submit).all(), "a job started before its submit time"
    np.testing.assert_array_equal(res.end, res.start + jobs.runtime)
    assert (res.timeline_busy <= bound.spec.total_gpus + 1e-9).all()
    assert (res.timeline_busy >= -1e-9).all()


def check_allocations(
    res: SimResult, bound: BoundWorkload, log: list[tuple[int, float, Alloc]], slack: int
) -> dict[int, Alloc]:
    """Every job taken once, at its start, with what it asked for, and no node ever over capacity."""
    spec, jobs = bound.spec, bound.jobs
    allocs: dict[int, Alloc] = {}
    for j, now, a in log:
        assert j not in allocs, f"job {j} started twice"
        allocs[j] = a
        assert now == res.start[j]
    assert sorted(allocs) == list(range(len(jobs)))

    for j, a in allocs.items():
        g = spec.node_groups[a.group]
        assert a.group in bound.class_groups[int(bound.job_class[j])], "job placed outside its groups"
        assert len(set(a.nodes)) == len(a.nodes) and all(0 <= i < g.count for i in a.nodes)
        assert min(a.cpu) >= 0 and min(a.mem) >= 0
        assert sum(a.cpu) >= jobs.cpus_milli[j] and sum(a.mem) >= jobs.mem_mib[j]
        gp, milli = int(jobs.gpus[j]), int(jobs.gpu_milli[j])
        if gp == 0:
            assert sum(a.whole) == 0 and a.frac_gpu == -1 and len(a.nodes) == 1
        elif milli < WHOLE_GPU_MILLI:
            assert a.whole == [0] and len(a.nodes) == 1
            assert 0 <= a.frac_gpu < g.gpus and a.milli == milli
        else:
            assert a.frac_gpu == -1 and sum(a.whole) == gp and min(a.whole) >= 1
            assert len(a.nodes) <= nodes_needed(gp, g.gpus) + slack
        if a.gpu_ids is not None:
            for k, ids in enumerate(a.gpu_ids):
                assert len(set(ids)) == len(ids) == a.whole[k]
                assert all(0 <= p < g.gpus for p in ids)

    # sweep: ends at t are applied before starts at t
    events = sorted(
        [(float(res.end[j]), 0, j) for j in allocs] + [(float(res.start[j]), 1, j) for j in allocs]
    )
    whole: dict[tuple[int, int], int] = defaultdict(int)
    cpu: dict[tuple[int, int], int] = defaultdict(int)
    mem: dict[tuple[int, int], int] = defaultdict(int)
    gpu_whole: dict[tuple[int, int, int], int] = defaultdict(int)
    gpu_frac: dict[tuple[int, int, int], int] = defaultdict(int)
    for _t, kind, j in events:
        a = allocs[j]
        sign = 1 if kind == 1 else -1
        g = spec.node_groups[a.group]
        for k, i in enumerate(a.nodes):
            node = (a.group, i)
            whole[node] += sign * a.whole[k]
            cpu[node] += sign * a.cpu[k]
            mem[node] += sign * a.mem[k]
            if a.gpu_ids is not None:
                for p in a.gpu_ids[k]:
                    gpu_whole[(a.group, i, p)] += sign
            if a.frac_gpu >= 0:
                gpu_frac[(a.group, i, a.frac_gpu)] += sign * a.milli
            if sign > 0:
                frac_here = {p for (gg, ii, p), v in gpu_frac.items() if (gg, ii) == node and v > 0}
                assert whole[node] + len(frac_here) <= g.gpus, f"GPUs over capacity on {node}"
                assert cpu[node] <= g.cpus_milli, f"CPUs over capacity on {node}"
                assert mem[node] <= g.mem_mib, f"memory over capacity on {node}"
                for p in range(g.gpus):
                    used_whole = gpu_whole[(a.group, i, p)]
                    used_frac = gpu_frac[(a.group, i, p)]
                    assert used_whole <= 1, f"GPU {p} of {node} given twice"
                    assert used_frac <= WHOLE_GPU_MILLI, f"GPU {p} of {node} shared beyond 1000 milli"
                    assert not (used_whole and used_frac), f"GPU {p} of {node} both whole and shared"
    assert all(v == 0 for v in whole.values()) and all(v == 0 for v in cpu.values())
    return allocs


def states_at_events(
    res: SimResult, bound: BoundWorkload, allocs: dict[int, Alloc], track: set[int]
) -> Iterator[tuple[float, ClusterState]]:
    """The cluster after each event time's ends and starts, rebuilt from the allocations."""
    times = sorted(set(bound.jobs.submit.tolist()) | set(res.end.tolist()))
    state = ClusterState(bound.spec, track)
    by_start = sorted(allocs, key=lambda j: (res.start[j], j))
    by_end = sorted(allocs, key=lambda j: (res.end[j], j))
    s = e = 0
    for t in times:
        while e < len(by_end) and res.end[by_end[e]] <= t:
            state.give(allocs[by_end[e]])
            e += 1
        while s < len(by_start) and res.start[by_start[s]] <= t:
            state.take(allocs[by_start[s]])
            s += 1
        yield t, state


def fits(state: ClusterState, bound: BoundWorkload, j: int, placement: str, slack: int) -> bool:
    jobs = bound.jobs
    groups = bound.class_groups[int(bound.job_class[j])]
    a = make_placer(placement).place(
        state,
        int(jobs.gpus[j]),
        int(jobs.gpu_milli[j]),
        int(jobs.cpus_milli[j]),
        int(jobs.mem_mib[j]),
        groups,
        None,
        slack,
    )
    return a is not None


# ---------------------------------------------------------------------------------------------
# properties

MODES = ["easy", "greedy", "none"]
PLACEMENTS = ["first-fit", "best-fit"]


@pytest.mark.parametrize("backfill", MODES)
@pytest.mark.parametrize("placement", PLACEMENTS)
@SETTINGS
@given(scenario=scenarios(), policy=st.sampled_from(POLICY_NAMES), oracle=st.booleans())
def test_capacity_submit_and_completion(
    backfill: str, placement: str, scenario: Scenario, policy: str, oracle: bool
) -> None:
    """No node or GPU over capacity, no start before submit, every job ends at start + runtime."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill, placement=placement, oracle_runtimes=oracle, node_slack=scenario.node_slack
    )
    res, _, log = run_checked(bound, policy, cfg)
    check_basic(res, bound)
    check_allocations(res, bound, log, scenario.node_slack)


@pytest.mark.parametrize("placement", PLACEMENTS)
@SETTINGS
@given(scenario=scenarios(), policy=st.sampled_from(POLICY_NAMES))
def test_greedy_leaves_no_fitting_job_waiting(placement: str, scenario: Scenario, policy: str) -> None:
    """Greedy starts every job that fits: after each event, no waiting job fits the free resources."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill="greedy", placement=placement, oracle_runtimes=True, node_slack=scenario.node_slack
    )
    res, sim, log = run_checked(bound, policy, cfg)
    allocs = check_allocations(res, bound, log, scenario.node_slack)
    submit = bound.jobs.submit
    for t, state in states_at_events(res, bound, allocs, sim.frac_groups):
        waiting = np.flatnonzero((submit <= t) & (res.start > t))
        for j in waiting.tolist():
            assert not fits(state, bound, j, placement, scenario.node_slack), (
                f"job {j} fits at t={t} but waits until {res.start[j]}"
            )


@pytest.mark.parametrize("placement", PLACEMENTS)
@SETTINGS
@given(scenario=scenarios(), policy=st.sampled_from(STATIC_POLICIES))
def test_no_backfill_blocks_behind_the_head(placement: str, scenario: Scenario, policy: str) -> None:
    """backfill=none: after each event the first waiting job in priority order does not fit, and
    under FCFS jobs start in submit order."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill="none", placement=placement, oracle_runtimes=True, node_slack=scenario.node_slack
    )
    res, sim, log = run_checked(bound, policy, cfg)
    allocs = check_allocations(res, bound, log, scenario.node_slack)
    keys = sim.policy.keys(np.arange(len(bound.jobs)), 0.0)
    submit = bound.jobs.submit
    for t, state in states_at_events(res, bound, allocs, sim.frac_groups):
        waiting = np.flatnonzero((submit <= t) & (res.start > t))
        if len(waiting):
            head = int(waiting[np.lexsort((waiting, keys[waiting]))[0]])
            assert not fits(state, bound, head, placement, scenario.node_slack), (
                f"head job {head} fits at t={t} but waits until {res.start[head]}"
            )
    if policy == "fcfs":
        assert (np.diff(res.start) >= 0).all(), "a later job started before an earlier one"


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("oracle", [True, False], ids=["oracle", "overestimates"])
@SETTINGS
@given(scenario=scenarios(underestimates=False))
def test_easy_never_starts_after_first_reservation(placement: str, oracle: bool, scenario: Scenario) -> None:
    """EASY, FCFS, one reservation: a job starts no later than its first reservation time, with
    exact runtimes or with estimates that never undershoot."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill="easy",
        max_reservations=1,
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
    )
    res, sim, log = run_checked(bound, "fcfs", cfg, record=True)
    check_basic(res, bound)
    check_allocations(res, bound, log, scenario.node_slack)
    first = sim.first_reservation
    assert first is not None and len(first) == len(bound.jobs)
    has = ~np.isnan(first)
    late = np.flatnonzero(has & (res.start > first + 1e-9))
    assert len(late) == 0, {int(j): (float(first[j]), float(res.start[j])) for j in late}


@SETTINGS
@given(
    scenario=scenarios(),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(MODES),
    placement=st.sampled_from(PLACEMENTS),
    oracle=st.booleans(),
)
def test_determinism(scenario: Scenario, policy: str, backfill: str, placement: str, oracle: bool) -> None:
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill, placement=placement, oracle_runtimes=oracle, node_slack=scenario.node_slack
    )
    runs: list[Any] = []
    for _ in range(2):
        sim = Simulator(bound, make_policy(policy), cfg)
        res = sim.run(record_reservations=True)
        runs.append((res, sim.first_reservation))
    (a, fa), (b, fb) = runs
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    np.testing.assert_array_equal(a.nodes_used, b.nodes_used)
    np.testing.assert_array_equal(fa, fb)
    np.testing.assert_array_equal(a.timeline_t, b.timeline_t)
    np.testing.assert_array_equal(a.timeline_busy, b.timeline_busy)


@SETTINGS
@given(
    scenario=scenarios(),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(MODES),
    placement=st.sampled_from(PLACEMENTS),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_job_range_is_the_slice_alone(
    scenario: Scenario, policy: str, backfill: str, placement: str, cut: tuple[int, int]
) -> None:
    """Simulating job_range (lo, hi) of a workload gives the schedule of a workload holding only
    those jobs; jobs outside the range never start and the metric mask is the range."""
    bound = scenario.bind()
    n = len(bound.jobs)
    lo, hi = sorted((min(cut[0], n), min(cut[1], n)))
    cfg = SimConfig(
        backfill=backfill, placement=placement, oracle_runtimes=True, node_slack=scenario.node_slack
    )
    part = Simulator(bound, make_policy(policy), cfg).run(job_range=(lo, hi))
    assert np.isnan(part.start[:lo]).all() and np.isnan(part.start[hi:]).all()
    assert part.metric_mask.tolist() == [lo <= k < hi for k in range(n)]
    alone_jobs = bound.jobs.take(np.arange(lo, hi))
    alone_bound = bind_jobs(alone_jobs, bound.spec, node_slack=scenario.node_slack)
    assert len(alone_bound.jobs) == hi - lo
    alone = Simulator(alone_bound, make_policy(policy), cfg).run()
    np.testing.assert_array_equal(part.start[lo:hi], alone.start)
    np.testing.assert_array_equal(part.nodes_used[lo:hi], alone.nodes_used)


@SETTINGS
@given(
    scenario=scenarios(),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(MODES),
    placement=st.sampled_from(PLACEMENTS),
    oracle=st.booleans(),
    max_res=st.sampled_from([0, 1]),
)
def test_speed_shortcuts_do_not_change_the_schedule(
    scenario: Scenario, policy: str, backfill: str, placement: str, oracle: bool, max_res: int
) -> None:
    """With every shortcut forced on (shape pre-check from the first queued job, tiny visit
    chunks, lazy reservations from overlays and per-node release profiles, dominated requests retired,
    skipped idle cycles), the schedule equals the plain one (a full cycle at every event that tries
    every queued job in order, reservations replayed on full scratch copies)."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill,  # type: ignore[arg-type]
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
        max_reservations=max_res,
    )
    plain = Simulator(bound, make_policy(policy), cfg)
    plain.precheck_queue, plain.visit_chunk, plain.skip_idle_cycles = 10**9, 10**9, False
    plain.retire_dominated = False
    plain.overlay_reservations = plain.node_release_profiles = plain.light_replay = False
    fast = Simulator(bound, make_policy(policy), cfg)
    fast.precheck_queue, fast.visit_chunk, fast.skip_idle_cycles = 0, 2, True
    a, b = plain.run(), fast.run()
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.nodes_used, b.nodes_used)


@pytest.mark.parametrize("backfill", MODES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), policy=st.sampled_from(POLICY_NAMES), oracle=st.booleans())
def test_cpsat_placement_keeps_capacity_and_repeats(
    backfill: str, scenario: Scenario, policy: str, oracle: bool
) -> None:
    """With the CP-SAT batch placer: no node or GPU over capacity, no start before submit, every
    job ends at start + runtime, and a second run gives the same schedule."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill,  # type: ignore[arg-type]
        placement="cp-sat",
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
    )
    res, _, log = run_checked(bound, policy, cfg)
    check_basic(res, bound)
    check_allocations(res, bound, log, scenario.node_slack)
    again = Simulator(bound, make_policy(policy), cfg).run()
    np.testing.assert_array_equal(res.start, again.start)
    np.testing.assert_array_equal(res.nodes_used, again.nodes_used)
