"""Store maintenance: partitions ahead, raw decision rows rolled up and dropped, old roll-ups deleted.

    python -m shared.store.maintain                     # HYLO_DATABASE_URL, settings from HYLO_*/hylo.toml
    python -m shared.store.maintain --database URL --now 1767225600

Why a maintenance step and not the writer: the recorder's write stays one ``INSERT ... ON CONFLICT DO
NOTHING`` (no catalog reads, no lock on the table's layout); a row no partition covers lands in the
default partition and is moved out by the next run. Run it daily (cron, a Kubernetes CronJob); a run
that has nothing to do changes nothing, and a second run right after the first does nothing.

Creating and dropping partitions locks ``decisions`` until the run commits (seconds: 2-4 s to roll up
and drop a week of a million rows, ``docs/results/store-scale.md``); the recorder's writes and the
readers wait meanwhile, nothing fails. Two runs at once take turns (an advisory lock on PostgreSQL).

What one run does, in one transaction (``MaintenanceSettings``; "now" is the newest ``snapshot_time``
stored, or ``--now``: retention never removes rows because time passed without data):

1. retention (``HYLO_DECISION_RETENTION_DAYS``): the cut is the start of the day that many days before
   now. On PostgreSQL every partition that ends at or before the cut is rolled up into
   ``decision_rollups`` and dropped (the cheap path: a partition that straddles the cut is kept whole
   until it is entirely older); rows before the cut in the default partition, and on SQLite every row
   before the cut, are rolled up and deleted. Each raw row is rolled up exactly once, in the same
   transaction that removes it, and its snapshot's ``decision_snapshots`` row goes with it (the
   outcomes keep their copy of the decision that started them: a fact of the job, not of the raw row);
2. ``HYLO_ROLLUP_RETENTION_DAYS``: roll-up rows of days before that cut are deleted;
3. PostgreSQL: partitions are created for the span holding now and ``HYLO_DECISION_PARTITIONS_AHEAD``
   spans after it, and for every span the default partition holds rows of (which move into them).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.store import derived, partitions
from shared.store.engine import create_engine
from shared.store.partitions import DAY_S, Partition
from shared.store.settings import MaintenanceSettings, StoreSettings, safe_url
from shared.store.urls import DatabaseUrlError, database_url

#: ``day`` of a time column as SQL both databases evaluate the same way: floor(t / 86400), written as a
#: cast corrected where it rounded up (PostgreSQL's cast rounds, SQLite's truncates; docs/analysts.md)
_DAY = "CAST({t} / 86400 AS INTEGER) - CASE WHEN CAST({t} / 86400 AS INTEGER) > {t} / 86400 THEN 1 ELSE 0 END"

_SUMMED = (
    "snapshots",
    "decision_rows",
    "placed_rows",
    "fallback_rows",
    "started_jobs",
    "started_wait_s_sum",
    "started_jct_s_sum",
    "started_bsld_sum",
    "latency_snapshots",
    "latency_ms_sum",
)

_ROLLUP = """
INSERT INTO decision_rollups (cluster, day, decided_by, gpu_type, {summed}, started_wait_s_max,
                              latency_ms_max, first_snapshot_time, last_snapshot_time)
SELECT cluster, day, decided_by, gpu_type,
       SUM(is_first), COUNT(*), SUM(placed), SUM(fallback), SUM(started),
       SUM(started * wait_s), SUM(started * jct_s), SUM(started * bsld),
       SUM(is_first * has_latency), SUM(CASE WHEN is_first * has_latency = 1 THEN latency_ms ELSE 0 END),
       MAX(CASE WHEN started = 1 THEN wait_s END), MAX(CASE WHEN is_first = 1 THEN latency_ms END),
       MIN(t), MAX(t)
