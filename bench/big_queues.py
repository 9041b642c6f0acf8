"""Big queues (issue 22, item 1): 4,096 and 50,000 pending jobs on a 10,000-node cluster, through
the real pipeline, and what scoring only the first K jobs costs a learned model's schedule.

    .venv/bin/python bench/big_queues.py                      # latency: 4,096 and 50,000 pending
    .venv/bin/python bench/big_queues.py --samples 5 --model none
    .venv/bin/python bench/big_queues.py --quality            # full ranking vs the first K, simulated

**Latency** (the default). The cluster is Alibaba's openb layout (``alibaba-openb``: 1,213 nodes, 15
node groups, 7 GPU types) replicated to ``--nodes`` (10,000: every group's count scaled by 8.24),
written as a spec file. Its jobs are the openb pod list (``openb-gpuspec33``, 7,255 pods) repeated
``--copies`` times with new ids, each copy after the previous one; best-fit fills the cluster with
them in order until it fails 3,000 times in a row or only the rows kept for the queues are left
(about 67,000 running pods, 87% of the GPUs busy), and each snapshot's queue is drawn from the rows
that did not fit, so few of them start (a busy cluster between scheduling events). Without the
traces the generated workload stands in, and the tables say so.

Two measurements, on the same snapshots:

1. *steps*: the thread CPU of each step between a snapshot and its decision, in one process, with the
   code each service runs (as ``bench/pipeline_steps.py``): where the time goes per stage, free of
   the machine's other load.
2. *pipeline*: a private nats-server (``--max-payload``, NATS' default 1 MiB unless given: every
   message above it goes through the JetStream object store, ``shared.bus.large``), a SQLite store,
   and the featurizer, prioritizer (``--model``: the checkpoint it starts with; its model scores the
   first ``HYLO_MODEL_CANDIDATES`` jobs in base order, its own window of 256 by default) and
   placer (one deciding and one recording process), each its own process as deployed. One snapshot
   at a time, each published once the recorder has stored the previous decision (a cluster of this
   size is polled every few seconds); the clock runs from just before the snapshot is published
   (its encoding and object-store write included) to the moment the adapter holds the decoded
   decision (its object-store read included). Reported: p50, p99 and max, each stage's own time and
   its wait (stored to handled: the object-store read is in it) from the decision's
   ``latencies_ms``, and each process's CPU per decision.

**Quality** (``--quality``). In the simulator, on a real trace: a shipped checkpoint ranking the whole
queue against the same checkpoint ranking only the first K jobs in its base policy's order (the rest
in base order), as the prioritizer does (``LearnedPolicy(max_queue=K)``), on the same windows; mean
wait and bounded slowdown per window, the paired difference with a bootstrap CI.

Prints rich tables and merges its results into ``--out`` (``docs/results/big-queues.json``).
Numbers: ``docs/results/big-queues.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from pipeline import cpu_seconds, recorded  # noqa: E402

from services.adapter_sim.snapshot import SnapshotBuilder  # noqa: E402
from services.adapter_sim.stack import LocalStack  # noqa: E402
from services.featurizer.stage import FeaturizerStage  # noqa: E402
from services.placer.stage import PlacerStage  # noqa: E402
from services.prioritizer.models import ModelHolder  # noqa: E402
from services.prioritizer.service import startup_version  # noqa: E402
from services.prioritizer.stage import PrioritizerStage  # noqa: E402
from shared.bus import BusSettings, LargePayloads, Publisher, connect, ensure_streams, stream_name  # noqa: E402
from shared.bus.large import is_reference, parse_reference  # noqa: E402
from shared.domain.cluster import ClusterSpec, load_cluster_spec, parse_cluster_spec  # noqa: E402
from shared.domain.jobs import WHOLE_GPU_MILLI  # noqa: E402
from shared.scheduling.binding import bind_jobs  # noqa: E402
from shared.scheduling.placement import BestFit  # noqa: E402
from shared.scheduling.state import ClusterState  # noqa: E402
from shared.schemas import FeatureMatrix, Limits, PlacementDecision, PriorityVector, QueueSnapshot, Subjects  # noqa: E402
from shared.schemas.codec import RECEIVED, decode, encode  # noqa: E402
from shared.schemas.messages import MatrixRef  # noqa: E402
from shared.service.latency import with_wait  # noqa: E402
from shared.store.migrate import upgrade_url  # noqa: E402

T = TypeVar("T")
console = Console(width=150)
TARGET_P99_S = 1.0
DEFAULT_MODEL = "docs/results/runs/openb15-easy-fcfs-wait/checkpoint"
NATS_DEFAULT_PAYLOAD = 1 << 20
Source = tuple[SnapshotBuilder, ClusterState, dict[int, Any], int, str]


# -- the cluster and its jobs ---------------------------------------------------------------------


def replicated_spec(nodes: int) -> ClusterSpec:
    """The openb layout with every group's node count scaled to ``nodes`` in all (the largest group
    absorbs the rounding)."""
    base = load_cluster_spec("alibaba-openb")
    doc = base.model_dump(mode="json")
    factor = nodes / base.total_nodes
    for group in doc["node_groups"]:
        group["count"] = max(1, round(group["count"] * factor))
    doc["node_groups"][0]["count"] += nodes - sum(g["count"] for g in doc["node_groups"])
    doc["name"] = f"openb-x{factor:.2f}"
    doc["description"] = f"alibaba-openb replicated to {nodes:,} nodes (bench/big_queues.py)"
    return parse_cluster_spec(doc, "bench/big_queues.py")


def busy_source(spec: ClusterSpec, copies: int, reserve: int) -> Source:
    """The openb pod list ``copies`` times (new ids, each copy after the last) bound to ``spec``, its
    first rows filled in by best-fit (module docstring); ``reserve`` rows are kept for the queues."""
    try:
        from shared.traces import apply_estimates, load_trace

        table = apply_estimates(load_trace("openb-gpuspec33").table, "noisy", 0)
        label = "openb-gpuspec33"
    except Exception as err:  # no traces on this machine: the generated workload stands in
        from shared.workload import generate_for_cluster

        console.print(f"[yellow]openb-gpuspec33 unavailable ({err}); using the generated workload[/]")
        table = generate_for_cluster(load_cluster_spec("alibaba-openb"), 8000, 0)
        label = "generated (openb-calibrated)"
    n0 = len(table)
    big = table.take(np.tile(np.arange(n0), copies))
    span = float(table.submit[-1] - table.submit[0]) + 1.0
    big = big.with_fields(submit=big.submit + np.repeat(np.arange(copies), n0) * span)
    big = dataclasses.replace(big, ids=np.array([f"p{i}" for i in range(len(big))]))
    w = bind_jobs(big, spec)
    builder = SnapshotBuilder(w, w.jobs.estimate, "k0", max_pending=1_000_000)
    frac = {
        g for c in np.unique(w.job_class[w.jobs.gpu_milli < WHOLE_GPU_MILLI]) for g in w.class_groups[int(c)]
    }
    state = ClusterState(w.spec, frac)
    bf, allocs, row, misses, n = BestFit(), {}, 0, 0, len(w.jobs)
    while misses < 3000 and row < n - reserve:
        alloc = bf.place(state, *w.request(row))
        if alloc is None:
            misses += 1
        else:
            misses = 0
            state.take(alloc)
            allocs[row] = alloc
            builder.started(row, alloc, 0.0)
        row += 1
    return builder, state, allocs, row, label


class Churn:
    """Snapshot after snapshot of the busy cluster, as a poll every ``step_s`` seconds would see it:
    between two snapshots ``churn`` running jobs end (drawn at random) and as many queued rows start
    where best-fit finds room (of at most ten times as many tried), so that a placer that reuses
    the last snapshot's running jobs (``ClusterDescriber``) pays for what changed, as it would on
    a live cluster. ``churn`` 0: every snapshot has the same running jobs (the bench before it)."""

    def __init__(self, src: Source, churn: int, seed: int = 0, step_s: float = 5.0) -> None:
        self.src, self.churn, self.step_s = src, churn, step_s
        self.rng = np.random.default_rng(seed)
        self.now = 1e6
        self.snapshots = 0

    def snapshot(self, size: int, sequence: int, offset: int) -> QueueSnapshot:
        """The next snapshot with a queue of ``size`` rows that are not running (from ``offset``)."""
        builder, state, allocs, _, _ = self.src
        if self.snapshots and self.churn:
            self.now += self.step_s
            ended = self.rng.choice(np.fromiter(allocs, dtype=np.int64), self.churn, replace=False)
            for row in ended.tolist():
                state.give(allocs.pop(row))
                builder.ended(row)
            waiting = np.setdiff1d(np.arange(len(builder.workload.jobs)), np.fromiter(allocs, dtype=np.int64))
            started, bf = 0, BestFit()
            for row in self.rng.permutation(waiting)[: 10 * self.churn].tolist():
                alloc = bf.place(state, *builder.workload.request(row))
                if alloc is not None:
                    state.take(alloc)
                    allocs[row] = alloc
                    builder.started(row, alloc, self.now)
                    started += 1
                    if started == self.churn:
                        break
        self.snapshots += 1
        waiting = np.setdiff1d(np.arange(len(builder.workload.jobs)), np.fromiter(allocs, dtype=np.int64))
        queued = np.sort(waiting[(offset + np.arange(size)) % len(waiting)])
        snap, _ = builder.build(
            state, allocs, queued, now=self.now, sequence=sequence, correlation_id=uuid.uuid4().hex
        )
        return snap.model_copy(update={"cluster": "k0"})


# -- steps: thread CPU per step, in one process ----------------------------------------------------


def steps(src: Churn, spec: ClusterSpec, size: int, samples: int, model: str | None) -> dict[str, Any]:
    """Median thread CPU (ms) of each step from snapshot to decision (``bench/pipeline_steps.py``'s
    steps, with the big limits and the model's bounded window), and the message sizes."""
    specs = {"k0": spec}
    limits = Limits()
    holder = ModelHolder()
    if model:
        holder.load(startup_version(model, "k0"))
    held: list[QueueSnapshot] = []

    async def snapshots(_: FeatureMatrix) -> QueueSnapshot | None:
        return held[-1]

    featurizer = FeaturizerStage(specs, limits=limits)
    prioritizer = PrioritizerStage(
        specs=specs, limits=limits, holder=holder, snapshots=snapshots, deadline_ms=60_000
    )
    placer = PlacerStage(specs, placement="best-fit", limits=limits)
    times: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    def timed(step: str, fn: Callable[[], T]) -> T:
        t0 = time.thread_time()
        out = fn()
        times.setdefault(step, []).append((time.thread_time() - t0) * 1e3)
        return out

    async def one(i: int) -> None:
        snap = src.snapshot(size, 1000 + i, offset=i * 7)
        raw = timed("adapter: encode the snapshot", lambda: encode(snap, limits))
        got = timed("featurizer: decode the snapshot", lambda: decode(QueueSnapshot, raw, limits))
        matrix = timed("featurizer: featurize", lambda: featurizer.handle(got, 1))
        matrix_raw = timed(
            "featurizer: encode the matrix", lambda: encode(with_wait(matrix, "featurize", 0.0), limits)
        )
        held.append(
            timed("prioritizer: decode the snapshot (ahead)", lambda: decode(QueueSnapshot, raw, limits))
        )
        timed("prioritizer: prepare the model's window (ahead)", lambda: prioritizer.prepare(held[-1]))
        received = timed("prioritizer: decode the matrix", lambda: decode(FeatureMatrix, matrix_raw, limits))
        t0 = time.thread_time()
        vector = await prioritizer.handle(received)
        times.setdefault("prioritizer: prioritize", []).append((time.thread_time() - t0) * 1e3)
        ref = MatrixRef(seq=1 + i, sha256=RECEIVED.digest_of(received) or "")
        vector_raw = timed(
            "prioritizer: encode the vector",
            lambda: encode(vector.model_copy(update={"matrix_ref": ref}), limits),
        )
        snap_p = timed("placer: decode the snapshot (ahead)", lambda: decode(QueueSnapshot, raw, limits))
        prepared = timed("placer: prepare the cluster (ahead)", lambda: placer.prepare(snap_p))
        timed(
            "placer: decode the matrix (ahead)",
            lambda: RECEIVED.digest_of(decode(FeatureMatrix, matrix_raw, limits)),
        )
        vector_p = timed("placer: decode the vector", lambda: decode(PriorityVector, vector_raw, limits))
        decision = timed("placer: place", lambda: placer.handle(vector_p, snap_p, None, prepared))
        decision_raw = timed(
            "placer: encode the decision", lambda: encode(with_wait(decision, "place", 0.0), limits)
        )
        timed("adapter: decode the decision", lambda: decode(PlacementDecision, decision_raw, limits))
        sizes.update(
            snapshot=len(raw), matrix=len(matrix_raw), vector=len(vector_raw), decision=len(decision_raw)
        )
        sizes["model_scored"] = int(vector.policy == "model")

    async def run() -> None:
        for i in range(samples + 1):  # one warm-up sample
            await one(i)

    gc.collect()
    gc.freeze()  # as the services do (shared.service.runtime.serve)
    gc.set_threshold(100_000, 50, 100)
    asyncio.run(run())
    prioritizer.close()
    return {
        "pending_jobs": size,
        "median_ms": {k: statistics.median(v[1:]) for k, v in times.items()},
        "bytes": sizes,
    }


# -- pipeline: real NATS, the services as processes -----------------------------------------------


async def latency(ctx: dict[str, Any], src: Churn, size: int, samples: int, warmup: int) -> dict[str, Any]:
    """One snapshot at a time, each once the previous decision is stored (``bench/pipeline.py``)."""
    ms: list[float] = []
    stages: dict[str, list[float]] = {}
    procs: dict[str, int] = ctx["procs"]
    cpu0: dict[str, float] = {}
    seq = int(time.time() * 1000)
    policies: list[str] = []
    for i in range(warmup + samples):
        seq += 1
        snap = src.snapshot(size, seq, offset=i * 7)
        if ctx["record"]:
            await recorded(ctx, timeout_s=600)
        if i == warmup:
            cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        fut: asyncio.Future[tuple[float, PlacementDecision]] = asyncio.get_running_loop().create_future()
        ctx["waiting"][snap.correlation_id] = fut
        t0 = time.perf_counter()
        await ctx["publisher"].publish(snap)
        arrived, decision = await asyncio.wait_for(fut, 300)
        if i < warmup:
            continue
        ms.append((arrived - t0) * 1e3)
        policies.append(
            decision.policy if decision.fallback is None else f"{decision.policy} ({decision.fallback[:40]})"
        )
        for k, v in decision.latencies_ms.items():
            stages.setdefault(k, []).append(v)
    if ctx["record"]:
        await recorded(ctx, timeout_s=600)
    cpu = {name: (cpu_seconds(pid) - cpu0.get(name, 0.0)) * 1e3 / samples for name, pid in procs.items()}
    a = np.array(ms)
    return {
        "pending_jobs": size,
        "running_jobs": len(snap.running),
        "nodes": len(snap.nodes),
        "samples": samples,
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
        "stage_median_ms": {k: float(np.median(v)) for k, v in sorted(stages.items())},
        "cpu_ms_per_decision": cpu,
        "deciders": {p: policies.count(p) for p in sorted(set(policies))},
        "wire": await wire_sizes(ctx),
    }


async def wire_sizes(ctx: dict[str, Any]) -> dict[str, Any]:
    """The newest message of each pipeline stream: its bytes, and whether it travelled as a
    reference to the object store."""
    out: dict[str, Any] = {}
    for kind in ("snapshots", "features", "priorities", "placements"):
        stream = stream_name(ctx["subjects"], kind)
        info = await ctx["js"].stream_info(stream)
        raw = await ctx["js"].get_msg(stream, info.state.last_seq)
        data = raw.data or b""
        if is_reference(data):
            ref = parse_reference(data)
            out[kind] = {"bytes": ref.bytes, "object_store": True, "chunks": ref.chunks}
        else:
            out[kind] = {"bytes": len(data), "object_store": False}
    return out


def start_stack(
    stack: LocalStack, spec_file: Path, folder: Path, model: str | None, max_payload: int, record: bool
) -> dict[str, Any]:
    """nats-server, SQLite, and the services as processes; returns what ``body`` needs."""
    nats_url = stack.start_nats(max_payload=max_payload)
    db = f"sqlite+aiosqlite:///{folder / 'bench.db'}"
    upgrade_url(db)
    root = "bq" + uuid.uuid4().hex[:8]
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_SUBJECT_ROOT": root,
        "HYLO_DATABASE_URL": db,
        "HYLO_CLUSTERS": json.dumps({"k0": str(spec_file)}),
        "HYLO_PLACEMENT": "best-fit",
        "HYLO_STORAGE": "memory",
        "HYLO_LOG_LEVEL": "WARNING",
        "HYLO_ACK_WAIT_S": "120",
    }
    if model:
        env["HYLO_MODEL_PATH"] = str((ROOT / model).resolve() if not Path(model).is_absolute() else model)
    stack.start_services(env, names=("featurizer", "prioritizer"))
    for role in ("decide",) if not record else ("decide", "record"):
        stack.start_services({**env, "HYLO_PLACER_ROLE": role}, names=("placer",))
    stack.wait_ready(timeout_s=300)
    return {"nats_url": nats_url, "root": root}


