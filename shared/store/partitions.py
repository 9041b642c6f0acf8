"""PostgreSQL range partitions of ``decisions`` on ``snapshot_time``: naming, listing, creating, dropping.

Why partitions: a busy cluster writes billions of decision rows a month (one per pending job per
decision). Split by time, a read of a time window (the report, the query API's pages) touches only
that window's partitions, and retention drops a whole partition: a catalog change, where a ``DELETE``
of millions of rows would write as much as it removes and leave the table to vacuum.

Why ``snapshot_time``: it comes with the decision message, so a redelivered decision carries the same
value, lands in the same partition and meets its twin there: the unique key (``correlation_id``,
``job_id``, ``snapshot_time``) still makes ``INSERT ... ON CONFLICT DO NOTHING`` store it once. (A
unique constraint of a partitioned table must contain the partition key, hence the third column; one
correlation id is one snapshot, so the key identifies the same rows as before.)

Layout: the partitions live in the schema ``hylo_partitions``, so the public schema holds the logical
tables only, the same as a SQLite store's. Each covers whole days ``[lo, hi)`` of the cluster clock,
aligned on multiples of the span from 0 (``MaintenanceSettings.decision_partition_days``), and is named
``decisions_<lo>_<hi>`` in seconds (``m`` for a minus sign). ``decisions_default`` takes every row no
partition covers (a store before its first maintenance, a clock far from the others), so a write never
fails for want of a partition; creating a partition whose range holds rows of the default one moves
them into it first (``create_partition``). SQLite stores are not partitioned: every function here is
for a connection to a PostgreSQL store whose ``decisions`` is partitioned (``partitioned``).

The functions take a synchronous connection (Alembic's, or ``AsyncConnection.run_sync``) and run in
the caller's transaction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection

#: the schema of the partitions (the public schema keeps the logical tables)
SCHEMA = "hylo_partitions"
#: the partition of every row no other partition covers
DEFAULT = "decisions_default"
DAY_S = 86_400.0

_BOUNDS = re.compile(r"FROM \('?(?P<lo>[^')]+)'?\) TO \('?(?P<hi>[^')]+)'?\)")


@dataclass(frozen=True)
class Partition:
    """One partition of ``decisions``: its name (in ``SCHEMA``) and range ``[lo, hi)``; the default
    partition has no range (``lo`` and ``hi`` None)."""

    name: str
    lo: float | None
    hi: float | None

    @property
    def is_default(self) -> bool:
        return self.lo is None

    @property
    def qualified(self) -> str:
        return f"{SCHEMA}.{self.name}"


def partitioned(conn: Connection) -> bool:
    """Whether the store behind ``conn`` keeps ``decisions`` partitioned (PostgreSQL from 0007)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass('decisions')")
    ).scalar()
    return bool(kind == "p")


def _bound(value: str) -> float:
    if value == "MINVALUE":
        return -math.inf
    if value == "MAXVALUE":
        return math.inf
    return float(value)


def partitions(conn: Connection) -> list[Partition]:
    """The partitions of ``decisions``, by range (the default one last)."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass('decisions')"
        )
    ).all()
    out = []
    for name, bound in rows:
        found = _BOUNDS.search(bound or "")
        if found is None:  # DEFAULT
            out.append(Partition(str(name), None, None))
        else:
            out.append(Partition(str(name), _bound(found["lo"]), _bound(found["hi"])))
    return sorted(out, key=lambda p: (p.is_default, p.lo or 0.0))


def _seconds(value: float) -> str:
    whole = int(value)
    return str(whole) if whole >= 0 else f"m{-whole}"


def name_of(lo: float, hi: float) -> str:
    """A partition's name from its range, e.g. ``decisions_1763596800_1764201600``."""
    return f"decisions_{_seconds(lo)}_{_seconds(hi)}"


def span_of(t: float, days: int) -> tuple[float, float]:
    """The aligned range of ``days`` days that holds time ``t``."""
    width = days * DAY_S
    k = math.floor(t / width)
    return k * width, (k + 1) * width


