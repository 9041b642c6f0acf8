"""The simulated cluster over a real NATS server, answered by the test responder.

The key property: when the pipeline answers with a base policy's order, the schedule is the plain
simulator's under that policy on the same jobs. And when it answers with another order than the
adapter's base policy, the schedule follows the pipeline, not the base.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from services.adapter_sim.adapter import run_simulated_cluster
from services.adapter_sim.errors import AdapterError, RunStopped
from shared.bus import Publisher
from shared.policies import make_policy
from shared.scheduling.result import SimResult
from shared.schemas import DEFAULT_LIMITS, JobOutcome, decode
from shared.sim.evaluate import PreparedWorkload, prepare_workload
from shared.sim.simulator import Simulator
from tests.adapter_sim.responder import Responder, responding
from tests.conftest_services import Bus

pytestmark = pytest.mark.asyncio

CLUSTER = "simtest"


@pytest_asyncio.fixture
async def wide(bus: Bus) -> AsyncIterator[Bus]:
    """The test bus with production's message limits (snapshots of a long queue are large)."""
    yield dataclasses.replace(bus, limits=DEFAULT_LIMITS, publisher=Publisher(bus.js, bus.subjects))


SMALL_CLUSTER = Path(__file__).with_name("small_cluster.toml")


def _workload(n: int, load: float = 1.2, seed: int = 0) -> PreparedWorkload:
    # a 56-GPU cluster and arrivals compressed so that jobs queue and the order matters. The loads
    # are the capped definition's (as these tests were tuned): 150 or 60 jobs are too few to reach
    # them in-span (at most 0.69 and 0.58 on this cluster)
    return prepare_workload(
        None, str(SMALL_CLUSTER), n_jobs=n, seed=seed, target_load=load, load_definition="capped"
    )


def _plain(work: PreparedWorkload, policy: str) -> SimResult:
    return Simulator(work.bound, make_policy(policy)).run()


def _same_schedule(a: SimResult, b: SimResult) -> None:
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    np.testing.assert_array_equal(a.nodes_used, b.nodes_used)


async def _read_outcomes(bus: Bus, cluster: str, expected: int) -> list[JobOutcome]:
    sub = await bus.js.pull_subscribe(bus.subjects.of(cluster, "outcomes"), durable=None)
    out: list[JobOutcome] = []
    try:
        while len(out) < expected:
            msgs = await sub.fetch(min(500, expected - len(out)), timeout=5)
            out.extend(decode(JobOutcome, m.data) for m in msgs)
    finally:
        await sub.unsubscribe()
    return out


async def test_base_order_from_the_pipeline_gives_the_plain_schedule(wide: Bus) -> None:
    work = _workload(150)
    fcfs, sjf = _plain(work, "fcfs"), _plain(work, "sjf")
    assert not np.array_equal(fcfs.start, sjf.start), "workload too light: FCFS and SJF agree"
    assert int(fcfs.timeline_queued.max()) > 10

    for order in ("fcfs", "sjf"):
        cluster = f"{CLUSTER}-{order}"
        async with responding(wide, cluster, Responder(order, spec=work.spec)) as responder:
            run = await run_simulated_cluster(
                wide.js, wide.publisher, wide.settings, work.bound, cluster=cluster, base_policy=order
            )
        _same_schedule(run.result, fcfs if order == "fcfs" else sjf)
        stats = run.stats
        assert responder.errors == []
        assert stats.timeouts == 0
        assert stats.snapshots == stats.decisions_applied == len(responder.snapshots) > 0
        assert stats.policies == {order: stats.snapshots}
        assert stats.fallbacks == {"no model loaded": stats.snapshots}
        assert stats.outcomes == len(work.bound.jobs)
        assert len(stats.latencies_ms) == stats.snapshots
        assert 0 < stats.latency_ms(50) <= stats.latency_ms(99)


