"""A large decisions store, generated and bulk-loaded into PostgreSQL with COPY: for scale benchmarks.

Why generated and not recorded: a million decision rows is weeks of a busy cluster; replaying that
through the services takes hours. The rows here have the shape the recorder writes
(``shared/store/writes.py``: one decision row per pending job per snapshot, the snapshot's policy,
model version, fallback and stage latencies repeated on each row, the job's features as JSON; one
``jobs`` row per job; one outcome per finished job naming the snapshot that started it; model versions
with their registry history; optionally shadow ranks), and the proportions of a steady queue:

- a snapshot every ``interval_s`` (30 s, the Slurm adapter's poll), epoch seconds on the cluster clock;
- ``arrivals`` jobs arrive per snapshot on average (Poisson), each stays pending for a heavy-tailed
  number of snapshots (lognormal) whose mean makes the queue hold ``queue`` jobs on average, and is
  started (placed) by the decision of its last snapshot; rows = snapshots x queue;
- runtimes lognormal (median 20 min), 1-8 GPUs, on a 512-GPU cluster about 85% busy on average
  (nothing schedules them: at peaks the busy GPUs exceed the capacity, which only the utilization
  figure shows); a job that has not finished by the last snapshot has no outcome (still running), one
  still pending has none either; 2% of outcomes name no stored decision (started outside Hylo's
  decisions);
- model versions promoted in turn (the first after 5% of the span; before it the base policy decides
  with the fallback "no model loaded"), 3% of the other snapshots are fallbacks (deadline, errors);
- a share of snapshots (``shadow_share``) also ranked by a shadow candidate.

- what the placer and the model knew (migration 0006): the placer's status of each row (``placed``,
  ``reserved`` for the first few waiting jobs, ``waiting``), the model's score when a model decided,
  the job's pool as raw features; and where each finished job ran (its node, GPUs and type).

Everything is drawn from ``seed``, so two runs make the same store. ``write_store`` loads it with
asyncpg's binary COPY, in chunks of whole snapshots, into a database migrated by the project's own
migrations (columns a older revision lacks are left out), then runs ``VACUUM ANALYZE`` (what autovacuum
does to a store that grew over weeks). On a store whose ``decisions`` is partitioned (revision 0007),
the partitions of the whole span are created first, as the maintenance step creates them ahead
(``shared.store.partitions``), so COPY routes every row to its partition and none to the default one.
On a store with ``decision_snapshots`` (revision 0008), what the recorder writes beside the rows (the
snapshots' summaries, each outcome's copy of the decision that started it; from revision 0009 also its
copy of its job's user and partition) is computed from the loaded rows by ``shared.store.derived``'s
backfills, as the migrations compute it for an existing store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
from sqlalchemy.engine import Connection

from shared.features.catalog import JOB_FEATURES
from shared.store import create_engine, derived, partitions
from shared.store.settings import MaintenanceSettings

CLUSTER = "bench"
#: 48 x 8 A100 + 32 x 4 V100 = 512 GPUs
SPEC: dict[str, Any] = {
    "name": CLUSTER,
    "node_groups": [
        {"name": "a100", "gpu_type": "A100", "count": 48, "gpus": 8, "cpus": 128, "mem_gib": 1024},
        {"name": "v100", "gpu_type": "V100", "count": 32, "gpus": 4, "cpus": 64, "mem_gib": 512},
    ],
}
T0 = 1_763_600_000.0  # 2025-11-20 (epoch seconds: the report draws UTC dates)
BASE_POLICY = "sjf"
NO_MODEL = "no model loaded"
FALLBACKS = (
    "deadline 50 ms exceeded (61.2 ms)",
    "deadline 50 ms exceeded (88.9 ms)",
    "model error: RuntimeError: expected 17 job features, got 16",
    "queue longer than max_queue (1024): base policy",
)
STAGES = ("featurize_wait", "featurize", "prioritize_wait", "prioritize", "place_wait", "place")
GPU_CHOICES = np.array([1, 2, 4, 8])
GPU_WEIGHTS = np.array([0.5, 0.2, 0.15, 0.15])
STATUSES = ("completed", "failed", "cancelled", "timeout")
STATUS_WEIGHTS = np.array([0.9, 0.07, 0.02, 0.01])
#: rows per COPY chunk (whole snapshots)
CHUNK_ROWS = 50_000

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Shape:
    """What the store looks like (module docstring)."""

    rows: int = 1_000_000
    queue: int = 50
    arrivals: float = 2.0
    interval_s: float = 30.0
    versions: int = 8
    fallback_share: float = 0.03
    shadow_share: float = 0.1
    unattributed_share: float = 0.02
    seed: int = 0


@dataclass(frozen=True)
class Plan:
    """The generated history as arrays: per snapshot, per job, and the job of each decision row."""

    shape: Shape
    snap_time: FloatArray
    snap_version: IntArray  # index into versions; -1: no model yet
    snap_fallback: IntArray  # index into FALLBACKS; -1: none; -2: NO_MODEL
    snap_shadow: IntArray  # index into versions of the shadow candidate; -1: none
    job_arrival: IntArray  # snapshot index
    job_start: IntArray  # snapshot index of the decision that starts it; >= snapshots: still pending
    job_submit: FloatArray
    job_runtime: FloatArray
    job_gpus: IntArray
    row_snap: IntArray  # decision rows, ordered by snapshot
    row_job: IntArray
    row_rank: IntArray
    version_names: tuple[str, ...]
    version_promoted: IntArray  # snapshot index of its promotion; -1 refused (a candidate)

    @property
    def snapshots(self) -> int:
        return len(self.snap_time)

    @property
    def rows(self) -> int:
        return len(self.row_snap)

    @property
    def end_s(self) -> float:
        return float(self.snap_time[-1]) if len(self.snap_time) else T0


def _residency(rng: np.random.Generator, n: int, mean: float) -> IntArray:
    """Snapshots a job stays pending (>= 1): lognormal, heavy-tailed, with the given mean."""
    sigma = 1.0
    mu = math.log(max(mean - 0.5, 0.5)) - sigma * sigma / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n) + 0.5)).astype(np.int64)


def _versions(shape: Shape, snapshots: int) -> tuple[tuple[str, ...], IntArray]:
    names = tuple(f"{CLUSTER}-m{v + 1:02d}" for v in range(shape.versions))
    promoted = np.full(shape.versions, -1, dtype=np.int64)
    refused = np.arange(shape.versions) % 3 == 2  # every third candidate fails the gate
    kept = np.flatnonzero(~refused)
    first = int(snapshots * 0.05)
    for i, v in enumerate(kept):
        promoted[v] = first + (snapshots - first) * i // len(kept)
    return names, promoted


def plan_store(shape: Shape) -> Plan:
    """Draw the history (module docstring): at least ``shape.rows`` decision rows, in whole snapshots."""
    rng = np.random.default_rng(shape.seed)
    mean_stay = shape.queue / shape.arrivals
    warmup = int(4 * mean_stay)
    horizon = shape.rows // shape.queue + warmup + 8
    while True:
        arrivals = rng.poisson(shape.arrivals, horizon)
        job_arrival = np.repeat(np.arange(horizon, dtype=np.int64), arrivals)
        stay = _residency(rng, len(job_arrival), mean_stay)
        job_start = job_arrival + stay - 1
        # rows per snapshot: jobs pending at it (arrived, not yet started)
        delta = np.zeros(horizon + 1, dtype=np.int64)
        np.add.at(delta, job_arrival, 1)
        np.add.at(delta, np.minimum(job_start + 1, horizon), -1)
        per_snap = np.cumsum(delta)[:horizon]
        total = np.cumsum(per_snap)
        if total[-1] >= shape.rows:
            break
        horizon *= 2
    snapshots = int(np.searchsorted(total, shape.rows) + 1)
    keep = job_arrival < snapshots
    job_arrival, job_start = job_arrival[keep], job_start[keep]
    n_jobs = len(job_arrival)
    snap_time = T0 + shape.interval_s * np.arange(snapshots) + rng.uniform(0, 2.0, snapshots)
    job_submit = snap_time[job_arrival] - rng.uniform(0, shape.interval_s, n_jobs)
    job_runtime = np.clip(rng.lognormal(math.log(1200.0), 1.2, n_jobs), 30.0, 7 * 86400.0)
    job_gpus = rng.choice(GPU_CHOICES, n_jobs, p=GPU_WEIGHTS).astype(np.int64)
    # decision rows: job j in snapshots arrival..min(start, last)
    last = np.minimum(job_start, snapshots - 1)
    counts = last - job_arrival + 1
    row_job = np.repeat(np.arange(n_jobs, dtype=np.int64), counts)
    offsets = np.arange(len(row_job)) - np.repeat(np.cumsum(counts) - counts, counts)
    row_snap = job_arrival[row_job] + offsets
    placed = job_start[row_job] == row_snap
    # order rows by snapshot, the started jobs first, the rest at random: the rank within the snapshot
    order = np.lexsort((rng.random(len(row_snap)), ~placed, row_snap))
    row_snap, row_job = row_snap[order], row_job[order]
    firsts = np.searchsorted(row_snap, np.arange(snapshots))
    row_rank = np.arange(len(row_snap)) - firsts[row_snap]
    names, promoted = _versions(shape, snapshots)
    snap_version = np.full(snapshots, -1, dtype=np.int64)
    for v in np.argsort(np.where(promoted < 0, snapshots + 1, promoted)):
        if promoted[v] >= 0:
            snap_version[promoted[v] :] = v
    snap_fallback = np.where(
        rng.random(snapshots) < shape.fallback_share, rng.integers(0, len(FALLBACKS), snapshots), -1
    )
    snap_fallback[snap_version < 0] = -2
    snap_shadow = np.full(snapshots, -1, dtype=np.int64)
    if shape.shadow_share > 0 and shape.versions > 1:
        # the candidate promoted next (or refused) is scored in shadow just before its promotion
        span = int(snapshots * shape.shadow_share)
        for v in range(1, shape.versions):
            at = promoted[v] if promoted[v] > 0 else (snapshots * v) // shape.versions
            lo = max(0, at - span // (shape.versions - 1))
            snap_shadow[lo:at] = v
    return Plan(
        shape=shape,
        snap_time=snap_time,
        snap_version=snap_version,
        snap_fallback=snap_fallback,
        snap_shadow=snap_shadow,
        job_arrival=job_arrival,
        job_start=job_start,
        job_submit=job_submit,
        job_runtime=job_runtime,
        job_gpus=job_gpus,
        row_snap=row_snap.astype(np.int64),
        row_job=row_job.astype(np.int64),
        row_rank=row_rank.astype(np.int64),
        version_names=names,
        version_promoted=promoted,
    )


def correlation_id(k: int) -> str:
    return f"{CLUSTER}-{k:08d}-{(k * 2654435761) % 2**32:08x}"


def job_id(j: int) -> str:
    return str(4_000_000 + j)


def _latencies(rng: np.random.Generator, n: int) -> list[tuple[str, float]]:
    """Stage latencies (ms) of ``n`` snapshots, and their sums, as the JSON text the recorder writes."""
    base = np.array([0.8, 6.0, 0.6, 2.5, 0.7, 14.0])
    values = base * rng.lognormal(0.0, 0.5, (n, len(STAGES)))
    out = []
    for row in values:
        text = json.dumps({s: round(float(v), 3) for s, v in zip(STAGES, row, strict=True)})
        out.append((text, float(np.sum(np.round(row, 3)))))
    return out


_FEATURES = "{" + ", ".join(f'"{name}": %.6g' for name in JOB_FEATURES) + "}"
_RAW = '{"pool_gpus": %d, "pool_free_gpus": %d, "pool_nodes": %d, "pool_idle_nodes": %d}'
#: waiting jobs ranked first that hold an EASY reservation (the rest of a queue waits without one)
RESERVED_RANKS = 3


def _node(j: int) -> tuple[str, str]:
    """The node group (and GPU type) and the node job ``j`` is placed on."""
    group = "a100" if j % 3 else "v100"
    return group, f"{group}-{j % (48 if group == 'a100' else 32):03d}"


def _pool(j: int) -> tuple[int, int]:
    """GPUs and nodes of job ``j``'s pool (the node group it is placed on)."""
    return (384, 48) if j % 3 else (128, 32)


