"""The store at months of data: the analyst recipes and the report on a 10M-decision-row PostgreSQL store.

    .venv/bin/python bench/store_scale.py --keep /tmp/store-scale   # 10,000,000 rows, built once, reused
    .venv/bin/python bench/store_scale.py --rows 30000 --rounds 3 --report-rounds 1   # a smoke run

What runs: a throwaway PostgreSQL (``bench/support/postgres.py``; never the machine's shared server),
migrated with the store's own migrations (so ``decisions`` is partitioned by snapshot time, migration
0007) and filled by ``bench/support/big_store.py`` (``--rows`` decision rows of a steady queue of
``--queue`` jobs, one snapshot every 30 s: 10M rows are 69 days; the partitions of the whole span are
made before the COPY, as the maintenance step makes them ahead; what the recorder writes beside the
rows, ``decision_snapshots`` and the outcomes' copies of their decisions and of their jobs' user and
partition, computed from the rows as migrations 0008 and 0009 do). ``--keep`` keeps the store (and its
build time) for the next run; a kept store of an older revision is migrated first, and the time that
took is reported (``store.upgrade_s``). Then, one after the other:

1. ``recipes``: every recipe of ``docs/analysts.md`` ("## Recipes"), as an analyst runs it (SQLAlchemy
   ``text``, all rows fetched), ``--rounds`` times each after one unmeasured run (the first, cold one
   is reported apart); "Why did job X wait?" asks about a different finished job each round. Each
   recipe's plan (``EXPLAIN (ANALYZE, BUFFERS)``) is kept: which indexes it read, how many partitions
   of ``decisions`` it opened;
2. ``report``: ``GET /v1/report`` from the query API as it ships (``bench/report_scale.py``'s
   machinery: its own process, report time limit raised to ``--timeout-s``), for the whole range and
   for the last 7 days (about 1M decision rows: the size issue 20's target was set on), from 1 and
   from ``--clients`` clients at once;
3. ``maintenance``: ``shared.store.maintain`` with nothing to do, and with a retention that drops the
   oldest partition (rolled up first), in a transaction rolled back afterwards: the store is unchanged.

``--migration-rows N`` also builds a second store of N rows at revision 0006 (unpartitioned) and times
migration 0007 on it. Prints tables and writes ``--out`` (JSON). Targets (issue 22, item 4): each
recipe p99 <= 2 s; the report p99 <= 2 s with 4 clients (issue 20's bound).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.engine import Connection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report_scale import QueryApi, _fill, _last_time, fire, memory_mib, summary  # noqa: E402
from bench.support.big_store import CLUSTER, Shape, plan_store, write_store  # noqa: E402
from bench.support.postgres import PostgresUnavailable, ThrowawayPostgres  # noqa: E402
from shared.store import create_engine, upgrade  # noqa: E402
from shared.store import partitions as parts  # noqa: E402
from shared.store.maintain import maintain_sync  # noqa: E402
from shared.store.settings import MaintenanceSettings  # noqa: E402

WEEK_S = 7 * 86_400.0


def recipes() -> dict[str, str]:
    """Heading -> SQL of every recipe of ``docs/analysts.md`` (the same reading as its test)."""
    page = (ROOT / "docs" / "analysts.md").read_text(encoding="utf-8")
    section = page.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for part in section.split("\n### ")[1:]:
        heading, body = part.split("\n", 1)
        out[heading.strip()] = re.findall(r"```sql\n(.*?)```", body, re.S)[0]
    return out


def _stats(seconds: list[float]) -> dict[str, Any]:
    lat = np.array(seconds)
    return {
        "runs": len(seconds),
        "p50_s": float(np.percentile(lat, 50)),
        "p99_s": float(np.percentile(lat, 99)),
        "max_s": float(lat.max()),
        "latencies_s": [round(s, 4) for s in seconds],
    }


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _plan_nodes(child)
    return out


def _index_of(node: dict[str, Any]) -> str:
    """`` using INDEX`` of a scan node; a partition's index named by its columns' part (the partition's
    own prefix left out), so that the scans of every partition read as one line."""
    name = node.get("Index Name")
    if name is None:
        return ""
    if node.get("Relation Name", "").startswith("decisions_"):
        name = "<partition>_" + name.split("_", 3)[-1]
    return f" using {name}"


def _empty(node: dict[str, Any]) -> bool:
    """A sequential scan that found no row at all: an empty partition (the planner scans those rather
    than open an index), left out of the summary."""
    rows = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
    return node["Node Type"] == "Seq Scan" and rows == 0


def plan_summary(plan: dict[str, Any]) -> dict[str, Any]:
    """What a recipe's executed plan read: the scans (node, table, index; the partitions of
    ``decisions`` it opened, i.e. executed at least once, as one), how many partitions holding rows it
    opened out of those planned (empty ones left out), and buffers."""
    nodes = [n for n in _plan_nodes(plan["Plan"]) if "Relation Name" in n and not _empty(n)]
    on_partitions = [n for n in nodes if n["Relation Name"].startswith("decisions_")]
    opened = [n for n in on_partitions if n.get("Actual Loops", 0) > 0]
    scans = {f"{n['Node Type']} {n['Relation Name']}{_index_of(n)}" for n in nodes if n not in on_partitions}
    scans |= {f"{n['Node Type']} decisions partitions{_index_of(n)}" for n in opened}
    return {
        "scans": sorted(scans),
        "sequential": sorted({n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan"}),
        "partitions_opened": len({n["Relation Name"] for n in opened}),
        "partitions_planned": len({n["Relation Name"] for n in on_partitions}),
        "shared_hit_blocks": plan["Plan"].get("Shared Hit Blocks"),
        "shared_read_blocks": plan["Plan"].get("Shared Read Blocks"),
        "execution_ms": plan.get("Execution Time"),
    }


async def _jobs_to_ask(conn: Any, count: int, seed: int) -> list[str]:
    done = (
        await conn.execute(text("SELECT job_id FROM outcomes WHERE cluster = :c"), {"c": CLUSTER})
    ).scalars()
    jobs = sorted(done)
    return random.Random(seed).sample(jobs, min(count, len(jobs)))


def _params(sql: str, asked: list[str], i: int, period: tuple[float, float]) -> dict[str, Any]:
    """A recipe's parameters: the store's cluster, the period, and for a question about one job the
    ``i``-th job asked about."""
    values = {"cluster": CLUSTER, "since": period[0], "until": period[1], "job_id": asked[i % len(asked)]}
    return {k: v for k, v in values.items() if f":{k}" in sql}


async def _one_recipe(
    conn: Any, sql: str, asked: list[str], rounds: int, period: tuple[float, float]
) -> dict[str, Any]:
    """One cold run, ``rounds`` measured runs, and the executed plan of one recipe over ``period``."""
    seconds, rows = [], 0
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        rows = len((await conn.execute(text(sql), _params(sql, asked, i, period))).all())
        seconds.append(time.perf_counter() - t0)
    explain = text(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")
    explained = (await conn.execute(explain, _params(sql, asked, rounds + 1, period))).scalar_one()
    plan = explained if isinstance(explained, list) else json.loads(explained)
    return {"period": list(period), "rows": rows, "cold_s": round(seconds[0], 4), **_stats(seconds[1:]),
            "plan": plan_summary(plan[0])}  # fmt: skip


async def run_recipes(url: str, args: argparse.Namespace, end_s: float, console: Console) -> dict[str, Any]:
    """Each recipe over the last 7 days (``args.rounds`` runs: the target) and, when it asks about a
    period, over the whole store (``args.rounds_whole`` runs)."""
    engine = create_engine(url)
    periods = {"last 7 days": (end_s - WEEK_S, end_s + 1.0), "whole store": (0.0, 1e12)}
    out: dict[str, Any] = {}
    try:
        async with engine.connect() as conn:
            asked = await _jobs_to_ask(conn, args.rounds + 2, args.seed)
            for heading, sql in recipes().items():
                for name, period in periods.items():
                    if name != "last 7 days" and ":since" not in sql:
                        continue
                    rounds = args.rounds if name == "last 7 days" else args.rounds_whole
                    result = await _one_recipe(conn, sql, asked, rounds, period)
                    out.setdefault(heading, {})[name] = result
                    console.print(f"recipe {heading!r}, {name}: p99 {result['p99_s']:.3f} s", highlight=False)
    finally:
        await engine.dispose()
    return out


def run_report(
    pg: ThrowawayPostgres, args: argparse.Namespace, end_s: float, console: Console
) -> dict[str, Any]:
    """The report's phases (module docstring) against the query API on the store."""
    env = {
        "HYLO_REPORT_TIMEOUT_S": str(args.timeout_s),
        "HYLO_REPORT_MAX_CONCURRENT": str(max(4, args.clients)),
    }
    api = QueryApi(pg.url, env, pg.root / "query-api.log")
    week = f"/v1/report?since={end_s - WEEK_S + 1:.3f}"
    phases: dict[str, tuple[int, int, str]] = {
        "whole range, cold": (1, 1, "/v1/report"),
        "whole range, 1 client": (1, args.report_rounds, "/v1/report"),
        f"whole range, {args.clients} clients": (args.clients, args.report_rounds, "/v1/report"),
        "last 7 days, 1 client": (1, args.rounds_week, week),
        f"last 7 days, {args.clients} clients": (args.clients, args.rounds_week, week),
    }
    out: dict[str, Any] = {}
    try:
        api.wait_ready()
        out["idle"] = memory_mib(api.proc.pid)
        for name, (clients, rounds, path) in phases.items():
            t0 = time.perf_counter()
            requests = fire(api.port, clients, rounds, {}, args.timeout_s, path_of=lambda c, i, p=path: p)
            out[name] = {
                "path": path,
                "clients": clients,
                "rounds": rounds,
                "wall_s": round(time.perf_counter() - t0, 2),
                **summary(requests),
                **memory_mib(api.proc.pid),
                "latencies_s": [round(r.seconds, 4) for r in requests],
            }
            console.print(f"report {name}: p99 {out[name]['p99_s']:.2f} s", highlight=False)
    finally:
        api.stop()
    return out


