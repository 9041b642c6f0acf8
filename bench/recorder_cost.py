"""Recorder CPU per 1,024-row decision: today's write path and this tree's, side by side in one run
(issue 22, item 2).

    .venv/bin/python bench/recorder_cost.py               # SQLite and PostgreSQL, 40 decisions each
    .venv/bin/python bench/recorder_cost.py --index-cost  # and the cost of each index (SQLite)
    .venv/bin/python bench/recorder_cost.py --rounds 2 --databases sqlite   # a quick look

What it feeds: real decisions of the pipeline's stages (featurizer, prioritizer, placer, as
``bench/pipeline_steps.py`` runs them) on snapshots of ``--size`` pending jobs that
``bench/pipeline.py`` builds (the openb pod list on the openb spec, the ``burst`` scenario of
``bench/replica_scaling.py``: hundreds of jobs placed per decision; the embedded workload when the
traces are missing), given a model's scores, version and no fallback (what a decision of the shipped
model carries; without a model the score column would be empty), and the matrices they came from.

What it measures: each write as the recorder makes it, ``async with engine.begin()`` around
``record_decision`` (``record_pending`` for a matrix's jobs), on a fresh store migrated to the tree's
own head: a new decision (1,024 rows), the same decision redelivered (every row turned away by the
key) and a matrix's 1,024 jobs seen for the first time. CPU is the process's (``time.process_time``:
the event loop's thread and the driver's, aiosqlite runs SQLite in a thread of its own) and, apart,
the event loop thread's; on PostgreSQL the server backend's CPU (``/proc``, 10 ms ticks, summed over
the writes of a kind and divided by their number) is shown beside it: not the recorder's CPU, but the
same machine's. ``--index-cost`` adds this tree's decision write on SQLite stores with one secondary
index of ``decisions`` dropped at a time (what each index costs where SQLite's work is the
recorder's). Each
implementation runs in a process of its own with the services' GC settings. Today's code is the tree
at ``--before`` (by default the last commit before the cheaper write path), unpacked with ``git
archive`` into a temporary folder (the checkout is not touched); the new code is this tree. Rounds
alternate which one goes first, so load from other work falls on both.

PostgreSQL: ``--pg-admin`` (the machine's server, trust auth), in two throwaway databases created
and dropped here; decisions carry the wall clock's time as their snapshot time, so their rows land in
the time partitions migration 0007 creates ahead of now (the partition is printed). Prints a table
and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: the last commit before the write path moved to ``shared.store.bulk`` ("today's code")
BEFORE = "5b0d5d771dcf93e52f6e2ce2fc5c9cf7946f1936"
KINDS = ("decision", "redelivered", "jobs")
LABELS = {
    "decision": "new decision",
    "redelivered": "redelivered decision",
    "jobs": "a matrix's new jobs",
}


# -- the messages ------------------------------------------------------------------------------------


def build_messages(args: argparse.Namespace) -> tuple[list[tuple[bytes, bytes]], str]:
    """``--distinct`` (matrix, decision) pairs, encoded as the bus carries them, and the source's name."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from pipeline import busy_snapshot_source, snapshot_of

    from services.featurizer.stage import FeaturizerStage
    from services.placer.stage import PlacerStage
    from services.prioritizer.stage import PrioritizerStage
    from shared.schemas.codec import encode
    from shared.schemas.limits import Limits
    from shared.service.clusters import load_specs

    src = busy_snapshot_source(args.trace, args.cluster, "burst")
    spec_name = args.cluster if src[4] == args.trace else "embedded"
    specs = load_specs({"k0": spec_name})
    limits = Limits(max_message_bytes=8 << 20)
    featurizer = FeaturizerStage(specs)
    prioritizer = PrioritizerStage(specs=specs, limits=limits)
    placer = PlacerStage(specs, placement="best-fit")
    out: list[tuple[bytes, bytes]] = []

    async def run() -> None:
        for i in range(args.distinct):
            snap = snapshot_of(src, args.size, "k0", 1000 + i, offset=i * 13)
            matrix = featurizer.handle(snap, 1)
            vector = await prioritizer.handle(matrix)
            decision = placer.handle(vector, snap, None, placer.prepare(snap))
            cols = decision.placements
            scored = cols.model_copy(update={"score": tuple(p / len(cols) for p in cols.priority)})
            decision = decision.model_copy(
                update={"placements": scored, "model_version": "bench-model", "fallback": None}
            )
            out.append((encode(matrix, limits), encode(decision, limits)))

    asyncio.run(run())
    return out, f"{src[4]} on {spec_name}"


# -- one implementation, in a process of its own ------------------------------------------------------


def backend_ticks(pid: int | None) -> int:
    """CPU clock ticks (user + system) of a PostgreSQL backend on this machine; 0 when unknown."""
    if pid is None:
        return 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