def decision_records(plan: Plan) -> Iterator[list[tuple[Any, ...]]]:
    """The ``decisions`` rows (columns ``DECISION_COLUMNS``), in chunks of whole snapshots."""
    rng = np.random.default_rng(plan.shape.seed + 1)
    latencies = _latencies(rng, plan.snapshots)
    placed_all = plan.job_start[plan.row_job] == plan.row_snap
    queue_len = np.bincount(plan.row_snap, minlength=plan.snapshots)
    start = 0
    while start < plan.rows:
        stop = min(plan.rows, start + CHUNK_ROWS)
        stop = int(np.searchsorted(plan.row_snap, plan.row_snap[stop - 1], side="right"))
        snaps, jobs, ranks = plan.row_snap[start:stop], plan.row_job[start:stop], plan.row_rank[start:stop]
        features = rng.random((len(snaps), len(JOB_FEATURES)))
        scores = rng.normal(0.0, 2.0, len(snaps))
        free = rng.random(len(snaps))
        out = []
        for i in range(len(snaps)):
            k, j, rank = int(snaps[i]), int(jobs[i]), int(ranks[i])
            placed = bool(placed_all[start + i])
            version, fb = int(plan.snap_version[k]), int(plan.snap_fallback[k])
            model = version >= 0 and fb == -1
            fallback = None if fb == -1 else (NO_MODEL if fb == -2 else FALLBACKS[fb])
            lat_text, lat_total = latencies[k]
            time_k = float(plan.snap_time[k])
            reserved = not placed and rank < RESERVED_RANKS
            pool_gpus, pool_nodes = _pool(j)
            idle = int(free[i] * pool_nodes * 0.2)
            out.append(
                (
                    correlation_id(k),
                    CLUSTER,
                    job_id(j),
                    time_k,
                    int(time_k * 1000),
                    rank,
                    1.0 - rank / int(queue_len[k]),
                    f'["{_node(j)[1]}"]' if placed else "[]",
                    placed,
                    "pack" if placed else None,
                    "model" if model else BASE_POLICY,
                    plan.version_names[version] if model else None,
                    fallback,
                    _FEATURES % tuple(features[i]),
                    lat_text,
                    lat_total,
                    float(scores[i]) if model else None,
                    "placed" if placed else ("reserved" if reserved else "waiting"),
                    time_k + 600.0 * (rank + 1) if reserved else None,
                    "best-fit",
                    None,
                    _RAW % (pool_gpus, int(free[i] * pool_gpus * 0.2), pool_nodes, idle),
                )
            )
        yield out
        start = stop


