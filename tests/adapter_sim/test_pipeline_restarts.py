"""Each service is killed (SIGKILL, no graceful stop) and restarted in the middle of a replay.

What must hold afterwards, checked against the bus and the database (PostgreSQL), never against the
services' own counters:

- nothing lost: every job has exactly one outcome row; every decision published on the placements
  stream is in the database with one row per job it ranked;
- nothing duplicated: the placements stream holds each correlation id once (a decision republished
  after a crash is dropped by the duplicate window), and no correlation id in the database is
  missing from the stream;
- the schedule is the base policy's, job by job (no model is loaded, so every decision that arrived
  carries FCFS priorities; a cycle that timed out used FCFS too, so equality also shows that no
  decision was applied to the wrong cycle).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from services.adapter_sim.replay import compare_with_base, load_workload, replay, sim_config
from services.adapter_sim.settings import AdapterSimSettings
from services.adapter_sim.stack import LocalStack
from shared.bus import BusSettings
from shared.store import create_engine, upgrade
from tests.adapter_sim.pipeline_checks import db_rows, placements_on_stream

SMALL_CLUSTER = Path(__file__).with_name("small_cluster.toml")
CLUSTER = "restarts"
JOBS = 150

pytestmark = pytest.mark.slow


def test_services_killed_and_restarted_mid_run_lose_and_duplicate_nothing(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    async def migrate() -> None:
        engine = create_engine(fresh_postgres_url)
        await upgrade(engine)
        await engine.dispose()

    asyncio.run(migrate())
    root = "restarts"
    stack = LocalStack(tmp_path)
    nats_url = stack.start_nats()
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": root,
        "HYLO_DATABASE_URL": fresh_postgres_url,
        "HYLO_CLUSTERS": json.dumps({CLUSTER: str(SMALL_CLUSTER)}),
        "HYLO_ACK_WAIT_S": "2",  # a killed replica's unacked message comes back after 2 s
        "HYLO_NAK_DELAY_S": "0.1",
        "HYLO_LOG_LEVEL": "WARNING",
    }
    settings = AdapterSimSettings(
        sim_cluster=CLUSTER,
        sim_spec=str(SMALL_CLUSTER),
        sim_jobs=JOBS,
        sim_load=1.2,
        sim_load_definition="capped",  # 1.2 in-span is out of reach for so few jobs on this cluster
        sim_decision_timeout_s=30.0,  # longer than a restart plus redelivery
        sim_give_up_after=3,
    )
    work = load_workload(settings)
    bus = BusSettings(nats_url=nats_url, subject_root=root)
    cycles = [0]
    killed: list[str] = []
    try:
        stack.start_services(env)
        stack.wait_ready()

        def progress(done: int, _total: int, _now: float) -> None:
            cycles[0] = done

        stop = threading.Event()

        def killer() -> None:
            """SIGKILL featurizer, prioritizer, placer in turn, each after some more cycles."""
            for k, name in enumerate(("featurizer", "prioritizer", "placer")):
                target = 40 * (k + 1)
                while cycles[0] < target and not stop.is_set():
                    time.sleep(0.01)
                if stop.is_set():
                    return
                (child,) = [c for c in stack.services() if c.name == name and c.proc.poll() is None]
                child.proc.send_signal(signal.SIGKILL)
                child.proc.wait(10)
                stack.children.remove(child)
                killed.append(name)
                stack.start_services(env, names=(name,))
                stack.wait_ready()

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            run = asyncio.run(replay(bus, settings, work, progress=progress))
        finally:
            stop.set()
            thread.join(60)
        placements = asyncio.run(placements_on_stream(nats_url, root))
        ranked = {d.correlation_id for d in placements if d.placements}  # an empty decision stores no row
        deadline = time.monotonic() + 60  # the recorders may still be writing the last rows
        while True:
            per_corr, outcome_jobs = asyncio.run(db_rows(fresh_postgres_url))
            if (set(per_corr) >= ranked and len(outcome_jobs) >= JOBS) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        stack.stop()

    assert killed == ["featurizer", "prioritizer", "placer"], f"only killed {killed} (cycles {cycles[0]})"
    corr_on_stream = [d.correlation_id for d in placements]
    assert len(corr_on_stream) == len(set(corr_on_stream)), "a decision was published twice"
    assert set(per_corr) == ranked, "decisions on the bus and in the database differ"
    for d in placements:
        assert per_corr.get(d.correlation_id, 0) == len(d.placements), d.correlation_id
    assert sorted(outcome_jobs) == sorted(set(outcome_jobs))
    assert len(outcome_jobs) == JOBS
    cmp = compare_with_base(run, work, sim_config(settings))
    assert cmp.differing_starts == 0
    assert run.stats.decisions_applied > 0.8 * run.stats.snapshots  # most cycles were decided remotely
    assert np.isfinite(run.result.start).all()
