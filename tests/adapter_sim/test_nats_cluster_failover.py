"""A NATS node of a three-node cluster is killed (SIGKILL) in the middle of a replay (issue 22, item 3).

Streams and their consumers are at replication 3 (``HYLO_STREAM_REPLICAS``). What must hold, checked
against the bus and the database (PostgreSQL), never against the services' own counters: nothing
lost (every job has one outcome row; every decision on the placements stream is in the database
with one row per ranked job), nothing duplicated (each decision once on the stream, each outcome
once), and scheduling continues through the pipeline (most cycles decided remotely, the base policy's
schedule job by job).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bench.support.nats_cluster import nats_cluster, stream_leader
from services.adapter_sim.replay import compare_with_base, load_workload, replay, sim_config
from services.adapter_sim.settings import AdapterSimSettings
from services.adapter_sim.stack import LocalStack
from shared.bus import BusSettings, connect, create_streams
from shared.bus.streams import stream_name
from shared.schemas import Subjects
from shared.store import create_engine, upgrade
from tests.adapter_sim.pipeline_checks import db_rows, placements_on_stream

SMALL_CLUSTER = Path(__file__).with_name("small_cluster.toml")
CLUSTER = "failover"
ROOT = "failover"
JOBS = 120

pytestmark = pytest.mark.slow


async def _replicas(url: str) -> dict[str, int]:
    """Each stream's configured replicas and how many servers hold it now (leader + current peers)."""
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT))
    try:
        out = {}
        for kind in ("placements", "outcomes", "features"):
            info = await nc.jetstream().stream_info(stream_name(Subjects(ROOT), kind))
            assert info.cluster is not None
            peers = [r for r in (info.cluster.replicas or []) if r.current and not r.offline]
            out[kind] = 1 + len(peers)
        return out
    finally:
        await nc.close()


def test_a_nats_node_killed_mid_replay_loses_and_duplicates_nothing(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    async def migrate() -> None:
        engine = create_engine(fresh_postgres_url)
        await upgrade(engine)
        await engine.dispose()

    asyncio.run(migrate())
    with nats_cluster(tmp_path) as nats:
        bus = BusSettings(nats_url=nats.url, subject_root=ROOT, stream_replicas=3, nats_reconnect_wait_s=0.5)
        asyncio.run(create_streams(bus))
        assert asyncio.run(_replicas(nats.url)) == {"placements": 3, "outcomes": 3, "features": 3}
        env = {
            "HYLO_NATS_URL": nats.url,
            "HYLO_SUBJECT_ROOT": ROOT,
            "HYLO_STREAM_REPLICAS": "3",
            "HYLO_NATS_RECONNECT_WAIT_S": "0.5",
            "HYLO_DATABASE_URL": fresh_postgres_url,
            "HYLO_CLUSTERS": json.dumps({CLUSTER: str(SMALL_CLUSTER)}),
            "HYLO_ACK_WAIT_S": "2",
            "HYLO_NAK_DELAY_S": "0.1",
            "HYLO_LOG_LEVEL": "WARNING",
        }
        settings = AdapterSimSettings(
            sim_cluster=CLUSTER,
            sim_spec=str(SMALL_CLUSTER),
            sim_jobs=JOBS,
            sim_load=1.2,
            sim_load_definition="capped",
            sim_decision_timeout_s=30.0,  # longer than a leader election plus redelivery
            sim_give_up_after=3,
        )
        work = load_workload(settings)
        stack = LocalStack(tmp_path / "stack")
        stack.workdir.mkdir()
        cycles = [0]
        killed_at: list[int] = []
        survivors: list[str] = []
        try:
            stack.start_services(env)
            stack.wait_ready()

            def progress(done: int, _total: int, _now: float) -> None:
                cycles[0] = done

            stop = threading.Event()

            def killer() -> None:
                while cycles[0] < 40 and not stop.is_set():
                    time.sleep(0.01)
                if not stop.is_set():
                    # the leader of the decisions' stream: its loss forces an election mid-run
                    leader = asyncio.run(stream_leader(nats.url, ROOT))
                    nats.kill(leader)
                    killed_at.append(leader)
                    survivors.extend(u for i, u in enumerate(nats.urls) if i != leader)

            thread = threading.Thread(target=killer, daemon=True)
            thread.start()
            try:
                run = asyncio.run(replay(bus, settings, work, progress=progress))
            finally:
                stop.set()
                thread.join(30)
            placements = asyncio.run(placements_on_stream(",".join(survivors), ROOT))
            ranked = {d.correlation_id for d in placements if d.placements}
            deadline = time.monotonic() + 60  # the recorders may still be writing the last rows
            while True:
                per_corr, outcome_jobs = asyncio.run(db_rows(fresh_postgres_url))
                if (set(per_corr) >= ranked and len(outcome_jobs) >= JOBS) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            stack.check_alive()  # every service rode the node's loss out (none exited)
        finally:
            stack.stop()

    assert killed_at, f"the node was never killed (cycles {cycles[0]})"
    assert len(survivors) == 2
    corr_on_stream = [d.correlation_id for d in placements]
    assert len(corr_on_stream) == len(set(corr_on_stream)), "a decision was published twice"
    assert set(per_corr) == ranked, "decisions on the bus and in the database differ"
    for d in placements:
        assert per_corr.get(d.correlation_id, 0) == len(d.placements), d.correlation_id
    assert sorted(outcome_jobs) == sorted(set(outcome_jobs))
    assert len(outcome_jobs) == JOBS
    cmp = compare_with_base(run, work, sim_config(settings))
    assert cmp.differing_starts == 0
    after = run.stats.decisions_applied
    assert after > 0.8 * run.stats.snapshots, f"{after} of {run.stats.snapshots} cycles decided remotely"
    assert np.isfinite(run.result.start).all()