async def test_pipeline_order_overrides_the_base_policy(wide: Bus) -> None:
    """Base FCFS on the adapter, SJF from the pipeline: the schedule is SJF's."""
    work = _workload(150)
    fcfs, sjf = _plain(work, "fcfs"), _plain(work, "sjf")
    assert not np.array_equal(fcfs.start, sjf.start)
    async with responding(wide, CLUSTER, Responder("sjf", extra_job="not-queued")):
        run = await run_simulated_cluster(
            wide.js, wide.publisher, wide.settings, work.bound, cluster=CLUSTER, base_policy="fcfs"
        )
    _same_schedule(run.result, sjf)
    assert run.stats.unknown_jobs == run.stats.decisions_applied > 0


async def test_snapshots_describe_the_cluster(wide: Bus) -> None:
    work = _workload(150)
    spec = work.spec
    async with responding(wide, CLUSTER, Responder("fcfs", spec=spec)) as responder:
        run = await run_simulated_cluster(
            wide.js, wide.publisher, wide.settings, work.bound, cluster=CLUSTER, base_policy="fcfs"
        )
    snaps = responder.snapshots
    assert responder.errors == []
    names = {f"{g.name}-{i}" for g in spec.node_groups for i in range(g.count)}
    ids = [str(x) for x in work.bound.jobs.ids.tolist()]
    submit = dict(zip(ids, work.bound.jobs.submit.tolist(), strict=True))
    capacity = {g.name: g.gpus for g in spec.node_groups}
    for prev, snap in itertools.pairwise(snaps):
        assert snap.sequence > prev.sequence
        assert snap.time >= prev.time
    for snap in snaps:
        assert {n.name for n in snap.nodes} == names
        pend = [submit[j.job_id] for j in snap.pending]
        assert pend == sorted(pend)  # oldest first
        assert all(submit[j.job_id] <= snap.time for j in snap.pending)
        pending_ids = {j.job_id for j in snap.pending}
        for job in snap.running:
            assert job.start_s <= snap.time <= job.est_end_s or job.est_end_s < snap.time
            assert job.job_id not in pending_ids
        # GPUs not free = whole GPUs of running jobs, plus at most one GPU per fractional job
        not_free = sum(capacity[n.group] - n.free_gpus for n in snap.nodes)
        whole = sum(j.gpus for j in snap.running if j.gpu_milli == 1000)
        shares = sum(1 for j in snap.running if j.gpu_milli < 1000)
        assert whole <= not_free <= whole + shares
    # every job shows up pending in some snapshot before it starts, and runs in a later one
    seen_pending = {j.job_id for s in snaps for j in s.pending}
    assert seen_pending == set(ids)
    assert run.stats.snapshots == len(snaps)


async def test_outcomes_carry_the_decision_that_started_the_job(wide: Bus) -> None:
    work = _workload(150)
    async with responding(wide, CLUSTER, Responder("fcfs")) as responder:
        run = await run_simulated_cluster(
            wide.js,
            wide.publisher,
            wide.settings,
            work.bound,
            cluster=CLUSTER,
            base_policy="fcfs",
            job_id_prefix="r1-",
        )
    n = len(work.bound.jobs)
    outcomes = await _read_outcomes(wide, CLUSTER, n)
    assert len({o.job_id for o in outcomes}) == n
    by_cid = {s.correlation_id: s for s in responder.snapshots}
    ids = ["r1-" + str(x) for x in work.bound.jobs.ids.tolist()]
    row = {job_id: k for k, job_id in enumerate(ids)}
    for o in outcomes:
        k = row[o.job_id]
        assert o.start_s == run.result.start[k]
        assert o.end_s == run.result.end[k]
        assert o.submit_s == work.bound.jobs.submit[k]
        snap = by_cid[o.correlation_id]
        assert snap.time == o.start_s  # the cycle in which it started
        assert o.job_id in {j.job_id for j in snap.pending}


