"""Outcomes in -> workload rebuilt exactly, on a real PostgreSQL and on SQLite.

Jobs are written the way the services write them (``record_jobs`` from a queue snapshot, then
``record_outcome`` per finished job); the rebuilt table is compared field by field with the values
written, not with anything the rebuild computed.
"""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.domain.jobs import build_table
from shared.metrics import chronological_split
from shared.retrain import mix_tables, rebuild_workload, train_fraction_for, write_rltune_csv
from shared.schemas import JobOutcome, NodeStates, PendingJob, PendingJobs, QueueSnapshot
from shared.store import create_engine, record_jobs, record_outcome, upgrade
from shared.traces import load_trace
from tests.schemas.message_factories import node

# (job_id, submit, start, end, gpus, gpu_milli, cpus_milli, mem_mib, estimate, user, partition, qos, status)
WRITTEN = [
    ("a-1", 1000.0, 1010.0, 1610.5, 2, 1000, 8000, 65536, 3600.0, "alice", "train", "normal", "completed"),
    ("b-7", 1003.25, 1003.25, 1063.25, 1, 500, 2000, 8192, 120.0, "bob", "inference", "high", "completed"),
    ("c-3", 1500.0, 1700.0, 1700.0, 4, 1000, -1, -1, 7200.0, "alice", "train", "normal", "failed"),
    ("d-2", 1500.0, 1900.0, 5500.0, 8, 1000, 32000, 262144, 86400.0, "carol", "train", "low", "timeout"),
    ("e-9", 2000.5, 2100.0, 2400.0, 0, 1000, 4000, 1024, 600.0, "bob", "cpu", "normal", "cancelled"),
]
PENDING = ("f-1", 2500.0, 1, 1000, -1, -1, 900.0, "dave", "train", "normal")  # no outcome yet


#: jobs whose allowed GPU types are recorded (the others may run on any type)
TYPED = {"c-3": ("V100M32",)}


def snapshot(cluster: str) -> QueueSnapshot:
    jobs = [
        PendingJob(
            job_id=j[0],
            submit_s=j[1],
            gpus=j[4],
            gpu_milli=j[5],
            cpus_milli=j[6],
            mem_mib=j[7],
            est_runtime_s=j[8],
            user=j[9],
            partition=j[10],
            qos=j[11],
            gpu_types=TYPED.get(j[0], ()),
        )
        for j in WRITTEN
    ]
    p = PENDING
    jobs.append(
        PendingJob(
            job_id=p[0],
            submit_s=p[1],
            gpus=p[2],
            gpu_milli=p[3],
            cpus_milli=p[4],
            mem_mib=p[5],
            est_runtime_s=p[6],
            user=p[7],
            partition=p[8],
            qos=p[9],
        )
    )
    return QueueSnapshot(
        cluster=cluster,
        correlation_id=f"{cluster}-s1",
        time=2600.0,
        sequence=1,
        pending=PendingJobs.of(jobs),
        nodes=NodeStates.of((node("n0", "g0", 8, 64000, 524288),)),
    )