DECISION_COLUMNS = (
    "correlation_id",
    "cluster",
    "job_id",
    "snapshot_time",
    "sequence",
    "rank",
    "priority",
    "nodes",
    "placed",
    "mode",
    "policy",
    "model_version",
    "fallback",
    "features",
    "latencies_ms",
    "latency_ms",
    "score",
    "placer_status",
    "reserved_s",
    "placer",
    "solver_status",
    "raw_features",
)
JOB_COLUMNS = (
    "cluster",
    "job_id",
    "submit_s",
    "gpus",
    "gpu_milli",
    "cpus_milli",
    "mem_mib",
    "est_runtime_s",
    "user_name",
    "partition",
    "qos",
    "gpu_types",
)
OUTCOME_COLUMNS = (
    "cluster",
    "job_id",
    "correlation_id",
    "submit_s",
    "start_s",
    "end_s",
    "wait_s",
    "jct_s",
    "bsld",
    "gpus",
    "status",
    "nodes",
    "node_gpus",
    "gpu_type",
)
SHADOW_COLUMNS = (
    "cluster",
    "correlation_id",
    "job_id",
    "model_version",
    "snapshot_time",
    "sequence",
    "rank",
    "priority",
    "applied_policy",
    "applied_model_version",
)


def job_records(plan: Plan) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(plan.shape.seed + 2)
    users = rng.integers(0, 120, len(plan.job_submit))
    estimate = plan.job_runtime * rng.uniform(1.0, 4.0, len(plan.job_submit))
    return [
        (
            CLUSTER,
            job_id(j),
            float(plan.job_submit[j]),
            int(plan.job_gpus[j]),
            1000,
            int(plan.job_gpus[j]) * 8000,
            int(plan.job_gpus[j]) * 65536,
            float(estimate[j]),
            f"user{users[j]:03d}",
            "gpu",
            "normal",
            "[]",
        )
        for j in range(len(plan.job_submit))
    ]