def _maintenance(conn: Connection, retention_days: float | None) -> dict[str, Any]:
    """One maintenance run, timed, inside the caller's transaction (rolled back by the caller)."""
    settings = MaintenanceSettings(decision_retention_days=retention_days)
    t0 = time.perf_counter()
    report = maintain_sync(conn, settings)
    return {
        "retention_days": retention_days,
        "seconds": round(time.perf_counter() - t0, 3),
        "dropped": report.dropped,
        "created": report.created,
        "rolled_up_rows": report.rolled_up_rows,
        "deleted_rows": report.deleted_rows,
        "snapshots_deleted": report.snapshots_deleted,
    }


async def run_maintenance(url: str) -> dict[str, Any]:
    """Maintenance with nothing to do, then with a retention that drops the oldest partition; each in a
    transaction rolled back, so the kept store stays as it was."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            span = (
                await conn.execute(text("SELECT MIN(snapshot_time), MAX(snapshot_time) FROM decisions"))
            ).one()
            oldest = await conn.run_sync(lambda c: next(p for p in parts.partitions(c) if not p.is_default))
            await conn.rollback()
            assert oldest.hi is not None
            # whole days from the oldest partition's end to the newest decision: the cut (the start of
            # the day that many days before the newest) falls at or after that end
            keep_days = math.floor((float(span[1]) - oldest.hi) / 86_400.0)
            out: dict[str, Any] = {}
            runs: list[tuple[str, float | None]] = [("nothing to do", None)]
            if keep_days > 0:  # else the data ends in the oldest partition: nothing to drop
                runs.append(("drop the oldest partition", keep_days))
            for name, days in runs:
                transaction = await conn.begin()
                try:
                    out[name] = await conn.run_sync(_maintenance, days)
                finally:
                    await transaction.rollback()
            return out
    finally:
        await engine.dispose()


async def _last_decision(url: str) -> float:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return float((await conn.execute(text("SELECT MAX(snapshot_time) FROM decisions"))).scalar_one())
    finally:
        await engine.dispose()


async def _store_facts(url: str) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(parts.partitions)
            sizes = (
                await conn.execute(
                    text(
                        "SELECT SUM(pg_relation_size(c.oid)), SUM(pg_indexes_size(c.oid)) FROM pg_inherits i "
                        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'decisions'::regclass"
                    )
                )
            ).one()
            derived = (
                await conn.execute(
                    text(
                        "SELECT (SELECT COUNT(*) FROM decision_snapshots), "
                        "(SELECT COUNT(*) FROM outcomes WHERE decision_policy IS NOT NULL), "
                        "(SELECT COUNT(*) FROM outcomes WHERE user_name IS NOT NULL)"
                    )
                )
            ).one()
            return {
                # what the recorder keeps beside the rows (migrations 0008, 0009): one summary per
                # snapshot, the outcomes that carry the decision that started them, and those that carry
                # their job's user and partition
                "snapshot_summaries": int(derived[0]),
                "outcomes_with_decision": int(derived[1]),
                "outcomes_with_user": int(derived[2]),
                "partitions": len(found),
                "partition_days": MaintenanceSettings().decision_partition_days,
                "decisions_heap_mib": round(int(sizes[0]) / 2**20),
                "decisions_indexes_mib": round(int(sizes[1]) / 2**20),
            }
    finally:
        await engine.dispose()


def time_migration(rows: int, seed: int, console: Console) -> dict[str, Any]:
    """A store of ``rows`` decision rows at revision 0006 (unpartitioned), then migration 0007 timed."""
    try:
        pg = ThrowawayPostgres(prefix="store-scale-migration-")
    except PostgresUnavailable as err:
        raise SystemExit(f"cannot start a throwaway PostgreSQL: {err}") from None

    async def go() -> dict[str, Any]:
        engine = create_engine(pg.url)
        try:
            await upgrade(engine, "0006")
            plan = plan_store(Shape(rows=rows, seed=seed))
            store = await write_store(pg.dsn, plan)
            t0 = time.perf_counter()
            await upgrade(engine)
            return {
                "decision_rows": store["decision_rows"],
                "migration_s": round(time.perf_counter() - t0, 1),
            }
        finally:
            await engine.dispose()

    try:
        pg.start()
        result = asyncio.run(go())
    finally:
        pg.cleanup()
    console.print(
        f"migration 0007 on {result['decision_rows']:,} rows: {result['migration_s']} s", highlight=False
    )
    return result


def _tables(doc: dict[str, Any]) -> list[Table]:
    recipes_table = Table(
        title=f"analyst recipes, {doc['store']['decision_rows']:,} decision rows (PostgreSQL)"
    )
    for column in ("recipe", "period", "rows", "cold s", "p50 s", "p99 s", "partitions opened", "reads"):
        recipes_table.add_column(
            column, justify="left" if column in ("recipe", "period", "reads") else "right"
        )
    for heading, by_period in doc["recipes"].items():
        for name, r in by_period.items():
            plan = r["plan"]
            recipes_table.add_row(
                heading,
                name,
                str(r["rows"]),
                f"{r['cold_s']:.3f}",
                f"{r['p50_s']:.3f}",
                f"{r['p99_s']:.3f}",
                f"{plan['partitions_opened']}/{plan['partitions_planned']}",
                "\n".join(plan["scans"]),
            )
    report_table = Table(title="GET /v1/report")
    for column in ("phase", "requests", "errors", "p50 s", "p99 s", "max s", "peak RSS MiB"):
        report_table.add_column(column, justify="right")
    for name, r in doc.get("report", {}).items():
        if name != "idle":
            report_table.add_row(
                name,
                str(r["requests"]),
                str(r["errors"]),
                *(f"{r[k]:.2f}" if r[k] is not None else "n/a" for k in ("p50_s", "p99_s", "max_s")),
                f"{r['peak_mib']:.0f}",
            )
    return [recipes_table, report_table]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="decision rows in the store (at least)")
    parser.add_argument("--queue", type=int, default=50, help="mean pending jobs per snapshot")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=20, help="measured runs of each recipe (last 7 days)")
    parser.add_argument("--rounds-whole", type=int, default=3, help="measured runs over the whole store")
    parser.add_argument("--report-rounds", type=int, default=3, help="whole-range reports per client")
    parser.add_argument("--rounds-week", type=int, default=5, help="last-7-days reports per client")
    parser.add_argument("--clients", type=int, default=4, help="concurrent report clients")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="a report request's time limit")
    parser.add_argument("--keep", type=Path, default=None, help="keep the store in this folder (reused)")
    parser.add_argument("--no-report", action="store_true", help="leave out the report phases")
    parser.add_argument(
        "--migration-rows", type=int, default=0, help="also time migration 0007 on this many rows"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "store-scale.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _arguments(argv)
    console = Console(width=170)
    shape = Shape(rows=args.rows, queue=args.queue, seed=args.seed)
    try:
        pg = ThrowawayPostgres(args.keep, prefix="store-scale-pg-")
    except PostgresUnavailable as err:
        raise SystemExit(f"cannot start a throwaway PostgreSQL: {err}") from None
    doc: dict[str, Any] = {
        "targets": "each analyst recipe p99 <= 2 s; report p99 <= 2 s with 4 clients (issues 22 and 20)",
        "shape": asdict(shape),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": os.getloadavg(),
        },
    }
    try:
        pg.start()
        doc["store"] = _fill(pg, shape, "head", console)
        doc["store"].update(asyncio.run(_store_facts(pg.url)))
        console.print(f"store: {doc['store']}", soft_wrap=True)
        doc["recipes"] = asyncio.run(run_recipes(pg.url, args, asyncio.run(_last_decision(pg.url)), console))
        if not args.no_report:
            doc["report"] = run_report(pg, args, asyncio.run(_last_time(pg.url)), console)
        doc["maintenance"] = asyncio.run(run_maintenance(pg.url))
    finally:
        if args.keep is None:
            pg.cleanup()
        elif pg.running:
            pg.stop()
    if args.migration_rows:
        doc["migration"] = time_migration(args.migration_rows, args.seed, console)
    doc["machine"]["load_after"] = os.getloadavg()
    for table in _tables(doc):
        console.print(table)
    console.print(f"maintenance: {doc['maintenance']}", soft_wrap=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main()