async def serve(url: str, messages: list[tuple[bytes, bytes]]) -> None:
    """Answer one JSON line of timings per command read from stdin (``{"decisions": n, ...}``)."""
    from shared.schemas import FeatureMatrix, PlacementDecision
    from shared.schemas.codec import decode
    from shared.schemas.limits import Limits
    from shared.store import create_engine, record_decision, record_pending, upgrade

    limits = Limits(max_message_bytes=8 << 20)
    decisions = [decode(PlacementDecision, d, limits) for _, d in messages]
    matrices = [decode(FeatureMatrix, m, limits) for m, _ in messages]
    engine = create_engine(url)
    await upgrade(engine)
    postgres = engine.dialect.name == "postgresql"
    dropped = [name for name in os.environ.get("HYLO_BENCH_DROP_INDEXES", "").split(",") if name]
    async with engine.begin() as conn:  # --index-cost: the store without these indexes
        for name in dropped:
            await conn.exec_driver_sql(f"DROP INDEX {name}")

    async def backend() -> int | None:
        if not postgres:
            return None
        async with engine.connect() as conn:
            return int((await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one())

    count = [0]

    def fresh() -> PlacementDecision:
        count[0] += 1
        d = decisions[count[0] % len(decisions)]
        return d.model_copy(
            update={"correlation_id": uuid.uuid4().hex, "sequence": count[0], "snapshot_time": time.time()}
        )

    async def timed(write: Any, *args: Any) -> tuple[int, list[float]]:
        p0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
        async with engine.begin() as conn:
            rows = int(await write(conn, *args))
        p1, t1, w1 = time.process_time(), time.thread_time(), time.perf_counter()
        return rows, [(p1 - p0) * 1e3, (t1 - t0) * 1e3, (w1 - w0) * 1e3]

    async def one(kind: str) -> list[float]:
        if kind == "decision":
            d = fresh()
            last[0] = d
            rows, times = await timed(record_decision, d)
            expect = len(d.placements)
        elif kind == "redelivered":
            rows, times = await timed(record_decision, last[0])
            expect = 0
        else:
            m = matrices[count[0] % len(matrices)]
            tag = uuid.uuid4().hex[:8]
            jobs = m.jobs.model_copy(update={"job_id": tuple(f"{tag}-{j}" for j in m.jobs.job_id)})
            rows, times = await timed(record_pending, m.cluster, jobs)
            expect = len(jobs.job_id)
        if rows != expect:
            raise RuntimeError(f"{kind}: {rows} rows inserted, expected {expect}")
        return times

    last = [fresh()]
    for _ in range(3):  # warm-up: prepared statements, caches, the first partition's pages
        await one("decision")
    pid = await backend()
    print(json.dumps({"ready": True, "backend": pid}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        out: dict[str, Any] = {k: [] for k in KINDS}
        for kind in KINDS:
            ticks = backend_ticks(pid)
            for _ in range(int(command.get(kind, 0))):
                out[kind].append(await one(kind))
            out[f"{kind}_server_ticks"] = backend_ticks(pid) - ticks
        out["same_backend"] = (await backend()) == pid
        print(json.dumps(out), flush=True)
    if postgres:
        async with engine.connect() as conn:
            where = await conn.exec_driver_sql(
                f"SELECT DISTINCT tableoid::regclass::text FROM decisions WHERE sequence = {count[0]}"
            )
            print(json.dumps({"partition": where.scalar_one()}), flush=True)
    await engine.dispose()


def worker(tree: str, url: str, messages_path: str) -> None:
    """The process of one implementation: ``tree``'s ``shared`` first on the path, the services' GC."""
    sys.path.insert(0, tree)
    import gc

    import shared

    if not Path(shared.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"shared imported from {shared.__file__}, not from {tree}")
    messages = pickle.loads(Path(messages_path).read_bytes())
    gc.collect()
    gc.freeze()  # as shared.service.runtime does for every service
    gc.set_threshold(100_000, 50, 100)
    asyncio.run(serve(url, messages))


# -- the run -----------------------------------------------------------------------------------------


class Worker:
    """A running implementation: send a command, read its timings."""

    def __init__(self, name: str, tree: Path, url: str, messages: Path, drop: tuple[str, ...] = ()) -> None:
        self.name = name
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), url, str(messages)]
        env = {**os.environ, "HYLO_BENCH_DROP_INDEXES": ",".join(drop)}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker ended (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> dict[str, Any]:
        last: dict[str, Any] = {}
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError, json.JSONDecodeError):
                last = self.ask({"quit": True})
            self.proc.wait(timeout=60)
        return last


def unpack(rev: str, into: Path) -> Path:
    """``shared/`` of commit ``rev``, written under ``into`` (``git archive``: reads the repository only)."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "shared"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


async def _admin(dsn: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def database_urls(kind: str, folder: Path, admin: str, made: list[str]) -> dict[str, str]:
    """A fresh store per implementation (a SQLite file, or a PostgreSQL database created here)."""
    if kind == "sqlite":
        return {name: f"sqlite+aiosqlite:///{folder / f'{name}.db'}" for name in ("today", "new")}
    base = admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    urls = {}
    for name in ("today", "new"):
        db = f"hylo_recorder_cost_{name}_{uuid.uuid4().hex[:8]}"
        asyncio.run(_admin(admin, f'CREATE DATABASE "{db}"'))
        made.append(db)
        urls[name] = f"{base}/{db}"
    return urls


def measure(args: argparse.Namespace, folder: Path, messages: Path, trees: dict[str, Path]) -> dict[str, Any]:
    """Every round, for each database: each implementation in turn (which goes first alternates)."""
    made: list[str] = []
    workers: dict[tuple[str, str], Worker] = {}
    results: dict[str, Any] = {}
    try:
        for kind in args.databases:
            urls = database_urls(kind, folder, args.pg_admin, made)
            for name in ("today", "new"):
                workers[(kind, name)] = Worker(f"{kind}/{name}", trees[name], urls[name], messages)
            results[kind] = {
                name: {**{k: [] for k in KINDS}, **{f"{k}_server_ticks": 0 for k in KINDS}}
                for name in ("today", "new")
            }
        command = {"decision": args.per_round, "redelivered": args.redelivered, "jobs": args.jobs}
        for r in range(args.rounds):
            order = ("today", "new") if r % 2 == 0 else ("new", "today")
            for kind in args.databases:
                for name in order:
                    got = workers[(kind, name)].ask(command)
                    if not got.get("same_backend", True):
                        raise RuntimeError(f"{kind}/{name}: the pool changed its connection mid-round")
                    for k in KINDS:
                        results[kind][name][k] += got[k]
                        results[kind][name][f"{k}_server_ticks"] += got[f"{k}_server_ticks"]
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        for (kind, name), w in workers.items():
            results[kind][name]["partition"] = w.close().get("partition")
    finally:
        for w in workers.values():
            if w.proc.poll() is None:
                w.proc.kill()
        for db in made:
            asyncio.run(_admin(args.pg_admin, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    return results


def index_cost(args: argparse.Namespace, folder: Path, messages: Path) -> list[dict[str, Any]]:
    """This tree's decision write on SQLite with each secondary index of ``decisions`` dropped (and with
    none left): what each index costs the recorder's process, where SQLite's work is the recorder's."""
    sys.path.insert(0, str(ROOT))
    from shared.store.models import Decision, table_of

    indexes = sorted(str(ix.name) for ix in table_of(Decision).indexes)
    variants = {
        "every index": (),
        **{f"without {ix}": (ix,) for ix in indexes},
        "no secondary index": tuple(indexes),
    }
    workers = {
        label: Worker(label, ROOT, f"sqlite+aiosqlite:///{folder / f'ix{k}.db'}", messages, drop)
        for k, (label, drop) in enumerate(variants.items())
    }
    samples: dict[str, list[float]] = {label: [] for label in variants}
    try:
        for r in range(args.index_rounds):
            labels = list(variants) if r % 2 == 0 else list(reversed(variants))
            for label in labels:
                got = workers[label].ask({"decision": args.per_round})["decision"]
                samples[label] += [cpu for cpu, _thread, _wall in got]
    finally:
        for w in workers.values():
            w.close()
    base = statistics.median(samples["every index"])
    return [
        {
            "variant": label,
            "cpu_ms": statistics.median(got),
            "vs_every_index_ms": statistics.median(got) - base,
        }
        for label, got in samples.items()
    ]


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per database and write: median CPU (process, event loop thread), wall, server, today vs new."""
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    rows = []
    for kind, by_impl in results.items():
        for k in KINDS:
            row: dict[str, Any] = {"database": kind, "write": k}
            for name, got in by_impl.items():
                samples = got[k]
                if not samples:
                    continue
                process = [s[0] for s in samples]
                row[name] = {
                    "samples": len(samples),
                    "cpu_ms": statistics.median(process),
                    "cpu_ms_p10": statistics.quantiles(process, n=10)[0] if len(process) > 1 else process[0],
                    "cpu_ms_p90": statistics.quantiles(process, n=10)[-1] if len(process) > 1 else process[0],
                    "cpu_ms_mean": statistics.fmean(process),
                    "loop_thread_ms": statistics.median(s[1] for s in samples),
                    "wall_ms": statistics.median(s[2] for s in samples),
                }
                if kind == "postgresql":  # the backend's CPU over all these writes (10 ms ticks), per write
                    row[name]["server_cpu_ms"] = got[f"{k}_server_ticks"] * tick_ms / len(samples)
            if "today" in row and "new" in row:
                row["ratio"] = row["new"]["cpu_ms"] / row["today"]["cpu_ms"]
                row["ratio_mean"] = row["new"]["cpu_ms_mean"] / row["today"]["cpu_ms_mean"]
            rows.append(row)
    return rows


def show(rows: list[dict[str, Any]], source: str, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"recorder CPU per write (median over {args.rounds * args.per_round} decisions), "
        f"{args.size:,} pending, {source}; today = {args.before[:10]}"
    )
    for col in (
        "database",
        "write",
        "today CPU ms",
        "new CPU ms",
        "new / today",
        "today loop thread",
        "new loop thread",
        "today wall",
        "new wall",
        "server today / new",
    ):
        table.add_column(col, justify="left" if col in ("database", "write") else "right")
    for row in rows:
        t, n = row.get("today", {}), row.get("new", {})

        def ms(d: dict[str, Any], key: str) -> str:
            return f"{d[key]:.1f}" if key in d else "-"

        def spread(d: dict[str, Any]) -> str:
            return f"{d['cpu_ms']:.1f} [{d['cpu_ms_p10']:.1f}-{d['cpu_ms_p90']:.1f}]" if d else "-"

        table.add_row(
            row["database"],
            LABELS[row["write"]],
            spread(t),
            spread(n),
            f"{row['ratio']:.2f}" if "ratio" in row else "-",
            ms(t, "loop_thread_ms"),
            ms(n, "loop_thread_ms"),
            ms(t, "wall_ms"),
            ms(n, "wall_ms"),
            f"{ms(t, 'server_cpu_ms')} / {ms(n, 'server_cpu_ms')}" if "server_cpu_ms" in t else "",
        )
    Console(width=180).print(table)
    print(
        "CPU: the recorder's process (event loop and driver threads), median [p10-p90]; loop thread: the "
        "event loop's thread alone; server: the PostgreSQL backend's CPU per write (mean, 10 ms ticks)"
    )


def show_indexes(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"new decision write on SQLite, by index of decisions (median over "
        f"{args.index_rounds * args.per_round} decisions)"
    )
    for col in ("store", "CPU ms", "vs every index"):
        table.add_column(col, justify="left" if col == "store" else "right")
    for row in rows:
        table.add_row(row["variant"], f"{row['cpu_ms']:.1f}", f"{row['vs_every_index_ms']:+.1f}")
    Console(width=180).print(table)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default="openb-gpuspec33")
    p.add_argument("--cluster", default="alibaba-openb")
    p.add_argument("--size", type=int, default=1024, help="pending jobs per snapshot (rows per decision)")
    p.add_argument("--distinct", type=int, default=8, help="distinct decisions built and cycled through")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--per-round", type=int, default=5, help="new decisions per implementation per round")
    p.add_argument("--redelivered", type=int, default=2, help="redelivered decisions per round")
    p.add_argument("--jobs", type=int, default=2, help="matrices of new jobs per round")
    p.add_argument("--databases", default="sqlite,postgresql", type=lambda s: s.split(","))
    p.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--before", default=BEFORE, help="the commit whose code is today's")
    p.add_argument(
        "--index-cost",
        action="store_true",
        help="also: this tree's SQLite decision write with each secondary index of decisions dropped",
    )
    p.add_argument("--index-rounds", type=int, default=4)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "recorder_cost.json")
    args = p.parse_args()
    bad = set(args.databases) - {"sqlite", "postgresql"}
    if bad:
        raise SystemExit(f"unknown databases: {', '.join(sorted(bad))}")
    folder = Path(tempfile.mkdtemp(prefix="hylo-recorder-cost-"))
    try:
        pairs, source = build_messages(args)
        messages = folder / "messages.pkl"
        messages.write_bytes(pickle.dumps(pairs))
        trees = {"today": unpack(args.before, folder / "today"), "new": ROOT}
        results = measure(args, folder, messages, trees)
        indexes = index_cost(args, folder, messages) if args.index_cost else []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = summarize(results)
    show(rows, source, args)
    if indexes:
        show_indexes(indexes, args)
    partitions = {kind: {n: r[n].get("partition") for n in r} for kind, r in results.items()}
    if "postgresql" in partitions:
        print(f"PostgreSQL partitions the last decisions landed in: {partitions['postgresql']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(sys.argv),
        "source": source,
        "before": args.before,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "summary": rows,
        "index_cost": indexes,
        "samples": results,
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
    }
    args.out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