async def test_no_decision_in_time_falls_back_to_the_base_policy(wide: Bus) -> None:
    work = _workload(60, load=0.9)
    run = await run_simulated_cluster(
        wide.js,
        wide.publisher,
        wide.settings,
        work.bound,
        cluster=CLUSTER,
        base_policy="sjf",
        decision_timeout_s=0.02,
        give_up_after=0,  # never: every cycle falls back
    )
    sjf = _plain(work, "sjf")
    assert not np.array_equal(sjf.start, _plain(work, "fcfs").start)
    _same_schedule(run.result, sjf)
    assert run.stats.timeouts == run.stats.snapshots > 0
    assert run.stats.decisions_applied == 0
    assert run.stats.latencies_ms == []


async def test_snapshot_cap_keeps_the_oldest_jobs(wide: Bus) -> None:
    """With a cap of 5 pending jobs the placer sees only the 5 oldest: every job starts while it is
    one of the 5 oldest queued, so nothing is backfilled from beyond the cap, and every job runs."""
    work = _workload(150)
    async with responding(wide, CLUSTER, Responder("fcfs")) as responder:
        run = await run_simulated_cluster(
            wide.js,
            wide.publisher,
            wide.settings,
            work.bound,
            cluster=CLUSTER,
            base_policy="fcfs",
            max_pending=5,
        )
    assert max(len(s.pending) for s in responder.snapshots) == 5
    assert run.stats.truncated_snapshots > 0
    assert run.stats.truncated_jobs >= run.stats.truncated_snapshots
    start, submit = run.result.start, work.bound.jobs.submit
    assert not np.isnan(start).any()
    for k in range(len(start)):
        t = start[k]
        older_queued = np.count_nonzero((submit[:k] <= t) & (start[:k] >= t))
        assert older_queued < 5, (k, older_queued)
    assert not np.array_equal(start, _plain(work, "fcfs").start)  # the cap does cost backfills


async def test_stop_ends_the_run_at_the_next_cycle(wide: Bus) -> None:
    work = _workload(60, load=0.9)
    stop = threading.Event()
    stop.set()
    with pytest.raises(RunStopped):
        await run_simulated_cluster(
            wide.js, wide.publisher, wide.settings, work.bound, cluster=CLUSTER, stop=stop
        )


async def test_bad_cluster_name_is_refused(wide: Bus) -> None:
    work = _workload(60, load=0.9)
    with pytest.raises(ValueError, match=r"cluster name 'a\.b'"):
        await run_simulated_cluster(wide.js, wide.publisher, wide.settings, work.bound, cluster="a.b")


async def test_module_entry_point_replays_from_env_settings(wide: Bus, nats_url: str) -> None:
    """`python -m services.adapter_sim`, configured only by HYLO_* variables, against the responder."""
    cluster = "entrypoint"
    env = {
        **os.environ,
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": wide.subjects.root,
        "HYLO_STORAGE": "memory",
        "HYLO_CLUSTERS": json.dumps({cluster: str(SMALL_CLUSTER)}),
        "HYLO_SIM_CLUSTER": cluster,
        "HYLO_SIM_JOBS": "150",
        "HYLO_SIM_LOAD": "1.2",
        "HYLO_SIM_LOAD_DEFINITION": "capped",  # 150 jobs reach at most 0.69 in-span here
        "HYLO_BASE_POLICY": "sjf",
    }
    async with responding(wide, cluster, Responder("sjf")) as responder:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.adapter_sim",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=300)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["cluster"] == cluster
    assert report["jobs"] == 150
    assert report["differing_starts"] == 0  # against plain SJF on the same jobs
    assert report["stats"]["decisions_applied"] == len(responder.snapshots) > 0
    assert report["stats"]["timeouts"] == 0


