"""Decisions -> sort keys, and snapshot building, without the bus (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest

from services.adapter_sim.remote_policy import keys_from_decision
from services.adapter_sim.snapshot import SnapshotBuilder, SnapshotError, node_names
from shared.schemas import JobPlacement, PlacementDecision, Placements
from shared.sim.evaluate import prepare_workload


def _decision(*ranked: tuple[str, int, float]) -> PlacementDecision:
    return PlacementDecision(
        cluster="c",
        correlation_id="x",
        snapshot_time=0.0,
        sequence=0,
        policy="model",
        placements=Placements.of(JobPlacement(job_id=j, rank=r, priority=p) for j, r, p in ranked),
    )


def _order(keys: np.ndarray, ids: list[str]) -> list[str]:
    return [ids[k] for k in np.lexsort((np.arange(len(ids)), keys))]


def test_ranked_jobs_first_then_the_rest_in_base_order() -> None:
    ids = ["a", "b", "c", "d", "e"]
    base = np.array([5.0, 1.0, 4.0, 1.0, 0.0])  # base order: e, b, d (tie with b, later), c, a
    keys, unknown = keys_from_decision(_decision(("c", 0, 2.0), ("a", 1, 1.0)), ids, base)
    assert unknown == 0
    assert _order(keys, ids) == ["c", "a", "e", "b", "d"]
    assert len(set(keys.tolist())) == len(ids)  # distinct: the simulator's tie-break cannot reorder


def test_rank_ties_go_to_higher_priority_then_base_order() -> None:
    ids = ["a", "b", "c"]
    base = np.array([2.0, 1.0, 0.0])
    keys, _ = keys_from_decision(_decision(("a", 0, 1.0), ("b", 0, 3.0), ("c", 0, 1.0)), ids, base)
    assert _order(keys, ids) == ["b", "c", "a"]


def test_unknown_jobs_are_ignored_and_counted() -> None:
    ids = ["a", "b"]
    keys, unknown = keys_from_decision(_decision(("zz", 0, 9.0), ("b", 1, 1.0)), ids, np.array([0.0, 1.0]))
    assert unknown == 1
    assert _order(keys, ids) == ["b", "a"]


def test_empty_decision_keeps_the_base_order() -> None:
    ids = ["a", "b", "c"]
    keys, unknown = keys_from_decision(_decision(), ids, np.array([3.0, 1.0, 2.0]))
    assert unknown == 0
    assert _order(keys, ids) == ["b", "c", "a"]


def test_node_names_follow_the_spec_order() -> None:
    work = prepare_workload(None, None, n_jobs=10, seed=0)
    names = node_names(work.bound)
    assert names[0][:2] == ["v100m32-0", "v100m32-1"]
    assert [len(g) for g in names] == [g.count for g in work.spec.node_groups]


def test_a_job_id_the_bus_cannot_carry_is_named_before_the_run() -> None:
    work = prepare_workload(None, None, n_jobs=10, seed=0)
    jobs = work.bound.jobs
    ids = jobs.ids.copy().astype(object)
    ids[3] = "bad id"
    work.bound.jobs = type(jobs)(**{**jobs.__dict__, "ids": np.asarray(ids, dtype=str)})
    with pytest.raises(SnapshotError, match=r"job 'bad id' \(row 3\) cannot be sent in a snapshot: job_id"):
        SnapshotBuilder(work.bound, work.bound.jobs.estimate, "c")


def test_max_pending_must_be_positive() -> None:
    work = prepare_workload(None, None, n_jobs=10, seed=0)
    with pytest.raises(ValueError, match="max_pending must be >= 1"):
        SnapshotBuilder(work.bound, work.bound.jobs.estimate, "c", max_pending=0)