async def write(engine: AsyncEngine, cluster: str) -> None:
    async with engine.begin() as conn:
        await record_jobs(conn, snapshot(cluster))
        for j in WRITTEN:
            outcome = JobOutcome(
                cluster=cluster,
                correlation_id=f"{cluster}-s1",
                job_id=j[0],
                submit_s=j[1],
                start_s=j[2],
                end_s=j[3],
                gpus=j[4],
                status=j[12],
            )
            assert await record_outcome(conn, outcome)
        # an outcome whose job was never seen pending: no request to rebuild it from
        orphan = JobOutcome(
            cluster=cluster,
            correlation_id=f"{cluster}-s1",
            job_id="ghost",
            submit_s=1200.0,
            start_s=1300.0,
            end_s=1400.0,
            gpus=1,
        )
        assert await record_outcome(conn, orphan)


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.asyncio
async def test_outcomes_in_workload_rebuilt_exactly(db_url: str) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    other = f"o-{uuid.uuid4().hex[:8]}"
    try:
        await write(engine, cluster)
        await write(engine, other)  # another cluster's identical ids must not leak in
        rebuilt = await rebuild_workload(engine, cluster)
    finally:
        await engine.dispose()
    t = rebuilt.table
    # submit-sorted (ties keep the order written), rebased to the first submit, 1000 s
    expected = sorted(WRITTEN, key=lambda j: j[1])
    assert [str(i) for i in t.ids] == [j[0] for j in expected]
    assert t.meta.origin == 1000.0
    for k, j in enumerate(expected):
        job_id, submit, start, end, gpus, milli, cpus, mem, est, user, part, qos, _status = j
        assert t.submit[k] == submit - 1000.0, job_id
        assert t.runtime[k] == end - start, job_id
        assert t.estimate[k] == est, job_id
        assert t.gpus[k] == gpus and t.gpu_milli[k] == milli, job_id
        assert t.cpus_milli[k] == cpus and t.mem_mib[k] == mem, job_id
        assert t.users[int(t.user[k])] == user, job_id
        assert t.vcs[int(t.vc[k])] == part, job_id
        assert t.qoses[int(t.qos[k])] == qos, job_id
        assert t.type_sets[int(t.type_set[k])] == TYPED.get(job_id, ()), job_id
    assert [r.status for r in rebuilt.jobs] == [j[12] for j in expected]
    reasons = {e.reason: e for e in rebuilt.exclusions}
    assert reasons["no outcome yet (still pending or running)"].example_ids == ["f-1"]
    assert reasons["outcome without a recorded request (jobs row missing)"].example_ids == ["ghost"]


@pytest.mark.asyncio
async def test_time_range_statuses_and_partition_types(db_url: str) -> None:
    engine = create_engine(db_url)
    await upgrade(engine)
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    try:
        await write(engine, cluster)
        ranged = await rebuild_workload(engine, cluster, since_s=1003.25, until_s=2000.5)
        done = await rebuild_workload(engine, cluster, statuses=["completed"])
        typed = await rebuild_workload(
            engine, cluster, gpu_types_by_partition={"train": ["V100M32", "V100M16"]}
        )
        with pytest.raises(ValueError, match="no finished jobs"):
            await rebuild_workload(engine, cluster, since_s=10_000.0)
        with pytest.raises(ValueError, match="until_s must be after since_s"):
            await rebuild_workload(engine, cluster, since_s=5.0, until_s=5.0)
    finally:
        await engine.dispose()
    # [1003.25, 2000.5): b-7, c-3, d-2 (e-9 at 2000.5 is outside; the range is half-open)
    assert [str(i) for i in ranged.table.ids] == ["b-7", "c-3", "d-2"]
    assert ranged.table.meta.origin == 1003.25 and ranged.table.submit[0] == 0.0
    assert [str(i) for i in done.table.ids] == ["a-1", "b-7"]
    types = {
        str(i): typed.table.type_sets[int(c)]
        for i, c in zip(typed.table.ids, typed.table.type_set, strict=True)
    }
    assert types["a-1"] == ("V100M16", "V100M32") and types["b-7"] == ()
    assert types["c-3"] == ("V100M32",)  # recorded types win over the partition's


def _table(n: int, name: str, t0: float) -> object:
    return build_table(
        ids=[f"x{k}" for k in range(n)],
        submit=[t0 + 10.0 * k for k in range(n)],
        runtime=[5.0] * n,
        estimate=[50.0] * n,
        gpus=[1] * n,
        users=["zed"],
        user=[0] * n,
    )


