"""The simulator's newer exact shortcuts against the plain computations they replace.

- ``row_classes`` (column-wise numbering) gives the ids of ``classes_of`` (``np.unique(axis=0)``);
- ``share_fits`` (O(1) per group from the share lists) answers as first-fit and best-fit do for a
  GPU share with no CPUs, memory or caps;
- the per-workload column cache is rebuilt when a workload gets new jobs;
- ``light_replay`` (node overlay until a fit test passes) gives the schedule of the plain replay
  on full scratch copies, on the embedded workload's shape of cluster (every group tracks GPU
  shares, where reservations are always replayed);
- ``bulk_arrivals`` (a batch of simultaneous arrivals queued with array operations) leaves every
  queue view as queuing them one by one does, and gives the same schedule;
- a resumed cluster's running jobs taken from columns (``ResumedJobs``) get the start orders and
  release lists of taking them one by one, ties in start and estimated end included;
- ``cycle_on`` numbers the shapes of its pending rows from one combined key as ``np.unique(axis=0)``
  numbers the rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.partition import classes_of, row_classes
from shared.scheduling.placement import make_placer, share_fits
from shared.scheduling.state import Alloc, ClusterState
from shared.sim import cycle_on as cycle_on_module
from shared.sim import simulator as simulator_module
from shared.sim.config import SimConfig
from shared.sim.evaluate import prepare_workload
from shared.sim.run_state import Resume, RunState
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_type_state
from tests.sim.test_properties import Scenario, scenarios
from tests.sim.test_schedules import cluster, job, table

_values = st.sampled_from([0.0, -0.0, 1.0, 2.0, -3.0, 0.5, 1e9, 2.5e9, 7.0, 1e-3])


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 60),
    data=st.data(),
    n_cols=st.integers(1, 5),
)
def test_row_classes_equals_classes_of(n: int, data: st.DataObject, n_cols: int) -> None:
    """Same ids, not just the same partition: both number distinct rows in lexicographic order.
    Columns mix short-range whole numbers (the table path), wide or fractional values (the sort
    path) and signed zeros (equal as numbers)."""
    cols = [np.array(data.draw(st.lists(_values, min_size=n, max_size=n))) for _ in range(n_cols)]
    np.testing.assert_array_equal(row_classes(*cols), classes_of(*cols))


def test_row_classes_keeps_nan_rows_apart_as_classes_of_does() -> None:
    cols = (np.array([np.nan, np.nan, 1.0]), np.array([1, 1, 1]))
    np.testing.assert_array_equal(row_classes(*cols), classes_of(*cols))


def test_row_classes_on_a_large_integer_table() -> None:
    rng = np.random.default_rng(3)
    cols = [rng.integers(0, k, 20_000) for k in (10, 3, 40_000, 7)] + [rng.random(20_000).round(2)]
    np.testing.assert_array_equal(row_classes(*cols), classes_of(*cols))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=3),
    use=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 999)), min_size=0, max_size=30),
    milli=st.integers(1, 999),
    pick=st.integers(0, 7),
)
def test_share_fits_agrees_with_the_placers(
    groups: list[tuple[int, int]], use: list[tuple[int, int]], milli: int, pick: int
) -> None:
    """On random clusters partly filled with whole GPUs and shares (placed by best-fit, so the
    share lists are the simulator's own), ``share_fits`` says yes exactly when first-fit and
    best-fit place a share of ``milli`` with no CPUs, memory or caps."""
    spec, state, everywhere = one_type_state(groups)
    best = make_placer("best-fit")
    for kind, m in use:
        a: Alloc | None
        if kind == 0:
            a = best.place(state, 1, m, 0, 0, everywhere)
        else:
            a = best.place(state, kind, 1000, 0, 0, everywhere)
        if a is not None:
            state.take(a)
    state.check_invariants(spec)
    subsets = [everywhere] + [(k,) for k in range(len(groups))]
    gset = subsets[pick % len(subsets)]
    fast = share_fits(state, milli, gset)
    for name in ("first-fit", "best-fit"):
        placed = make_placer(name).place(state, 1, milli, 0, 0, gset, None, 0)
        assert fast == (placed is not None), (name, milli, gset)


def test_columns_are_cached_per_workload_and_rebuilt_for_new_jobs() -> None:
    bound = prepare_workload(None, None, n_jobs=200, seed=1).bound
    first = simulator_module._columns(bound)
    assert simulator_module._columns(bound) is first
    assert first.submit == bound.jobs.submit.tolist()
    other = replace(bound.jobs, submit=bound.jobs.submit + 1.0)
    bound.jobs = other
    again = simulator_module._columns(bound)
    assert again is not first
    assert again.submit == other.submit.tolist()
    bound.shape = bound.shape.copy()  # rebound shapes: read again as well
    assert simulator_module._columns(bound) is not again


def _assert_switch_keeps_schedule(scenario: Scenario, policy: str, switch: str, replay_all: bool) -> None:
    """The simulator with ``switch`` off and on: the same starts, placements, groups and reservation
    times (every reservation computed when it is taken: ``record_reservations``). ``replay_all``
    turns the overlay and release-profile shortcuts off, so every reservation is a replay."""
    bound = scenario.bind()
    cfg = SimConfig(backfill="easy", node_slack=scenario.node_slack)
    runs, groups, reserved = [], [], []
    for on in (False, True):
        sim = Simulator(bound, make_policy(policy), cfg)
        if replay_all:
            sim.overlay_reservations = sim.node_release_profiles = False
        setattr(sim, switch, on)
        runs.append(sim.run(record_reservations=True))
        groups.append(sim.job_group)
        reserved.append(sim.first_reservation)
    np.testing.assert_array_equal(runs[0].start, runs[1].start)
    np.testing.assert_array_equal(runs[0].nodes_used, runs[1].nodes_used)
    np.testing.assert_array_equal(groups[0], groups[1])
    np.testing.assert_array_equal(reserved[0], reserved[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), policy=st.sampled_from(["fcfs", "sjf", "wfp3", "multifactor"]))
def test_light_replay_gives_the_plain_schedule(scenario: Scenario, policy: str) -> None:
    """Eager reservations (every one replayed, none bounded) with and without the light replay:
    the same starts and placements."""
    _assert_switch_keeps_schedule(scenario, policy, "light_replay", replay_all=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), policy=st.sampled_from(["fcfs", "sjf", "wfp3", "multifactor"]))
def test_direct_gang_plans_give_the_placer_plans(scenario: Scenario, policy: str) -> None:
    """Reservations of whole-node gangs planned from the arrays (``whole_node_plan``) against the
    scratch copy and the placer's gang walk: the same starts, placements and reservation times,
    with every reservation computed when it is taken (``record_reservations``)."""
    _assert_switch_keeps_schedule(scenario, policy, "direct_gang_plans", replay_all=False)


def test_whole_node_gang_reservation_pins_the_nodes_freed_by_its_time() -> None:
    """Five 8-GPU nodes: 0 and 4 busy till 1,000 s, node 1 half busy till 100 s, nodes 2 and 3
    held by one gang till 200 s. The blocked 16-GPU job first fits at 200 s, when nodes 1, 2 and 3
    are whole. At 100 s node 1 is free now, nodes 2 and 3 only become free by 200 s: the plan pins
    2 and 3 (``shared.scheduling.pinning``), so the long 8-GPU job starts on node 1 at 100 s without
    delaying the reservation (pinning the two lowest ids, 1 and 2, would hold it till 200 s),
    and the gang still starts at 200 s."""
    spec = cluster({"name": "g", "gpu_type": "A", "count": 5, "gpus": 8, "cpus": 64, "mem_gib": 512})
    jobs = table(
        job("a0", 0, 1000, 8),  # node 0
        job("x1", 0, 100, 4),  # node 1, half of it
        job("x", 0, 200, 16),  # nodes 2 and 3
        job("a4", 0, 1000, 8),  # node 4
        job("big", 1, 50, 16),
        job("long", 2, 500, 8),
    )
    bound = bind_jobs(jobs, spec)
    starts = {}
    for direct, core in ((False, "python"), (True, "python"), (True, "compiled")):
        sim = Simulator(bound, make_policy("fcfs"), SimConfig(oracle_runtimes=True))
        sim.direct_gang_plans = direct
        sim.core = core
        res = sim.run()
        starts[direct, core] = dict(zip(res.jobs.ids.tolist(), res.start.tolist(), strict=True))
    first = starts[True, "python"]
    assert all(s == first for s in starts.values())
    assert first["big"] == 200.0
    assert first["long"] == 100.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), policy=st.sampled_from(["fcfs", "sjf", "wfp3", "multifactor"]))
def test_bulk_arrivals_give_the_one_by_one_schedule(scenario: Scenario, policy: str) -> None:
    """``bulk_arrivals`` on (from the second simultaneous arrival) and off: the same schedule."""
    _assert_switch_keeps_schedule(scenario, policy, "bulk_arrivals", replay_all=False)


def _arrival_state(rs: RunState) -> tuple[object, ...]:
    """Everything ``arrive`` changes, dict orders included."""
    return (
        rs.i,
        rs.nq,
        rs.in_queue.tolist(),
        list(rs.shape_count.items()),
        list(rs.shape_rep.items()),
        rs.queued,
        rs.bucket_jobs,
        rs.bucket_head,
        rs.head_pos.tolist(),
        rs.head_np.tolist(),
        list(rs.heads.per_shape.items()),
        list(rs.heads.by_shape.items()),
        rs.queue().tolist(),
    )


@pytest.mark.parametrize("policy", ["fcfs", "sjf", "multifactor"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bulk_arrivals_leave_the_one_by_one_state(policy: str, seed: int) -> None:
    """Arrivals in batches of 0-600 jobs at one time (ties in submit time), queued in bulk and one
    by one: every queue view the cycle reads is the same after every event, started jobs between."""
    rng = np.random.default_rng(seed)
    bound = prepare_workload(None, None, n_jobs=3000, seed=seed).bound
    times = np.sort(rng.choice(np.arange(40.0), size=len(bound.jobs)))
    bound.jobs = replace(bound.jobs, submit=times)
    states = []
    for bulk in (0, 64, 1):
        sim = Simulator(bound, make_policy(policy), SimConfig())
        sim.bulk_arrivals = bulk
        rs = RunState(sim, ClusterState(bound.spec, sim.frac_groups), 0, len(bound.jobs), None, False)
        seen = []
        for now in np.arange(0.0, 41.0, 3.0).tolist():
            rs.arrive(now)
            seen.append(_arrival_state(rs))
            if rs.by_class:  # start a few heads, so that later arrivals find classes emptied
                for j in [h for h in rs.head_np.tolist() if h >= 0][:5]:
                    rs.start_job(j, Alloc(0, [], [], [], []), now)
        states.append(seen)
    assert states[0] == states[1] == states[2]


def _resume_reference(rs: RunState, resume: Resume) -> None:
    """``RunState._resume`` as it was, one job at a time: the orders the columns must give."""
    for j_, (on_, _t0, e_) in sorted(resume.running.items(), key=lambda kv: kv[1][1]):  # type: ignore[union-attr]
        rs.allocs[j_] = on_
        s_ = rs.start_order[j_] = rs.n_started
        rs.n_started += 1
        rs.run_sorted.append((e_, s_, j_))
        rs.run_by_group.setdefault(on_.group, []).append((e_, s_, j_))
    rs.run_sorted.sort()
    for rg_ in rs.run_by_group.values():
        rg_.sort()


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.integers(0, 3), st.sampled_from([0.0, -0.0, 1.0, 2.0, 5.5]), st.sampled_from([3.0, 7.0, 1e9])
        ),
        max_size=40,
    ),
    ids=st.randoms(use_true_random=False),
)
def test_resumed_columns_give_the_one_by_one_orders(jobs: list[tuple[int, float, float]], ids: Any) -> None:
    """Ties in start time and in estimated end, ids in any order: the same start orders, release
    lists (all and per group, dict orders included) and allocations."""
    bound = prepare_workload(None, None, n_jobs=20, seed=0).bound
    keys = list(range(100, 100 + len(jobs)))
    ids.shuffle(keys)
    running = {
        k: (Alloc(g % len(bound.spec.node_groups), [], [], [], []), t0, t0 + e)
        for k, (g, t0, e) in zip(keys, jobs, strict=True)
    }
    resume = Resume(running=running, state=ClusterState(bound.spec, set()))
    got: tuple[list[object], list[object]] = ([], [])
    for way in ("columns", "reference"):
        sim = Simulator(bound, make_policy("fcfs"), SimConfig())
        st_ = ClusterState(bound.spec, set())
        if way == "columns":
            rs = RunState(sim, st_, 0, 0, resume, False)
        else:
            rs = RunState(sim, st_, 0, 0, None, False)
            _resume_reference(rs, resume)
        (got[0] if way == "columns" else got[1]).extend(
            [
                list(rs.allocs.items()),
                list(rs.start_order.items()),
                rs.run_sorted,
                list(rs.run_by_group.items()),
            ]
        )
    assert got[0] == got[1]


def _first_appearance_rows(keys: np.ndarray) -> np.ndarray:
    """Ids of the distinct rows, in order of first appearance, by ``np.unique(axis=0)``: what
    ``cycle_on._first_appearance`` computed before it combined the columns into one key."""
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    out: np.ndarray = rank[inverse.reshape(-1)]
    return out


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2, 8, 2**40, 2**61]),
            st.sampled_from([0, 1, 500, 1000, -3]),
            st.integers(0, 5),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_shapes_numbered_from_one_key_are_the_row_wise_ids(rows: list[tuple[int, int, int]]) -> None:
    """Wide and negative values included (they enter the key as ranks)."""
    keys = np.array(rows, dtype=np.int64)
    got = cycle_on_module._first_appearance(keys[:, 0], keys[:, 1], keys[:, 2])
    np.testing.assert_array_equal(got, _first_appearance_rows(keys))
