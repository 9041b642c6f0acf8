"""The cluster-adapter contract, asserted the same way for every adapter (issue 18, item 5).

Each test runs once per external system (``harness``: the simulated cluster, and the Slurm adapter
on a real local Slurm): only the scene differs (``contract_harness.py``), never the assertions.
An adapter for a new external system adds a harness here and must pass these unchanged:

- every job the system holds appears in the snapshot (the waiting ones pending, the running one
  running), and snapshot sequence numbers increase;
- an applied decision changes the order in which the system starts the jobs;
- a decision older than one applied (by sequence) changes nothing, and another cluster's decision
  is refused;
- each finished job's outcome is reported once;
- jobs handed back are run by the system's own scheduler, without any further decision.
"""

from __future__ import annotations

import time

import pytest

from shared.schemas import JobOutcome
from shared.service.cluster_adapter import WrongCluster
from tests.adapter_contract.contract_harness import Harness, decision_for

#: how long a system may take to run the four queued jobs (Slurm: four 1 s jobs, one after another)
DEADLINE_S = 120.0


def _run_until_done(harness: Harness, jobs: set[str], *, order: list[str] | None) -> list[JobOutcome]:
    """Let the system move on, observing it, until every job in ``jobs`` has an outcome (or the
    system stops); with ``order``, a decision in that order answers each observation. Returns every
    outcome reported meanwhile (of any job)."""
    adapter = harness.adapter
    outcomes: list[JobOutcome] = []
    deadline = time.monotonic() + DEADLINE_S
    while not jobs <= {o.job_id for o in outcomes} and time.monotonic() < deadline:
        if not harness.advance():
            break
        observed = adapter.observe()
        outcomes.extend(observed.outcomes)
        if order is not None:
            waiting = {p.job_id for p in observed.snapshot.pending}
            adapter.apply(decision_for(observed.snapshot, [j for j in order if j in waiting]))
    outcomes.extend(adapter.outcomes())
    return outcomes


def test_every_observed_job_appears_in_the_snapshot(harness: Harness) -> None:
    blocker, queued = harness.queue_behind_blocker()
    adapter = harness.adapter
    first = adapter.observe().snapshot
    again = adapter.observe().snapshot
    for snap in (first, again):
        assert snap.cluster == adapter.cluster
        assert set(queued) <= {p.job_id for p in snap.pending}
        running = {r.job_id: r for r in snap.running}
        assert blocker in running and blocker not in {p.job_id for p in snap.pending}
        # the blocker's nodes are nodes of the snapshot, and they are full
        nodes = {n.name: n for n in snap.nodes}
        assert running[blocker].nodes and all(nodes[n].free_gpus == 0 for n in running[blocker].nodes)
    assert again.sequence > first.sequence
    assert again.correlation_id != first.correlation_id


def test_an_applied_decision_sets_the_order_and_each_outcome_is_reported_once(harness: Harness) -> None:
    blocker, queued = harness.queue_behind_blocker()
    adapter = harness.adapter
    observed = adapter.observe()
    outcomes = list(observed.outcomes)
    order = [queued[2], queued[0], queued[3], queued[1]]  # not the submission order
    first = adapter.apply(decision_for(observed.snapshot, order))
    assert not first.stale
    harness.release_blocker()
    outcomes += _run_until_done(harness, {blocker, *queued}, order=order)

    mine = [o for o in outcomes if o.job_id in {blocker, *queued}]
    # every job that ran has an outcome, and only one
    assert sorted(o.job_id for o in mine) == sorted([blocker, *queued])
    # the queued jobs started in the decision's order
    started = sorted((o for o in mine if o.job_id != blocker), key=lambda o: o.start_s)
    assert [o.job_id for o in started] == order
    assert len({o.start_s for o in started}) == len(order)
    for o in mine:
        assert o.cluster == adapter.cluster and o.submit_s <= o.start_s <= o.end_s
    # nothing is reported again
    assert [o for o in adapter.outcomes() if o.job_id in {blocker, *queued}] == []


def test_a_stale_decision_is_not_applied(harness: Harness) -> None:
    _, queued = harness.queue_behind_blocker()
    adapter = harness.adapter
    older = adapter.observe().snapshot
    newer = adapter.observe().snapshot
    assert newer.sequence > older.sequence
    assert not adapter.apply(decision_for(newer, queued)).stale
    before = harness.changes()
    # the older snapshot's decision, arriving late, orders and places otherwise: ignored whole
    late = adapter.apply(decision_for(older, list(reversed(queued)), force=True))
    assert late.stale and list(late.applied) == []
    assert harness.changes() == before
    # the newer decision again is not stale (a redelivery must be able to finish its work)
    assert not adapter.apply(decision_for(newer, queued)).stale
    # another cluster's decision is refused outright
    elsewhere = decision_for(newer, queued).model_copy(update={"cluster": "elsewhere"})
    with pytest.raises(WrongCluster):
        adapter.apply(elsewhere)
    assert harness.changes() == before


def test_handed_back_jobs_run_under_the_systems_own_scheduler(harness: Harness) -> None:
    _, queued = harness.queue_behind_blocker()
    adapter = harness.adapter
    snap = adapter.observe().snapshot
    assert not adapter.apply(decision_for(snap, list(reversed(queued)))).stale
    assert adapter.hand_back() == len(queued)
    harness.release_blocker()
    outcomes = _run_until_done(harness, set(queued), order=None)  # no decision from here on
    assert set(queued) <= {o.job_id for o in outcomes}