def uncovered(
    ranges: Iterable[tuple[float, float]], existing: Sequence[Partition]
) -> list[tuple[float, float]]:
    """The parts of ``ranges`` no existing (ranged) partition covers: what is left to create. A span
    changed since the first partitions were made leaves pieces, which become partitions of their own."""
    have = sorted((p.lo, p.hi) for p in existing if p.lo is not None and p.hi is not None)
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(set(ranges)):
        pieces = [(lo, hi)]
        for a, b in have:
            pieces = [
                piece for x, y in pieces for piece in ((x, min(y, a)), (max(x, b), y)) if piece[0] < piece[1]
            ]
        out += [piece for piece in pieces if piece not in out]
    return out


def create_layout(conn: Connection) -> None:
    """The partitions' schema and the default partition (migration 0007, on a partitioned table)."""
    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    conn.execute(text(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.{DEFAULT} PARTITION OF decisions DEFAULT"))


def has_default(conn: Connection) -> bool:
    """Whether ``decisions`` has its default partition (a DBA may have dropped it)."""
    return any(p.is_default for p in partitions(conn))


def create_partition(conn: Connection, lo: float, hi: float) -> Partition:
    """Create the partition ``[lo, hi)``, moving into it the rows of the default partition in its range.

    Why the move: PostgreSQL refuses a new partition while the default one holds rows of its range. The
    rows go to a standalone table first, which is then attached (PostgreSQL builds its indexes and
    checks its range); both steps lock ``decisions`` only for their own duration, in this transaction.
    """
    part = Partition(name_of(lo, hi), lo, hi)
    bounds = f"FOR VALUES FROM ({lo!r}) TO ({hi!r})"
    window = "snapshot_time >= :lo AND snapshot_time < :hi"
    default = f"{SCHEMA}.{DEFAULT}"
    stranded = has_default(conn) and bool(
        conn.execute(
            text(f"SELECT EXISTS (SELECT 1 FROM {default} WHERE {window})"), {"lo": lo, "hi": hi}
        ).scalar()
    )
    if not stranded:
        conn.execute(text(f"CREATE TABLE {part.qualified} PARTITION OF decisions {bounds}"))
        return part
    conn.execute(
        text(f"CREATE TABLE {part.qualified} (LIKE decisions INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    )
    conn.execute(
        text(
            f"WITH moved AS (DELETE FROM {default} WHERE {window} RETURNING *) "
            f"INSERT INTO {part.qualified} SELECT * FROM moved"
        ),
        {"lo": lo, "hi": hi},
    )
    conn.execute(text(f"ALTER TABLE decisions ATTACH PARTITION {part.qualified} {bounds}"))
    return part


def default_spans(conn: Connection, days: int) -> list[tuple[float, float]]:
    """The aligned ranges that hold rows of the default partition (none when it is empty)."""
    width = days * DAY_S
    rows = conn.execute(
        text(f"SELECT DISTINCT FLOOR(snapshot_time / :width) FROM {SCHEMA}.{DEFAULT}"), {"width": width}
    ).scalars()
    return [(float(k) * width, (float(k) + 1) * width) for k in rows]


def ensure_partitions(conn: Connection, ranges: Iterable[tuple[float, float]]) -> list[Partition]:
    """Create the partitions that ``ranges`` need and do not have yet; returns those created."""
    return [create_partition(conn, lo, hi) for lo, hi in uncovered(ranges, partitions(conn))]


def ahead(newest: float, days: int, count: int) -> list[tuple[float, float]]:
    """The span holding ``newest`` and the ``count`` spans after it."""
    lo, hi = span_of(newest, days)
    width = hi - lo
    return [(lo + k * width, hi + k * width) for k in range(count + 1)]


def drop_partition(conn: Connection, part: Partition) -> None:
    """Drop a ranged partition and its rows (retention: roll them up first)."""
    if part.is_default:
        raise ValueError("the default partition is never dropped")
    conn.execute(text(f"DROP TABLE {part.qualified}"))
