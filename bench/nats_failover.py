"""Losing one of three NATS nodes mid-run: messages lost and how long scheduling pauses (issue 22).

    .venv/bin/python bench/nats_failover.py                 # 300 jobs, the decisions' leader killed
    .venv/bin/python bench/nats_failover.py --jobs 150 --kill-after 60 --repeats 3

What runs: a three-node NATS cluster on loopback (``bench/support/nats_cluster.py``), streams at
replication 3, the featurizer, prioritizer and placer (one process each, as deployed), a SQLite
store, and the simulated cluster replaying ``--jobs`` jobs of the embedded workload through them
as fast as decisions come back. After ``--kill-after`` cycles the node that leads the placements
stream is SIGKILLed (no lame-duck mode).

Reported per repeat: the scheduling pause (the longest gap between two consecutive cycles that
ended after the kill, against the median gap before it), decisions applied remotely versus cycles,
and the loss checks: every decision on the stream stored once, one outcome per job, none
published twice. Target (issue 22): 0 lost, pause <= 5 s. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.nats_cluster import NatsCluster, nats_cluster, stream_leader  # noqa: E402
from services.adapter_sim.replay import load_workload, replay  # noqa: E402
from services.adapter_sim.settings import AdapterSimSettings  # noqa: E402
from services.adapter_sim.stack import LocalStack  # noqa: E402
from shared.bus import BusSettings, connect, create_streams  # noqa: E402
from shared.bus.streams import stream_name  # noqa: E402
from shared.schemas import Limits, PlacementDecision, Subjects, decode  # noqa: E402
from shared.store.migrate import upgrade_url  # noqa: E402

console = Console()
ROOT_SUBJECT = "failover"


async def _decisions(url: str) -> list[str]:
    nc = await connect(BusSettings(nats_url=url, subject_root=ROOT_SUBJECT))
    try:
        js = nc.jetstream()
        subjects = Subjects(ROOT_SUBJECT)
        info = await js.stream_info(stream_name(subjects, "placements"))
        sub = await js.pull_subscribe(subjects.all_clusters("placements"), durable=None)
        out: list[str] = []
        while len(out) < info.state.messages:
            for m in await sub.fetch(200, timeout=2):
                out.append(
                    decode(PlacementDecision, m.data, Limits(max_message_bytes=8 << 20)).correlation_id
                )
                await m.ack()
        return out
    finally:
        await nc.close()


def one_run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    with nats_cluster(folder) as nats:
        bus = BusSettings(
            nats_url=nats.url, subject_root=ROOT_SUBJECT, stream_replicas=3, nats_reconnect_wait_s=0.5
        )
        asyncio.run(create_streams(bus))
        db = f"sqlite+aiosqlite:///{folder / 'store.db'}"
        upgrade_url(db)
        settings = AdapterSimSettings(
            sim_cluster="failover", sim_jobs=args.jobs, sim_decision_timeout_s=30.0, sim_give_up_after=3
        )
        env = {
            "HYLO_NATS_URL": nats.url,
            "HYLO_SUBJECT_ROOT": ROOT_SUBJECT,
            "HYLO_STREAM_REPLICAS": "3",
            "HYLO_NATS_RECONNECT_WAIT_S": "0.5",
            "HYLO_DATABASE_URL": db,
            "HYLO_CLUSTERS": json.dumps({"failover": "embedded"}),
            "HYLO_ACK_WAIT_S": "2",
            "HYLO_LOG_LEVEL": "WARNING",
        }
        stack = LocalStack(folder / "stack")
        stack.workdir.mkdir()
        ends: list[float] = []
        killed: list[tuple[int, float]] = []
        try:
            stack.start_services(env)
            stack.wait_ready(timeout_s=300)
            work = load_workload(settings)

            def progress(done: int, _total: int, _now: float) -> None:
                ends.append(time.perf_counter())

            stop = threading.Event()

            def killer(cluster: NatsCluster) -> None:
                while len(ends) < args.kill_after and not stop.is_set():
                    time.sleep(0.005)
                if not stop.is_set():
                    leader = asyncio.run(stream_leader(cluster.url, ROOT_SUBJECT))
                    cluster.kill(leader)
                    killed.append((leader, time.perf_counter()))

            thread = threading.Thread(target=killer, args=(nats,), daemon=True)
            thread.start()
            try:
                run = asyncio.run(replay(bus, settings, work, progress=progress))
            finally:
                stop.set()
                thread.join(30)
            survivors = ",".join(u for i, u in enumerate(nats.urls) if not killed or i != killed[0][0])
            decisions = asyncio.run(_decisions(survivors))
        finally:
            stack.stop()
    if not killed:
        raise SystemExit(f"the node was never killed: only {len(ends)} cycles")
    t_kill = killed[0][1]
    gaps_before = np.diff([t for t in ends if t <= t_kill])
    after = [t for t in ends if t > t_kill]
    last_before = max(t for t in ends if t <= t_kill)
    pause = max(np.diff([last_before, *after]).max(initial=0.0), 0.0) if after else float("inf")
    return {
        "jobs": args.jobs,
        "cycles": run.stats.snapshots,
        "decisions_applied": run.stats.decisions_applied,
        "killed_node": killed[0][0],
        "pause_s": float(pause),
        "median_gap_before_s": float(np.median(gaps_before)) if len(gaps_before) else float("nan"),
        "decisions_on_stream": len(decisions),
        "decisions_published_twice": len(decisions) - len(set(decisions)),
        "outcomes": run.stats.outcomes,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--kill-after", type=int, default=80, help="cycles before the leader is killed")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "nats_failover.json"))
    args = p.parse_args()
    rows = []
    for k in range(args.repeats):
        console.print(f"run {k + 1} of {args.repeats}: {args.jobs} jobs, kill after {args.kill_after} cycles")
        with tempfile.TemporaryDirectory(prefix="hylo-failover-") as tmp:
            rows.append(one_run(args, Path(tmp)))
    table = Table(title="one of three NATS nodes (the decisions' stream leader) SIGKILLed mid-run")
    for col in ("run", "cycles", "applied remotely", "pause s", "median gap s", "on stream", "twice"):
        table.add_column(col, justify="right")
    for k, r in enumerate(rows, 1):
        table.add_row(
            str(k),
            str(r["cycles"]),
            str(r["decisions_applied"]),
            f"{r['pause_s']:.2f}",
            f"{r['median_gap_before_s']:.3f}",
            str(r["decisions_on_stream"]),
            str(r["decisions_published_twice"]),
        )
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
