"""The Slurm-cadence loop (``shared.sim.slurm_cadence``): slurmctld's main scheduler stops at the
first job that cannot start, whatever its GPU type; its backfill runs every ``bf_interval_s`` and
never delays a higher job's start planned from the time limits; a freed node waits ``release_s``."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import build_table
from shared.metrics import Window
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.sim.simulator import Simulator
from shared.sim.slurm_cadence import SlurmCadence


def two_types() -> ClusterSpec:
    groups = [
        {"name": "a", "gpu_type": "A", "count": 1, "gpus": 4, "cpus": 64, "mem_gib": 256},
        {"name": "b", "gpu_type": "B", "count": 1, "gpus": 1, "cpus": 16, "mem_gib": 64},
    ]
    return parse_cluster_spec({"name": "two-types", "node_groups": groups}, "test")


def workload(rows: list[tuple[float, float, float, int, str]]) -> BoundWorkload:
    """(submit, runtime, time limit, GPUs, type) per job."""
    sets = [("A",), ("B",)]
    table = build_table(
        ids=[f"j{k}" for k in range(len(rows))],
        submit=[r[0] for r in rows],
        runtime=[r[1] for r in rows],
        estimate=[r[2] for r in rows],
        gpus=[r[3] for r in rows],
        type_set=[0 if r[4] == "A" else 1 for r in rows],
        type_sets=sets,
    )
    bound = bind_jobs(table, two_types())
    assert bound.exclusions == []
    return bound


def test_a_blocked_job_of_one_type_holds_back_the_other_until_backfill() -> None:
    # j0 takes the A node until 12; j1 (4 A GPUs) is first in FCFS order and cannot start; j2
    # (1 B GPU, node free) waits behind it for the backfill pass at 5 s, not in Hylo's simulator
    w = workload([(0.0, 12.0, 60.0, 2, "A"), (1.0, 10.0, 60.0, 4, "A"), (2.0, 3.0, 60.0, 1, "B")])
    res = SlurmCadence(w, make_policy("fcfs"), release_s=0.0).run()
    assert res.start.tolist() == [0.0, 12.0, 5.0]
    easy = Simulator(w, make_policy("fcfs")).run()
    assert easy.start[2] == 2.0


def test_backfill_never_delays_a_higher_jobs_planned_start() -> None:
    # j0 holds 2 of 4 A GPUs, limit 100 -> j1 (4 GPUs) is planned at 100; j2 (2 GPUs, limit 200)
    # would run past it and stays; j3 (2 GPUs, limit 50) ends by its limit before 100 and starts
    w = workload(
        [
            (0.0, 30.0, 100.0, 2, "A"),
            (1.0, 10.0, 60.0, 4, "A"),
            (2.0, 10.0, 200.0, 2, "A"),
            (3.0, 10.0, 50.0, 2, "A"),
        ]
    )
    res = SlurmCadence(w, make_policy("fcfs"), release_s=0.0).run()
    assert res.start[3] == 5.0  # the first backfill pass
    assert res.start[1] == 30.0  # j0 ended early: the main scheduler starts the top job at once
    assert res.start[2] == 40.0  # after j1, whose 4 GPUs fill the node


def test_release_delay_and_capacity() -> None:
    w = workload([(0.0, 10.0, 60.0, 4, "A"), (0.5, 10.0, 60.0, 4, "A")])
    res = SlurmCadence(w, make_policy("fcfs"), release_s=1.5).run()
    assert res.start.tolist() == [0.0, 11.5]
    assert res.end.tolist() == [10.0, 21.5]
    assert (res.timeline_busy <= 5).all()


def test_random_bursts_respect_capacity_and_arrivals() -> None:
    rng = np.random.default_rng(0)
    n = 40
    rows = [
        (float(t), float(rng.integers(1, 20)), 60.0 * float(rng.integers(1, 4)), int(g), str(k))
        for t, g, k in zip(
            np.sort(rng.uniform(0, 10, n)),
            rng.choice([1, 2, 4], n),
            rng.choice(["A", "B"], n),
            strict=True,
        )
    ]
    rows = [(s, r, e, 1 if k == "B" else g, k) for s, r, e, g, k in rows]
    w = workload(rows)
    res = SlurmCadence(w, make_policy("unicep")).run()
    assert not np.isnan(res.start).any()
    assert (res.start >= w.jobs.submit).all()
    assert res.end == pytest.approx(res.start + w.jobs.runtime)
    # at every moment the running jobs fit: busy GPUs per type never exceed the nodes'
    for t in np.unique(res.start):
        running = (res.start <= t) & (t < res.end)
        a = w.jobs.type_set == 0
        assert w.jobs.gpus[running & a].sum() <= 4
        assert w.jobs.gpus[running & ~a].sum() <= 1


def lag_workload() -> BoundWorkload:
    """j0 holds the A node until 10; j1 (2 A GPUs, long) and j2 (2 A GPUs, short) wait; j3 (the
    whole node, shortest) arrives at 9.5: under SJF, whether j3 goes first at 10 depends on
    whether a decision has ranked it by then."""
    return workload(
        [
            (0.0, 10.0, 60.0, 4, "A"),
            (1.0, 30.0, 600.0, 2, "A"),
            (2.0, 20.0, 120.0, 2, "A"),
            (9.5, 1.0, 60.0, 4, "A"),
        ]
    )


def test_a_lagging_pipeline_orders_by_its_last_decision() -> None:
    # SJF inside slurmctld starts j3 at 10. With a 3 s lag the decision before 10 was taken at 4
    # (3 s after j1's arrival; j2's is covered by it), and j3, submitted after it, has no Hylo key
    # at 10: it sorts last and j2 and j1 take the node
    w = lag_workload()
    now = SlurmCadence(w, make_policy("sjf"), release_s=0.0).run()
    assert now.start[3] == 10.0  # the shortest, ranked at once
    lag = SlurmCadence(w, make_policy("sjf"), release_s=0.0, decision_lag_s=3.0).run()
    assert lag.start[2] == 10.0 and lag.start[1] == 10.0
    assert lag.start[3] == 40.0


def test_episodes_simulate_with_the_lag_they_are_given() -> None:
    # training and evaluation see the lag through EpisodeSettings: the window's mean wait is the
    # lagged loop's, which differs from the loop without lag on this workload
    w = lag_workload()
    waits = {}
    for lag in (0.0, 3.0):
        runner = EpisodeRunner(
            w, EpisodeSettings(base_policy="sjf", warmup=0, loop="slurm-cadence", decision_lag_s=lag)
        )
        waits[lag] = runner.simulate("sjf", Window(0, 4)).wait_s.mean
        direct = SlurmCadence(w, make_policy("sjf"), decision_lag_s=lag).run()
        assert waits[lag] == pytest.approx(float(np.mean(direct.start - w.jobs.submit)))
    assert waits[3.0] > waits[0.0]


def test_a_lag_in_hylos_simulator_is_refused() -> None:
    runner = EpisodeRunner(lag_workload(), EpisodeSettings(warmup=0, loop="hylo", decision_lag_s=1.0))
    with pytest.raises(ValueError, match="slurm-cadence"):
        runner.simulate("sjf", Window(0, 4))