FROM (
    SELECT d.cluster, {day} AS day,
           COALESCE(d.model_version, 'policy:' || d.policy) AS decided_by,
           COALESCE(o.gpu_type, 'unknown') AS gpu_type,
           CASE WHEN d.rank = 0 THEN 1 ELSE 0 END AS is_first,
           CASE WHEN d.placed THEN 1 ELSE 0 END AS placed,
           CASE WHEN d.fallback IS NULL THEN 0 ELSE 1 END AS fallback,
           CASE WHEN o.correlation_id = d.correlation_id THEN 1 ELSE 0 END AS started,
           COALESCE(o.wait_s, 0) AS wait_s, COALESCE(o.jct_s, 0) AS jct_s, COALESCE(o.bsld, 0) AS bsld,
           CASE WHEN d.latency_ms IS NULL THEN 0 ELSE 1 END AS has_latency, d.latency_ms,
           d.snapshot_time AS t
    FROM {source} d
    LEFT JOIN outcomes o ON o.cluster = d.cluster AND o.job_id = d.job_id
    WHERE d.snapshot_time >= :lo AND d.snapshot_time < :hi
) r
GROUP BY cluster, day, decided_by, gpu_type
ON CONFLICT (cluster, day, decided_by, gpu_type) DO UPDATE SET {added}
"""


@dataclass
class MaintenanceReport:
    """What one run did (all counts zero and nothing named: nothing to do)."""

    #: the newest snapshot_time stored (the run's "now"); None: no decision stored
    newest: float | None = None
    partitioned: bool = False
    #: the retention cut (start of a day), when a retention is set
    cut: float | None = None
    #: partitions created, and dropped after their roll-up
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    #: raw decision rows rolled up (those of dropped partitions included), and deleted row by row
    rolled_up_rows: int = 0
    deleted_rows: int = 0
    #: ``decision_snapshots`` rows removed with the raw rows they summarized
    snapshots_deleted: int = 0
    rollups_deleted: int = 0

    def lines(self) -> list[str]:
        """The report as the command prints it, one line per thing done."""
        if self.newest is None:
            return ["no decision stored: nothing to do"]
        layout = "partitioned" if self.partitioned else "not partitioned"
        out = [f"newest snapshot_time {self.newest:.3f}; decisions {layout}"]
        if self.cut is not None:
            out.append(f"retention cut {self.cut:.0f}: {self.rolled_up_rows} raw rows rolled up")
        out += [f"dropped partition {name}" for name in self.dropped]
        if self.deleted_rows:
            out.append(f"deleted {self.deleted_rows} raw rows")
        if self.snapshots_deleted:
            out.append(f"deleted {self.snapshots_deleted} snapshot summaries (decision_snapshots)")
        if self.rollups_deleted:
            out.append(f"deleted {self.rollups_deleted} roll-up rows")
        out += [f"created partition {name}" for name in self.created]
        return out


def _greatest(a: str, b: str, dialect: str) -> str:
    """The larger of two nullable values (NULL only when both are)."""
    if dialect == "postgresql":
        return f"GREATEST({a}, {b})"
    return f"MAX(COALESCE({a}, {b}), COALESCE({b}, {a}))"


def _least(a: str, b: str, dialect: str) -> str:
    return f"LEAST({a}, {b})" if dialect == "postgresql" else f"MIN({a}, {b})"


def rollup_sql(source: str, dialect: str) -> str:
    """The roll-up of ``source``'s rows in ``[:lo, :hi)`` into ``decision_rollups``, added to any rows
    the same days already have there."""
    old = "decision_rollups"
    added = [f"{c} = {old}.{c} + excluded.{c}" for c in _SUMMED]
    added += [
        f"{c} = {_greatest(f'{old}.{c}', f'excluded.{c}', dialect)}"
        for c in ("started_wait_s_max", "latency_ms_max")
    ]
    first, last = "first_snapshot_time", "last_snapshot_time"
    added.append(f"{first} = {_least(f'{old}.{first}', f'excluded.{first}', dialect)}")
    added.append(f"{last} = {_greatest(f'{old}.{last}', f'excluded.{last}', dialect)}")
    return _ROLLUP.format(
        summed=", ".join(_SUMMED), day=_DAY.format(t="d.snapshot_time"), source=source, added=", ".join(added)
    )


def roll_up(conn: Connection, source: str, lo: float, hi: float) -> int:
    """Add the rows of ``source`` (``decisions`` or one of its partitions) in ``[lo, hi)`` to
    ``decision_rollups``; returns how many raw rows that was."""
    rows = conn.execute(
        text(f"SELECT COUNT(*) FROM {source} WHERE snapshot_time >= :lo AND snapshot_time < :hi"),
        {"lo": lo, "hi": hi},
    ).scalar_one()
    if rows:
        conn.execute(text(rollup_sql(source, conn.dialect.name)), {"lo": lo, "hi": hi})
    return int(rows)


def day_start(t: float) -> float:
    return math.floor(t / DAY_S) * DAY_S


def _drop_old_partitions(conn: Connection, cut: float, report: MaintenanceReport) -> None:
    old: list[Partition] = [
        p for p in partitions.partitions(conn) if p.hi is not None and p.lo is not None and p.hi <= cut
    ]
    for part in old:
        assert part.lo is not None and part.hi is not None
        report.rolled_up_rows += roll_up(conn, part.qualified, part.lo, part.hi)
        report.snapshots_deleted += derived.forget_snapshots(conn, part.qualified, part.lo, part.hi)
        partitions.drop_partition(conn, part)
        report.dropped.append(part.name)


def _delete_old_rows(conn: Connection, source: str, cut: float, report: MaintenanceReport) -> None:
    """Roll up and delete the rows of ``source`` before ``cut`` (SQLite's table, the default partition)."""
    first = conn.execute(
        text(f"SELECT MIN(snapshot_time) FROM {source} WHERE snapshot_time < :cut"), {"cut": cut}
    ).scalar()
    if first is None:
        return
    report.rolled_up_rows += roll_up(conn, source, day_start(float(first)), cut)
    report.snapshots_deleted += derived.forget_snapshots(conn, source, day_start(float(first)), cut)
    deleted = conn.execute(text(f"DELETE FROM {source} WHERE snapshot_time < :cut"), {"cut": cut})
    report.deleted_rows += int(deleted.rowcount)


#: the advisory lock that makes two runs on one PostgreSQL store take turns (any constant of Hylo's)
MAINTENANCE_LOCK = 22_0004


def maintain_sync(
    conn: Connection, settings: MaintenanceSettings, now: float | None = None
) -> MaintenanceReport:
    """One maintenance run (module docstring) on ``conn``, in the caller's transaction."""
    if conn.dialect.name == "postgresql":  # a second run waits here, then finds the work done
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MAINTENANCE_LOCK})
    report = MaintenanceReport(partitioned=partitions.partitioned(conn))
    newest = now
    if newest is None:
        stored = conn.execute(text("SELECT MAX(snapshot_time) FROM decisions")).scalar()
        newest = None if stored is None else float(stored)
    if newest is None:
        return report
    report.newest = newest
    if settings.decision_retention_days is not None:
        report.cut = day_start(newest - settings.decision_retention_days * DAY_S)
        if report.partitioned:
            _drop_old_partitions(conn, report.cut, report)
            if partitions.has_default(conn):
                _delete_old_rows(conn, f"{partitions.SCHEMA}.{partitions.DEFAULT}", report.cut, report)
        else:
            _delete_old_rows(conn, "decisions", report.cut, report)
    if settings.rollup_retention_days is not None:
        day = math.floor((newest - settings.rollup_retention_days * DAY_S) / DAY_S)
        deleted = conn.execute(text("DELETE FROM decision_rollups WHERE day < :day"), {"day": day})
        report.rollups_deleted = int(deleted.rowcount)
    if report.partitioned:
        days = settings.decision_partition_days
        spans = partitions.ahead(newest, days, settings.decision_partitions_ahead)
        if partitions.has_default(conn):
            spans += partitions.default_spans(conn, days)
        report.created = [p.name for p in partitions.ensure_partitions(conn, spans)]
    return report


async def maintain(
    engine: AsyncEngine, settings: MaintenanceSettings | None = None, now: float | None = None
) -> MaintenanceReport:
    """One maintenance run on the store behind ``engine``, in a transaction of its own."""
    chosen = settings if settings is not None else MaintenanceSettings()
    async with engine.begin() as conn:
        return await conn.run_sync(maintain_sync, chosen, now)


def main(argv: list[str] | None = None) -> int:
    """``python -m shared.store.maintain``: one run, one line per thing done; errors are one line (exit 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.store.maintain", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--database", help="a SQLite file or SQLAlchemy URL (default: HYLO_DATABASE_URL)")
    parser.add_argument(
        "--now", type=float, help="the cluster clock's now (default: the newest decision stored)"
    )
    args = parser.parse_args(argv)
    try:
        url = database_url(args.database) if args.database else StoreSettings().database_url
        settings = MaintenanceSettings()
    except (DatabaseUrlError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2

    async def run() -> MaintenanceReport:
        engine = create_engine(url)
        try:
            return await maintain(engine, settings, args.now)
        finally:
            await engine.dispose()

    try:
        report = asyncio.run(run())
    except (SQLAlchemyError, OSError) as err:
        print(f"error: {safe_url(url)}: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