def test_mixing_puts_traces_first_and_holds_out_recorded_jobs_only() -> None:
    from shared.domain.jobs import TraceMeta

    trace = build_table(
        ids=["t0", "t1"],
        submit=[100.0, 130.0],
        runtime=[1.0, 2.0],
        gpus=[1, 2],
        users=["tu"],
        user=[0, 0],
        meta=TraceMeta(name="philly"),
    )
    recorded = build_table(
        ids=["r0", "r1", "r2", "r3"],
        submit=[7.0, 9.0, 10.0, 20.0],
        runtime=[3.0] * 4,
        gpus=[4] * 4,
        users=["ru", "tu"],
        user=[0, 1, 0, 1],
        meta=TraceMeta(name="db"),
    )
    mixed = mix_tables(recorded, [trace], gap_s=60.0)
    assert [str(i) for i in mixed.ids] == ["philly/t0", "philly/t1", "r0", "r1", "r2", "r3"]
    # trace rebased to 0 (0, 30); recorded starts 60 s after 30 and keeps its gaps (0, 2, 3, 13)
    assert mixed.submit.tolist() == [0.0, 30.0, 90.0, 92.0, 93.0, 103.0]
    assert [mixed.users[u] for u in mixed.user] == ["tu", "tu", "ru", "tu", "ru", "tu"]
    frac = train_fraction_for(len(mixed), len(recorded), 0.5)  # hold out the newest 2 recorded jobs
    _, test = chronological_split(len(mixed), frac)
    assert list(test) == [4, 5]
    with pytest.raises(ValueError, match="holdout_fraction"):
        train_fraction_for(6, 4, 1.0)


def test_trace_file_round_trip(tmp_path: Path) -> None:
    """The file the gate will load gives back the jobs (up to what the format cannot hold)."""
    from shared.domain.jobs import TraceMeta

    table = build_table(
        ids=["a", "b", "c"],
        submit=[5.0, 5.5, 9.0],
        runtime=[60.0, 0.5, 3600.0],
        estimate=[120.0, math.nan, 7200.0],
        gpus=[2, 1, 8],
        gpu_milli=[1000, 250, 1000],
        cpus_milli=[8000, 1500, -1],
        mem_mib=[1024, -1, 4096],
        users=["u1", "u2"],
        user=[0, 1, 0],
        vcs=["train", "inf"],
        vc=[0, 1, 0],
        type_sets=[(), ("V100M32",), ("A100",)],
        type_set=[1, 0, 2],
        qoses=["normal", "high"],
        qos=[0, 1, 0],
        meta=TraceMeta(name="rebuilt"),
    )
    path = tmp_path / "rebuilt.csv"
    notes = write_rltune_csv(table, path)
    assert notes == [
        "1 job(s): fractional GPU requests written as one whole GPU",
        "1 job(s): QOS other than 'normal' dropped",
        "1 job(s): GPU types outside T4/MISC/P100/V100M16/V100M32 (or several) written as any type",
        "1 job(s): CPU requests rounded to whole cores",
    ]
    back = load_trace(path, use_cache=False).table
    assert [str(i) for i in back.ids] == ["a", "b", "c"]
    assert back.submit.tolist() == [0.0, 0.5, 4.0]
    assert back.runtime.tolist() == [60.0, 0.5, 3600.0]
    assert back.estimate[0] == 120.0 and np.isnan(back.estimate[1]) and back.estimate[2] == 7200.0
    assert back.gpus.tolist() == [2, 1, 8]
    assert back.cpus_milli.tolist() == [8000, 2000, -1] and back.mem_mib.tolist() == [1024, -1, 4096]
    assert [back.users[u] for u in back.user] == ["u1", "u2", "u1"]
    assert [back.vcs[v] for v in back.vc] == ["train", "inf", "train"]
    assert [back.type_sets[s] for s in back.type_set] == [("V100M32",), (), ()]
    with pytest.raises(ValueError, match="job id 'x,y'"):
        write_rltune_csv(
            build_table(ids=["x,y"], submit=[0.0], runtime=[1.0], gpus=[1]), tmp_path / "bad.csv"
        )
