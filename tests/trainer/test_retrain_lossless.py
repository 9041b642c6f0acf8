"""The workload a retraining run trains and gates on is the cluster's, exactly: jobs of the embedded
generator (fractional GPUs, GPU-type sets, milli-core CPUs, memory, QOS) written through the real
store functions (``record_jobs`` from a snapshot, ``record_outcome``), rebuilt, written as the
trainer writes it (``write_workload``) and read back by ``load_trace`` as the gate reads it, compare
equal to what was written, column by column. The RLTune CSV the trainer wrote before lost 246
fractions and 39 jobs' GPU types of a ``hylo run`` (issue 21)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shared.domain.cluster import load_cluster_spec
from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable
from shared.retrain import WORKLOAD_FILE, mix_tables, rebuild_workload, write_workload
from shared.schemas import JobOutcome, NodeStates, PendingJob, PendingJobs, QueueSnapshot
from shared.store import create_engine, record_jobs, record_outcome, upgrade
from shared.traces import TraceFormatError, load_trace
from shared.workload import generate_for_cluster
from tests.schemas.message_factories import node

CLUSTER = "lossless"
QOS = ("normal", "high", "low")


def _written() -> JobTable:
    """200 embedded jobs, with QOS varied (the generator gives every job ``normal``)."""
    table = generate_for_cluster(load_cluster_spec("embedded"), 200, 3)
    qos = np.arange(len(table), dtype=np.int64) % len(QOS)
    return replace(table, qos=qos, qoses=list(QOS))


def _pending(table: JobTable, k: int) -> PendingJob:
    return PendingJob(
        job_id=str(table.ids[k]),
        submit_s=float(table.submit[k]),
        gpus=int(table.gpus[k]),
        gpu_milli=int(table.gpu_milli[k]),
        gpu_types=table.type_sets[int(table.type_set[k])],
        cpus_milli=int(table.cpus_milli[k]),
        mem_mib=int(table.mem_mib[k]),
        est_runtime_s=float(table.estimate[k]),
        user=table.users[int(table.user[k])],
        partition=table.vcs[int(table.vc[k])],
        qos=table.qoses[int(table.qos[k])],
    )


async def _store(url: str, table: JobTable) -> JobTable:
    """Write ``table`` as the services do, then rebuild it from the store."""
    engine = create_engine(url)
    await upgrade(engine)
    snap = QueueSnapshot(
        cluster=CLUSTER,
        correlation_id="s1",
        time=0.0,
        sequence=1,
        pending=PendingJobs.of(tuple(_pending(table, k) for k in range(len(table)))),
        nodes=NodeStates.of((node("n0", "g0", 8, 64000, 524288),)),
    )
    try:
        async with engine.begin() as conn:
            await record_jobs(conn, snap)
            for k in range(len(table)):
                start = float(table.submit[k]) + 5.0 * k
                outcome = JobOutcome(
                    cluster=CLUSTER,
                    correlation_id="s1",
                    job_id=str(table.ids[k]),
                    submit_s=float(table.submit[k]),
                    start_s=start,
                    end_s=start + float(table.runtime[k]),
                    gpus=int(table.gpus[k]),
                )
                assert await record_outcome(conn, outcome)
        return (await rebuild_workload(engine, CLUSTER)).table
    finally:
        await engine.dispose()


def _assert_same_jobs(back: JobTable, written: JobTable) -> None:
    assert [str(i) for i in back.ids] == [str(i) for i in written.ids]
    assert back.submit.tolist() == (written.submit - written.submit[0]).tolist()
    assert np.allclose(back.runtime, written.runtime, rtol=0, atol=1e-6)
    for name in ("estimate", "gpus", "gpu_milli", "cpus_milli", "mem_mib"):
        assert getattr(back, name).tolist() == getattr(written, name).tolist(), name
    for codes, names, w_codes, w_names in (
        ("type_set", "type_sets", "type_set", "type_sets"),
        ("user", "users", "user", "users"),
        ("vc", "vcs", "vc", "vcs"),
        ("qos", "qoses", "qos", "qoses"),
    ):
        got = [tuple(sorted(x)) if isinstance(x, tuple) else x for x in _decoded(back, codes, names)]
        want = [tuple(sorted(x)) if isinstance(x, tuple) else x for x in _decoded(written, w_codes, w_names)]
        assert got == want, codes


def _decoded(table: JobTable, codes: str, names: str) -> list[object]:
    book = getattr(table, names)
    return [book[int(c)] for c in getattr(table, codes)]


@pytest.mark.asyncio
async def test_rebuilt_workload_file_keeps_fractions_types_cpus_exactly(tmp_path: Path) -> None:
    written = _written()
    # the generator's mix has what the CSV lost: fractions, typed jobs (several types too), odd CPUs
    assert np.sum(written.gpu_milli < WHOLE_GPU_MILLI) > 10
    assert sum(1 for t in written.type_sets[1:] if t) and any(len(t) > 1 for t in written.type_sets)
    assert np.any(written.cpus_milli % 1000 != 0)
    rebuilt = await _store(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}", written)
    _assert_same_jobs(rebuilt, written)

    path = tmp_path / "run" / WORKLOAD_FILE
    write_workload(rebuilt, path)
    loaded = load_trace(path, use_cache=False)
    assert loaded.loader == "hylo" and loaded.exclusions == []
    _assert_same_jobs(loaded.table, written)
    assert loaded.table.meta == rebuilt.meta  # the origin and the name travel too

    # mixed behind a trace, the recorded jobs keep every column all the same
    mixed = mix_tables(rebuilt, [generate_for_cluster(load_cluster_spec("embedded"), 30, 9)])
    write_workload(mixed, path)
    tail = load_trace(path, use_cache=False).table
    recorded = tail.take(np.arange(30, len(tail)))
    assert [str(i) for i in recorded.ids] == [str(i) for i in written.ids]
    for name in ("gpus", "gpu_milli", "cpus_milli", "mem_mib"):
        assert getattr(recorded, name).tolist() == getattr(written, name).tolist(), name


def test_a_foreign_npz_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "other.npz"
    np.savez(path, x=np.arange(3))
    with pytest.raises(TraceFormatError, match=r"other\.npz line 1, file: expected a Hylo job table"):
        load_trace(path, use_cache=False)
    with pytest.raises(ValueError, match=r"a Hylo job table is a \.npz file"):
        write_workload(_written(), tmp_path / "workload.csv")
