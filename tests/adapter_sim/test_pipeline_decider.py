"""``PipelineDecider`` without a bus: how a decision becomes the cluster's starts.

The channel here is an in-memory stand-in that answers each snapshot with a decision written by
the test (the bus round trip itself is ``test_adapter_sim_bus.py``, over a real NATS server).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from services.adapter_sim.errors import AdapterError
from services.adapter_sim.pipeline_decider import PipelineDecider
from shared.domain.jobs import build_table
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.schemas import JobOutcome, JobPlacement, PlacementDecision, Placements, QueueSnapshot
from shared.sim.applied import RefusedStart, run_applied
from shared.sim.config import SimConfig
from tests.sim.sim_helpers import one_group_spec


class Answer:
    """Answers every snapshot with ``placements(snapshot)``; keeps what it was sent."""

    def __init__(self, placements: object) -> None:
        self.placements = placements
        self.snapshots: list[QueueSnapshot] = []
        self.outcomes: list[JobOutcome] = []

    def decide(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> PlacementDecision | None:
        self.snapshots.append(snapshot)
        self.outcomes.extend(outcomes)
        rows = self.placements(snapshot)  # type: ignore[operator]
        if rows is None:
            return None
        return PlacementDecision(
            cluster=snapshot.cluster,
            correlation_id=snapshot.correlation_id,
            snapshot_time=snapshot.time,
            sequence=snapshot.sequence,
            policy="test",
            placements=Placements.of(rows),
        )

    def send(self, snapshot: QueueSnapshot, outcomes: Sequence[JobOutcome]) -> None:
        raise AssertionError("lockstep only")

    def latest(self) -> PlacementDecision | None:
        raise AssertionError("lockstep only")


def workload(gpus: list[int], nodes: int = 2, per_node: int = 4):  # type: ignore[no-untyped-def]
    n = len(gpus)
    jobs = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=[float(k) for k in range(n)],
        runtime=[10.0] * n,
        estimate=[10.0] * n,
        gpus=gpus,
    )
    return bind_jobs(jobs, one_group_spec(nodes, per_node))


def run(bound, channel: Answer, give_up_after: int = 2):  # type: ignore[no-untyped-def]
    est = np.full(len(bound.jobs), 10.0)
    base = make_policy("fcfs")
    decider = PipelineDecider(bound, est, base, SimConfig(), channel, "t", give_up_after=give_up_after)
    return run_applied(bound, decider, est, policy=base), decider


def test_a_single_node_placement_without_its_allocation_takes_the_jobs_request() -> None:
    bound = workload([2, 2])

    def first_on_g0(snapshot: QueueSnapshot) -> list[JobPlacement]:
        return [
            JobPlacement(job_id=j.job_id, rank=0, priority=1.0, nodes=("g-0",)) for j in snapshot.pending
        ][:1]

    applied, decider = run(bound, Answer(first_on_g0))
    assert [a.nodes for _, a in sorted(applied.allocations.items())] == [[0], [0]]
    assert applied.result.start.tolist() == [0.0, 1.0]  # j1 shares node g-0 (2 + 2 of 4 GPUs)
    assert decider.stats.decisions_applied == applied.decisions == 2


def test_a_gang_without_its_per_node_allocation_is_an_error() -> None:
    bound = workload([6])

    def gang(snapshot: QueueSnapshot) -> list[JobPlacement]:
        return [JobPlacement(job_id="j0", rank=0, priority=1.0, nodes=("g-0", "g-1"))]

    with pytest.raises(AdapterError, match="gang 'j0' without its per-node"):
        run(bound, Answer(gang))


def test_a_placement_that_does_not_fit_is_refused_with_the_job_named() -> None:
    bound = workload([4, 4])

    def both_on_g0(snapshot: QueueSnapshot) -> list[JobPlacement]:
        return [JobPlacement(job_id=j.job_id, rank=0, priority=1.0, nodes=("g-0",)) for j in snapshot.pending]

    with pytest.raises(RefusedStart, match="job j1 does not fit"):
        run(bound, Answer(both_on_g0))


def test_no_decision_lets_the_simulators_cycle_decide_until_the_run_gives_up() -> None:
    bound = workload([1, 1, 1])
    applied, decider = run(bound, Answer(lambda snapshot: None), give_up_after=0)
    # every event without a decision fell back to the simulator's FCFS cycle: each job at arrival
    assert applied.result.start.tolist() == [0.0, 1.0, 2.0]
    assert decider.stats.timeouts == 3 and decider.stats.decisions_applied == 0
    with pytest.raises(AdapterError, match="no decision for 2 snapshots in a row"):
        run(workload([4, 4, 4, 4, 4]), Answer(lambda snapshot: None))