def outcome_records(plan: Plan) -> list[tuple[Any, ...]]:
    """Jobs started by a stored decision and finished by the last snapshot."""
    rng = np.random.default_rng(plan.shape.seed + 3)
    started = np.flatnonzero(plan.job_start < plan.snapshots)
    start_s = plan.snap_time[plan.job_start[started]] + rng.uniform(0.05, 2.0, len(started))
    end_s = start_s + plan.job_runtime[started]
    done = end_s <= plan.end_s
    external = rng.random(len(started)) < plan.shape.unattributed_share
    status = rng.choice(len(STATUSES), len(started), p=STATUS_WEIGHTS)
    out = []
    for i in np.flatnonzero(done):
        j = int(started[i])
        submit, start, end = float(plan.job_submit[j]), float(start_s[i]), float(end_s[i])
        corr = f"external-{j}" if external[i] else correlation_id(int(plan.job_start[j]))
        jct = end - submit
        group, node = _node(j)
        out.append(
            (
                CLUSTER,
                job_id(j),
                corr,
                submit,
                start,
                end,
                start - submit,
                jct,
                max(1.0, jct / max(end - start, 10.0)),
                int(plan.job_gpus[j]),
                STATUSES[int(status[i])],
                f'["{node}"]',
                f"[{int(plan.job_gpus[j])}]",
                "A100" if group == "a100" else "V100",
            )
        )
    return out


