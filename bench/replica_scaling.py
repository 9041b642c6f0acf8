"""Many clusters through replicated services: throughput and CPU per decision at 1, 2 and 4 replicas
(issue 22, item 2).

    .venv/bin/python bench/replica_scaling.py                       # 8 clusters x 1,024 pending, 1/2/4
    .venv/bin/python bench/replica_scaling.py --replicas 1,2 --size 256 --seconds 8   # a quick look

What runs, for each replica count R: a private nats-server, a SQLite file (or ``--database-url``),
and R processes of each stage (featurizer, prioritizer, deciding placer, recording placer: the
placer's two roles as in bench/pipeline.py), started as deployed. ``--clusters`` clusters (8 by
default, all with the openb spec; the embedded one without the traces) each keep one snapshot of
``--size`` pending jobs in flight for ``--seconds``. Replicas of a stage share its durable consumer
(the queue-group behaviour).

Reported per R: decisions per second, snapshot -> decision p50/p99 per cluster (worst cluster), CPU
seconds per decision of each stage (summed over its replicas, from /proc), and decisions per CPU
second of the whole pipeline. On 2 cores the CPU is the limit, so decisions/s cannot grow with R;
what must hold is that decisions per CPU-second do not fall as replicas are added (within 10%).
Writes JSON (``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pipeline import MAX_BYTES, busy_snapshot_source, cpu_seconds, snapshot_of  # noqa: E402
from services.adapter_sim.stack import LocalStack  # noqa: E402
from shared.bus import BusSettings, Publisher, connect, ensure_streams  # noqa: E402
from shared.schemas import Limits, PlacementDecision, Subjects, decode  # noqa: E402
from shared.store.migrate import upgrade_url  # noqa: E402

console = Console()
STAGES = ("featurizer", "prioritizer", "placer-decide", "placer-record")


def _start(stack: LocalStack, env: dict[str, str], replicas: int) -> None:
    for _ in range(replicas):
        stack.start_services(env, names=("featurizer", "prioritizer"))
        for role in ("decide", "record"):
            stack.start_services({**env, "HYLO_PLACER_ROLE": role}, names=("placer",))
    stack.wait_ready(timeout_s=300)


def _stage(name: str, env: dict[str, str] | None) -> str:
    role = (env or {}).get("HYLO_PLACER_ROLE")
    return f"{name}-{role}" if role else name


async def _drive(
    nats_url: str, root: str, src: Any, clusters: list[str], size: int, seconds: float, warmup_s: float
) -> tuple[dict[str, list[float]], float, int]:
    """Each cluster keeps one snapshot in flight; returns latencies per cluster (after the warm-up),
    the measured wall time and the decisions in it."""
    bus = BusSettings(nats_url=nats_url, subject_root=root, storage="memory")
    nc = await connect(bus)
    js = nc.jetstream()
    subjects = Subjects(root)
    await ensure_streams(js, subjects, bus)
    limits = Limits(max_message_bytes=MAX_BYTES)
    publisher = Publisher(js, subjects, limits)
    waiting: dict[str, asyncio.Future[float]] = {}

    async def on_decision(msg: Any) -> None:
        arrived = time.perf_counter()
        decision = decode(PlacementDecision, msg.data, limits)
        future = waiting.pop(decision.correlation_id, None)
        if future is not None and not future.done():
            future.set_result(arrived)

    await nc.subscribe(subjects.all_clusters("placements"), cb=on_decision)
    latencies: dict[str, list[float]] = {c: [] for c in clusters}
    start = time.perf_counter() + warmup_s
    end = start + seconds
    done = [0]
    seq = [int(time.time() * 1000)]

    async def loop(k: int, cluster: str) -> None:
        i = 0
        while time.perf_counter() < end:
            seq[0] += 1
            i += 1
            snap = snapshot_of(src, size, cluster, seq[0], offset=i * 13 + k)
            future = asyncio.get_running_loop().create_future()
            waiting[snap.correlation_id] = future
            t0 = time.perf_counter()
            await publisher.publish(snap)
            arrived = await asyncio.wait_for(future, 120)
            if t0 >= start and arrived <= end:
                latencies[cluster].append((arrived - t0) * 1e3)
                done[0] += 1

    await asyncio.gather(*(loop(k, c) for k, c in enumerate(clusters)))
    await nc.close()
    return latencies, seconds, done[0]


def measure(args: argparse.Namespace, src: Any, spec_name: str, replicas: int, shard: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hylo-replicas-") as tmp:
        folder = Path(tmp)
        stack = LocalStack(folder)
        try:
            nats_url = stack.start_nats()
            db = args.database_url or f"sqlite+aiosqlite:///{folder / 'bench.db'}"
            upgrade_url(db)
            root = "scale" + uuid.uuid4().hex[:8]
            clusters = [f"k{k}" for k in range(args.clusters)]
            env = {
                "HYLO_NATS_URL": nats_url,
                "HYLO_SUBJECT_ROOT": root,
                "HYLO_DATABASE_URL": db,
                "HYLO_CLUSTERS": json.dumps({c: spec_name for c in clusters}),
                "HYLO_PLACEMENT": args.placement,
                "HYLO_STORAGE": "memory",
                "HYLO_LOG_LEVEL": "WARNING",
                "HYLO_PLACER_DECODE_AHEAD": args.decode_ahead,
                "HYLO_SHARD_CLUSTERS": "true" if shard else "false",
            }
            _start(stack, env, replicas)
            procs = {c.proc.pid: _stage(c.name, c.env) for c in stack.children if c.name != "nats-server"}

            async def run() -> tuple[dict[str, list[float]], float, int, dict[str, float]]:
                task = asyncio.create_task(
                    _drive(nats_url, root, src, clusters, args.size, args.seconds, args.warmup_s)
                )
                await asyncio.sleep(args.warmup_s)
                cpu0 = {pid: cpu_seconds(pid) for pid in procs}
                latencies, wall, done = await task
                used: dict[str, float] = dict.fromkeys(STAGES, 0.0)
                for pid, stage in procs.items():
                    used[stage] += cpu_seconds(pid) - cpu0[pid]
                return latencies, wall, done, used

            latencies, wall, done, used = asyncio.run(run())
        finally:
            stack.stop()
    per_cluster_p99 = {c: float(np.percentile(v, 99)) for c, v in latencies.items() if v}
    all_ms = np.concatenate([np.asarray(v) for v in latencies.values() if v])
    total_cpu = sum(used.values())
    return {
        "replicas": replicas,
        "shard_clusters": shard,
        "clusters": args.clusters,
        "pending_jobs": args.size,
        "decisions": done,
        "seconds": wall,
        "decisions_per_s": done / wall,
        "p50_ms": float(np.percentile(all_ms, 50)),
        "p99_ms_worst_cluster": max(per_cluster_p99.values()),
        "p99_ms_per_cluster": per_cluster_p99,
        "cpu_s_per_decision": {s: used[s] / max(1, done) for s in STAGES},
        "decisions_per_cpu_s": done / total_cpu if total_cpu > 0 else float("nan"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", default="1,2,4", help="replica counts per stage, comma-separated")
    p.add_argument("--clusters", type=int, default=8)
    p.add_argument("--size", type=int, default=1024, help="pending jobs per snapshot")
    p.add_argument("--seconds", type=float, default=30.0, help="measured time per replica count")
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--trace", default="openb-gpuspec33")
    p.add_argument("--cluster", default="alibaba-openb")
    p.add_argument("--placement", default="cp-sat", choices=["cp-sat", "best-fit"])
    p.add_argument("--database-url", default=None)
    p.add_argument(
        "--decode-ahead", default="idle", choices=["on", "idle", "off"], help="HYLO_PLACER_DECODE_AHEAD"
    )
    p.add_argument(
        "--shard-clusters",
        default="on",
        help="HYLO_SHARD_CLUSTERS per series, comma-separated: on (each cluster to one replica), off "
        "(any replica takes any cluster's message), or on,off for both side by side [on]",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "replica_scaling.json"))
    args = p.parse_args()
    counts = [int(r) for r in args.replicas.split(",") if r]
    modes = [m.strip() for m in args.shard_clusters.split(",") if m.strip()]
    if not modes or any(m not in ("on", "off") for m in modes):
        p.error(f"--shard-clusters {args.shard_clusters!r}: expected on, off or on,off")
    src = busy_snapshot_source(args.trace, args.cluster, "burst")
    spec_name = args.cluster if src[4] == args.trace else "embedded"
    rows = []
    # the series interleaved (1 on, 1 off, 2 on, ...): a change in the machine's load hits both alike
    for r in counts:
        for mode in modes:
            console.print(
                f"{r} replica(s) per stage, sharding {mode}, "
                f"{args.clusters} clusters x {args.size} pending ..."
            )
            rows.append(measure(args, src, spec_name, r, mode == "on"))
    base = {row["shard_clusters"]: row["decisions_per_cpu_s"] for row in reversed(rows)}
    title = f"{args.clusters} clusters x {args.size} pending jobs, {src[4]} on {spec_name}"
    table = Table(title=f"{title}, placer decode-ahead {args.decode_ahead}")
    for col in (
        "replicas",
        "sharding",
        "decisions/s",
        "p50 ms",
        "p99 ms (worst cluster)",
        "decisions per CPU-s",
        "vs 1",
    ):
        table.add_column(col, justify="right")
    for stage in STAGES:
        table.add_column(f"{stage} CPU ms/decision", justify="right")
    for row in rows:
        table.add_row(
            str(row["replicas"]),
            "on" if row["shard_clusters"] else "off",
            f"{row['decisions_per_s']:.1f}",
            f"{row['p50_ms']:.0f}",
            f"{row['p99_ms_worst_cluster']:.0f}",
            f"{row['decisions_per_cpu_s']:.2f}",
            f"{row['decisions_per_cpu_s'] / base[row['shard_clusters']] - 1:+.1%}",
            *(f"{row['cpu_s_per_decision'][s] * 1e3:.1f}" for s in STAGES),
        )
    console.print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "source": src[4], "rows": rows}, indent=2) + "\n")
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