def pipeline(src: Churn, spec: ClusterSpec, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The latency of every size through the stack (module docstring)."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hylo-bigq-") as tmp:
        folder = Path(tmp)
        spec_file = folder / "openb-10k.yaml"
        spec_file.write_text(json.dumps(spec.model_dump(mode="json")))  # JSON is YAML
        stack = LocalStack(folder)
        try:
            started = start_stack(stack, spec_file, folder, args.model, args.max_payload, not args.no_record)

            async def body() -> None:
                bus = BusSettings(
                    nats_url=started["nats_url"], subject_root=started["root"], storage="memory"
                )
                nc = await connect(bus)
                js = nc.jetstream()
                subjects = Subjects(started["root"])
                await ensure_streams(js, subjects, bus)
                large = LargePayloads(js, subjects, bus)
                limits = Limits()
                waiting: dict[str, asyncio.Future[tuple[float, PlacementDecision]]] = {}

                async def on_decision(msg: Any) -> None:
                    data = await large.resolve(msg.data, limits.max_message_bytes)
                    decision = decode(PlacementDecision, data, limits)
                    arrived = time.perf_counter()
                    fut = waiting.pop(decision.correlation_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result((arrived, decision))

                await nc.subscribe(subjects.all_clusters("placements"), cb=on_decision)
                procs = {
                    c.name
                    + (
                        f"-{c.env['HYLO_PLACER_ROLE']}" if c.env and "HYLO_PLACER_ROLE" in c.env else ""
                    ): c.proc.pid
                    for c in stack.children
                }
                ctx = {
                    "procs": procs,
                    "publisher": Publisher(js, subjects, limits, large=large),
                    "waiting": waiting,
                    "js": js,
                    "subjects": subjects,
                    "placements_stream": stream_name(subjects, "placements"),
                    "record": not args.no_record,
                }
                for size in args.sizes:
                    console.print(f"pipeline: {size:,} pending jobs, {args.samples} samples ...")
                    results.append(await latency(ctx, src, size, args.samples, args.warmup))
                await nc.close()

            asyncio.run(body())
        finally:
            stack.stop()
    return results


# -- quality: full ranking vs the first K ---------------------------------------------------------


def quality(args: argparse.Namespace) -> dict[str, Any]:
    """Per-window wait and BSLD of the checkpoint ranking the first K jobs vs the whole queue."""
    from shared.features import FeatureSampler
    from shared.metrics.bootstrap import paired_difference
    from shared.metrics.windows import make_windows
    from shared.policies import make_policy
    from shared.policies.base import Policy
    from shared.rl.policy import LearnedPolicy
    from shared.rl.setup import load_trained
    from shared.sim.config import SimConfig
    from shared.sim.evaluate import evaluate_policies, prepare_workload

    net, card, schema = load_trained(ROOT / args.quality_model)
    recorded_sim = card.training.extra.get("sim_config", {})
    config = SimConfig(**{k: v for k, v in recorded_sim.items() if k in SimConfig.model_fields})
    workload = prepare_workload(
        args.quality_trace, str(ROOT / args.quality_cluster), target_load=args.quality_load
    )
    windows = make_windows(range(len(workload.bound.jobs)), args.quality_window, args.quality_windows, seed=0)
    base = card.training.base_policy
    full = len(workload.bound.jobs)

    def factory(k: int) -> Callable[[float], Policy]:
        def build(decides_from: float) -> Policy:
            return LearnedPolicy(
                net,
                make_policy(base),
                mode="greedy",
                warm_until=decides_from,
                sampler=FeatureSampler(schema.sampling),
                feature_config=schema.config,
                max_queue=k,
            )

        return build

    names = {f"K={k}" if k < full else "full": k for k in [*args.quality_k, full]}
    per: dict[str, dict[str, list[float]]] = {}
    seconds: dict[str, float] = {}
    for name in [base, *names]:
        console.print(f"quality: {name} on {len(windows)} windows ...")
        t0 = time.perf_counter()
        metrics, _ = evaluate_policies(
            workload,
            [name],
            config,
            windows,
            warmup=args.quality_warmup,
            factories={n: factory(k) for n, k in names.items()},
        )
        seconds[name] = time.perf_counter() - t0
        ms = metrics[name]
        per[name] = {
            "wait_s": [m.wait_s.mean for m in ms],
            "bsld": [m.bsld.mean for m in ms],
            "queue_mean": [m.queue_mean for m in ms],
        }
    diffs: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == "full":
            continue
        diffs[name] = {}
        for metric in ("wait_s", "bsld"):
            d = paired_difference(per[name][metric], per["full"][metric])
            diffs[name][metric] = {
                "mean": float(np.mean(per[name][metric])),
                "full": float(np.mean(per["full"][metric])),
                "diff": d.mean_diff,
                "ci": [d.diff_low, d.diff_high],
                "relative": -d.rel_improvement,  # > 0: worse than the whole queue ranked
            }
    return {
        "checkpoint": args.quality_model,
        "trace": workload.name,
        "cluster": args.quality_cluster,
        "load": args.quality_load,
        "windows": [[w.start, w.size] for w in windows],
        "warmup": args.quality_warmup,
        "model_window": net.config.max_queue,
        "base_policy": base,
        "per_window": per,
        "seconds": seconds,
        "vs_full": diffs,
    }


# -- output ---------------------------------------------------------------------------------------


def print_steps(rows: list[dict[str, Any]]) -> None:
    table = Table(title="thread CPU per step (ms, median), in one process: where the time goes")
    table.add_column("step")
    for r in rows:
        table.add_column(f"{r['pending_jobs']:,} pending", justify="right")
    for step in rows[0]["median_ms"]:
        table.add_row(step, *(f"{r['median_ms'][step]:.1f}" for r in rows))
    table.add_row(
        "message sizes (kB): snapshot / matrix / vector / decision",
        *(
            " / ".join(f"{r['bytes'][k] / 1e3:.0f}" for k in ("snapshot", "matrix", "vector", "decision"))
            for r in rows
        ),
    )
    console.print(table)


def print_pipeline(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    model = args.model or "none (base policy)"
    lat = Table(title=f"snapshot -> decision over NATS (max_payload {args.max_payload:,}), model {model}")
    for col in (
        "pending",
        "running",
        "nodes",
        "samples",
        "p50 ms",
        "p99 ms",
        "max ms",
        f"p99 <= {TARGET_P99_S:g} s",
        "decided by",
    ):
        lat.add_column(col)
    for r in rows:
        lat.add_row(
            f"{r['pending_jobs']:,}",
            f"{r['running_jobs']:,}",
            f"{r['nodes']:,}",
            str(r["samples"]),
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{r['max_ms']:.0f}",
            "met" if r["p99_ms"] <= TARGET_P99_S * 1e3 else "MISSED",
            ", ".join(f"{k}: {v}" for k, v in r["deciders"].items()),
        )
    console.print(lat)
    names = sorted({k for r in rows for k in r["stage_median_ms"]})
    stage = Table(
        title="median per stage (ms): own time, and <stage>_wait from stored to handled "
        "(object-store reads in it)"
    )
    stage.add_column("stage")
    for r in rows:
        stage.add_column(f"{r['pending_jobs']:,}", justify="right")
    for k in names:
        stage.add_row(k, *(f"{r['stage_median_ms'].get(k, 0.0):.1f}" for r in rows))
    procs = sorted({k for r in rows for k in r["cpu_ms_per_decision"]})
    for p in procs:
        stage.add_row(
            f"CPU of {p} per decision", *(f"{r['cpu_ms_per_decision'].get(p, 0.0):.0f}" for r in rows)
        )
    for kind in ("snapshots", "features", "priorities", "placements"):
        stage.add_row(
            f"{kind} bytes",
            *(
                f"{r['wire'][kind]['bytes'] / 1e3:,.0f} kB"
                + (f" ({r['wire'][kind]['chunks']} chunks)" if r["wire"][kind]["object_store"] else "")
                for r in rows
            ),
        )
    console.print(stage)


def print_quality(q: dict[str, Any]) -> None:
    table = Table(
        title=f"{q['checkpoint']} on {q['trace']} ({q['cluster']}), {len(q['windows'])} windows: "
        "the first K jobs in base order ranked by the model vs the whole queue"
    )
    for col in (
        "ranked by the model",
        "mean wait s",
        "vs full",
        "95% CI",
        "mean BSLD",
        "vs full",
        "95% CI",
        "queue",
        "sim s",
    ):
        table.add_column(col)
    per = q["per_window"]
    for name, values in per.items():
        row = [name, f"{np.mean(values['wait_s']):,.0f}"]
        d = q["vs_full"].get(name)
        for metric in ("wait_s", "bsld"):
            if metric == "bsld":
                row.append(f"{np.mean(values['bsld']):.2f}")
            if d is None:
                row += ["", ""]
            else:
                m = d[metric]
                row += [
                    f"{m['diff']:+,.2f} ({m['relative']:+.1%})",
                    f"[{m['ci'][0]:+,.2f}, {m['ci'][1]:+,.2f}]",
                ]
        row += [f"{np.nanmean(values['queue_mean']):,.0f}", f"{q['seconds'][name]:.0f}"]
        table.add_row(*row)
    console.print(table)


def write(out: Path, key: str, value: Any) -> None:
    """Merge ``value`` under ``key`` into the JSON file ``out``."""
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    doc[key] = value
    doc.setdefault("machine", {})[key] = {
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    console.print(f"wrote {out} ({key})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="4096,50000", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--copies", type=int, default=24, help="times the openb pod list is repeated")
    p.add_argument("--samples", type=int, default=20, help="per size, after --warmup")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps-samples", type=int, default=3)
    p.add_argument("--model", default=DEFAULT_MODEL, help="prioritizer checkpoint; 'none': the base policy")
    p.add_argument("--max-payload", type=int, default=NATS_DEFAULT_PAYLOAD, help="the NATS server's")
    p.add_argument("--skip-steps", action="store_true")
    p.add_argument("--skip-pipeline", action="store_true", help="the steps only")
    p.add_argument(
        "--churn", type=int, default=300, help="running jobs that end, and start, between two snapshots"
    )
    p.add_argument("--no-record", action="store_true", help="no recording placer (decisions are not stored)")
    p.add_argument("--quality", action="store_true", help="the ranking-quality comparison instead")
    p.add_argument("--quality-model", default=DEFAULT_MODEL)
    p.add_argument("--quality-trace", default="openb-gpuspec33")
    p.add_argument("--quality-cluster", default="docs/results/clusters/openb-slice15.toml")
    p.add_argument("--quality-load", type=float, default=3.0)
    p.add_argument("--quality-window", type=int, default=2048)
    p.add_argument("--quality-windows", type=int, default=6)
    p.add_argument("--quality-warmup", type=int, default=256)
    p.add_argument("--quality-k", default="64,256,1024", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "big-queues.json"))
    args = p.parse_args()
    args.model = None if args.model in ("", "none") else args.model
    out = Path(args.out)
    if args.quality:
        q = quality(args)
        print_quality(q)
        write(out, "quality", q)
        return
    spec = replicated_spec(args.nodes)
    t0 = time.perf_counter()
    busy_src = busy_source(
        spec, args.copies, reserve=max(args.sizes) + 7 * (args.samples + args.warmup) + 1000
    )
    busy = busy_src[1].busy_milli / (WHOLE_GPU_MILLI * busy_src[1].capacity_gpus)
    console.print(
        f"{spec.total_nodes:,} nodes, {len(busy_src[2]):,} running ({busy:.0%} of the GPUs), jobs from "
        f"{busy_src[4]}, set up in {time.perf_counter() - t0:.0f} s; "
        f"{args.churn} end and start between snapshots"
    )
    src = Churn(busy_src, args.churn)
    result: dict[str, Any] = {
        "cluster": spec.name,
        "nodes": spec.total_nodes,
        "running": len(busy_src[2]),
        "churn": args.churn,
        "gpu_busy": busy,
    }
    result["jobs"] = busy_src[4]
    result["model"] = args.model
    if not args.skip_steps:
        rows = [steps(src, spec, size, args.steps_samples, args.model) for size in args.sizes]
        print_steps(rows)
        result["steps"] = rows
    if not args.skip_pipeline:
        result["pipeline"] = pipeline(src, spec, args)
        print_pipeline(result["pipeline"], args)
    write(out, "latency", result)


if __name__ == "__main__":
    main()