def shadow_records(plan: Plan) -> Iterator[list[tuple[Any, ...]]]:
    """A shadow candidate's ranks of the snapshots it scored: the applied rank, shuffled a little."""
    rng = np.random.default_rng(plan.shape.seed + 4)
    scored = plan.snap_shadow[plan.row_snap] >= 0
    rows = np.flatnonzero(scored)
    for lo in range(0, len(rows), CHUNK_ROWS):
        chunk = rows[lo : lo + CHUNK_ROWS]
        noisy = plan.row_rank[chunk] + rng.normal(0, 4.0, len(chunk))
        # re-rank within each snapshot (rows of a snapshot are contiguous)
        order = np.lexsort((noisy, plan.row_snap[chunk]))
        ranks = np.empty(len(chunk), dtype=np.int64)
        snaps_sorted = plan.row_snap[chunk][order]
        first = np.searchsorted(snaps_sorted, snaps_sorted, side="left")
        ranks[order] = np.arange(len(chunk)) - first
        out = []
        for i, r in enumerate(chunk):
            k = int(plan.row_snap[r])
            version, fb = int(plan.snap_version[k]), int(plan.snap_fallback[k])
            model = version >= 0 and fb == -1
            out.append(
                (
                    CLUSTER,
                    correlation_id(k),
                    job_id(int(plan.row_job[r])),
                    plan.version_names[int(plan.snap_shadow[k])],
                    float(plan.snap_time[k]),
                    int(plan.snap_time[k] * 1000),
                    int(ranks[i]),
                    -float(ranks[i]),
                    "model" if model else BASE_POLICY,
                    plan.version_names[version] if model else None,
                )
            )
        yield out