async def test_module_entry_point_names_a_bad_setting(nats_url: str) -> None:
    env = {**os.environ, "HYLO_NATS_URL": nats_url, "HYLO_BASE_POLICY": "lifo"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.adapter_sim", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 2
    assert "unknown base policy 'lifo'" in err.decode()
    assert "Traceback" not in err.decode()


async def test_a_silent_pipeline_ends_the_run_with_a_clear_error(wide: Bus) -> None:
    work = _workload(60, load=0.9)
    with pytest.raises(
        AdapterError, match=r"no decision for 3 snapshots in a row .*none came within the timeout"
    ):
        await run_simulated_cluster(
            wide.js,
            wide.publisher,
            wide.settings,
            work.bound,
            cluster=CLUSTER,
            decision_timeout_s=0.05,
            give_up_after=3,
        )


async def test_a_snapshot_a_stage_rejects_is_counted_with_its_reason(wide: Bus) -> None:
    """A stage that dead-letters a snapshot: the cycle falls back at once (no timeout wait), and
    after ``give_up_after`` in a row the run fails naming the stage's reason."""
    work = _workload(60, load=0.9)
    async with responding(wide, CLUSTER, Responder("fcfs", reject_every=1)):
        with pytest.raises(
            AdapterError, match=r"dead-lettered: rejected by responder-simtest: nodes do not fit"
        ):
            await run_simulated_cluster(
                wide.js,
                wide.publisher,
                wide.settings,
                work.bound,
                cluster=CLUSTER,
                decision_timeout_s=30.0,  # a rejection must not wait for this
                give_up_after=2,
            )


async def test_an_occasional_rejection_falls_back_for_that_cycle(wide: Bus) -> None:
    work = _workload(150)
    async with responding(wide, CLUSTER, Responder("fcfs", reject_every=4)):
        run = await run_simulated_cluster(
            wide.js, wide.publisher, wide.settings, work.bound, cluster=CLUSTER, decision_timeout_s=30.0
        )
    stats = run.stats
    assert stats.rejected == stats.snapshots // 4 > 0
    assert stats.rejections == {"rejected by responder-simtest: nodes do not fit": stats.rejected}
    assert stats.timeouts == 0
    assert stats.decisions_applied == stats.snapshots - stats.rejected
    _same_schedule(run.result, _plain(work, "fcfs"))  # base FCFS on rejected cycles, FCFS decisions else


async def test_accelerated_mode_applies_the_newest_decision_where_it_still_fits(wide: Bus) -> None:
    """Accelerated mode never waits and applies the newest decision in, often one for an earlier
    snapshot: its starts for jobs still queued that still fit (the cluster refuses any other), and
    the simulator's own FCFS cycle where no decision is in yet. Every job runs, none twice."""
    work = _workload(150)
    async with responding(wide, CLUSTER, Responder("fcfs")):
        run = await run_simulated_cluster(
            wide.js,
            wide.publisher,
            wide.settings,
            work.bound,
            cluster=CLUSTER,
            base_policy="fcfs",
            mode="accelerated",
            speedup=1e12,  # no pacing: as fast as the simulator goes
        )
    start, submit = run.result.start, work.bound.jobs.submit
    assert not np.isnan(start).any() and (start >= submit).all()
    assert set(run.allocations) == set(range(len(work.bound.jobs)))
    stats = run.stats
    assert stats.snapshots == stats.decisions_applied + stats.timeouts
    assert stats.outcomes == len(work.bound.jobs)
    assert stats.stale_decisions <= stats.decisions_applied


async def test_accelerated_mode_paces_the_simulated_clock(wide: Bus) -> None:
    work = _workload(150)
    async with responding(wide, CLUSTER, Responder("fcfs")) as lockstep:
        await run_simulated_cluster(wide.js, wide.publisher, wide.settings, work.bound, cluster=CLUSTER)
    times = [snap.time for snap in lockstep.snapshots]  # the cycles (same schedule in both modes)
    speedup = (max(times) - min(times)) / 2.0  # the cycles span two wall-clock seconds
    async with responding(wide, f"{CLUSTER}-acc", Responder("fcfs")):
        run = await run_simulated_cluster(
            wide.js,
            wide.publisher,
            wide.settings,
            work.bound,
            cluster=f"{CLUSTER}-acc",
            mode="accelerated",
            speedup=speedup,
        )
    assert run.wall_s >= 1.9
    assert run.stats.decisions_applied > 0
    assert not np.isnan(run.result.start).any()
