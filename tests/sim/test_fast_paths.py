"""The simulator's newer exact shortcuts against the plain computations they replace.

- ``row_classes`` (column-wise numbering) gives the ids of ``classes_of`` (``np.unique(axis=0)``);
- ``share_fits`` (O(1) per group from the share lists) answers as first-fit and best-fit do for a
  GPU share with no CPUs, memory or caps;
- the per-workload column cache is rebuilt when a workload gets new jobs;
- ``light_replay`` (node overlay until a fit test passes) gives the schedule of the plain replay
  on full scratch copies, on the embedded workload's shape of cluster (every group tracks GPU
  shares, where reservations are always replayed).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.cluster import parse_cluster_spec
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.partition import classes_of, row_classes
from shared.scheduling.placement import make_placer, share_fits
from shared.scheduling.state import Alloc, ClusterState
from shared.sim import simulator as simulator_module
from shared.sim.config import SimConfig
from shared.sim.evaluate import prepare_workload
from shared.sim.simulator import Simulator
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
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": f"g{k}", "gpu_type": "A", "count": c, "gpus": g, "cpus": 64, "mem_gib": 512}
                for k, (c, g) in enumerate(groups)
            ],
        },
        "t",
    )
    state = ClusterState(spec, set(range(len(groups))))
    everywhere = tuple(range(len(groups)))
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