def model_rows(plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``model_versions`` rows and their ``model_version_events``, as the registry writes them."""
    versions, events = [], []
    span = plan.end_s - T0
    current = max(
        (v for v in range(len(plan.version_names)) if plan.version_promoted[v] >= 0),
        key=lambda v: plan.version_promoted[v],
    )
    for v, name in enumerate(plan.version_names):
        promoted_k = int(plan.version_promoted[v])
        promoted_at, status = None, "candidate"
        if promoted_k >= 0:
            promoted_at = datetime.fromtimestamp(float(plan.snap_time[promoted_k]), UTC)
            status = "current" if v == current else "retired"
            created = promoted_at - timedelta(hours=6)
        else:
            created = datetime.fromtimestamp(T0 + span * (v + 0.5) / len(plan.version_names), UTC)
        versions.append(
            {
                "version": name,
                "cluster": CLUSTER,
                "sha256": f"{v:064x}",
                "uri": f"/models/{name}",
                "card": json.dumps({"features": {"hash": "ab"}, "reward": "bsld", "base_policy": "sjf"}),
                "status": status,
                "created_at": created,
                "promoted_at": promoted_at,
                "promoted_by": "trainer" if promoted_at else None,
                "forced": False if promoted_at else None,
                "reason": None if promoted_at else "improvement +0.4% is below the margin 2%",
            }
        )
        gate_at = created + timedelta(hours=1)
        events.append(_event(name, "registered", None, "candidate", created))
        if promoted_at is None:
            events.append(_event(name, "gate-refused", "candidate", "candidate", gate_at))
            continue
        events.append(_event(name, "gate-passed", "candidate", "candidate", gate_at))
        events.append(_event(name, "promoted", "candidate", "current", promoted_at))
    return versions, events


def _event(version: str, event: str, from_status: str | None, to_status: str, at: datetime) -> dict[str, Any]:
    return {
        "version": version,
        "cluster": CLUSTER,
        "event": event,
        "from_status": from_status,
        "to_status": to_status,
        "actor": "trainer",
        "forced": False,
        "reason": None,
        "at": at,
    }


class _Columns:
    """The columns of a table this store's revision has, and how to cut a full record down to them."""

    def __init__(self, wanted: tuple[str, ...], present: set[str]) -> None:
        self.keep = [i for i, c in enumerate(wanted) if c in present]
        self.names = tuple(wanted[i] for i in self.keep)
        self.whole = len(self.keep) == len(wanted)

    def cut(self, records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return records if self.whole else [tuple(r[i] for i in self.keep) for r in records]


async def _columns(conn: Any, table: str, wanted: tuple[str, ...]) -> _Columns:
    rows = await conn.fetch("SELECT column_name FROM information_schema.columns WHERE table_name = $1", table)
    return _Columns(wanted, {r["column_name"] for r in rows})


async def make_partitions(dsn: str, plan: Plan) -> list[str]:
    """On a partitioned store: the partitions of the plan's whole span (``MaintenanceSettings``' span)
    and the spans ahead of it, as the maintenance step makes them; [] on an unpartitioned one."""
    settings = MaintenanceSettings()
    days = settings.decision_partition_days
    lo, hi = partitions.span_of(float(plan.snap_time[0]), days)
    width = hi - lo
    every: list[tuple[float, float]] = []
    while lo <= plan.end_s:
        every.append((lo, lo + width))
        lo += width
    every += partitions.ahead(plan.end_s, days, settings.decision_partitions_ahead)

    def make(conn: Connection) -> list[str]:
        if not partitions.partitioned(conn):
            return []
        return [p.name for p in partitions.ensure_partitions(conn, every)]

    engine = create_engine(dsn.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(make)
    finally:
        await engine.dispose()


async def fill_derived(dsn: str) -> tuple[int, int] | None:
    """On a store of revision 0008 or later: ``derived.backfill`` (snapshots, outcomes written), and
    from 0009 the outcomes' copies of their jobs' user and partition (``derived.backfill_job_columns``);
    None on an older one."""

    def fill(conn: Connection) -> tuple[int, int] | None:
        if not conn.dialect.has_table(conn, "decision_snapshots"):
            return None
        written = derived.backfill(conn)
        if "user_name" in {c["name"] for c in conn.dialect.get_columns(conn, "outcomes")}:
            derived.backfill_job_columns(conn)
        return written

    engine = create_engine(dsn.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fill)
    finally:
        await engine.dispose()


async def write_store(
    dsn: str, plan: Plan, progress: Callable[[str, int], None] | None = None
) -> dict[str, int]:
    """COPY the plan into the migrated database at ``dsn``; ``progress(what, rows)`` after each chunk."""
    tell = progress or (lambda what, n: None)
    made = await make_partitions(dsn, plan)
    conn = await asyncpg.connect(dsn, timeout=30)
    try:
        await conn.execute(
            "INSERT INTO clusters (name, spec) VALUES ($1, $2::jsonb) ON CONFLICT DO NOTHING",
            CLUSTER,
            json.dumps(SPEC),
        )
        jobs = job_records(plan)
        await conn.copy_records_to_table("jobs", records=jobs, columns=JOB_COLUMNS)
        tell("jobs", len(jobs))
        decisions = 0
        columns = await _columns(conn, "decisions", DECISION_COLUMNS)
        for chunk in decision_records(plan):
            await conn.copy_records_to_table("decisions", records=columns.cut(chunk), columns=columns.names)
            decisions += len(chunk)
            tell("decisions", len(chunk))
        outcomes = outcome_records(plan)
        columns = await _columns(conn, "outcomes", OUTCOME_COLUMNS)
        await conn.copy_records_to_table("outcomes", records=columns.cut(outcomes), columns=columns.names)
        tell("outcomes", len(outcomes))
        shadows = 0
        for chunk in shadow_records(plan):
            await conn.copy_records_to_table("shadow_priorities", records=chunk, columns=SHADOW_COLUMNS)
            shadows += len(chunk)
            tell("shadow rows", len(chunk))
        versions, events = model_rows(plan)
        for row in versions:
            await conn.execute(
                "INSERT INTO model_versions (version, cluster, sha256, uri, card, status, created_at, "
                "promoted_at, promoted_by, forced, reason) "
                "VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11)",
                *row.values(),
            )
        for ev in events:
            await conn.execute(
                "INSERT INTO model_version_events (version, cluster, event, from_status, to_status, actor, "
                "forced, reason, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                *ev.values(),
            )
        filled = await fill_derived(dsn)
        if filled is not None:
            tell("derived", filled[0])
        await conn.execute("VACUUM ANALYZE")
        return {
            "snapshots": plan.snapshots,
            "decision_rows": decisions,
            "jobs": len(jobs),
            "outcomes": len(outcomes),
            "shadow_rows": shadows,
            "model_versions": len(versions),
            "partitions": len(made),
        }
    finally:
        await conn.close()
