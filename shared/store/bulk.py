"""Insert-or-ignore of many rows as columns: one statement per table, no per-value work in SQLAlchemy.

Why (issue 22, item 2): the recorder writes one ``decisions`` row per pending job per decision, and
SQLAlchemy's insert-or-ignore (``writes.insert_or_ignore``) spent most of a 1,024-row decision's CPU
in Python, not in the database: a dict per row, a bind processor per value (``json.dumps`` for each
of the four JSON columns of every row), the parameters of each row copied into a multi-row statement,
and on PostgreSQL one bind parameter per value (``docs/results/recorder-cost.md``). Here a write is
the rows as columns, with the values that every row shares given once, and goes to the driver as it
is:

- PostgreSQL: ``INSERT ... SELECT ... FROM unnest($k::type[], ...) ON CONFLICT (key) DO NOTHING``,
  one prepared statement with one array per column (asyncpg encodes a list of numbers or strings in
  C) and the shared values as scalars; one round trip for the whole decision, whatever its size, and
  on a partitioned ``decisions`` each row is routed to its partition as a plain insert's would be.
- SQLite: ``INSERT ... VALUES (?, ...) ON CONFLICT (key) DO NOTHING`` through ``executemany`` on row
  tuples zipped from the columns: SQLite prepares the statement once and binds each row in C.

Both count the rows really inserted from the driver's row count (``INSERT 0 n`` on PostgreSQL, the
changes on SQLite), which leaves out the rows the conflict key turned away: the same answer as the
``RETURNING`` of the SQLAlchemy path, without fetching a row per insert. JSON columns take the text
``json.dumps`` gives (what SQLAlchemy's JSON type stored), encoded by the caller once per distinct
value where values repeat, rows of floats by ``json_rows``; PostgreSQL casts it to ``jsonb``.

The statements run through ``AsyncConnection.exec_driver_sql``, inside the caller's transaction
(SQLAlchemy's adapter opens it on the first statement as for any other), so a write is still
all-or-nothing with whatever else the caller does in that transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import repeat
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["BulkInsert", "json_rows"]


@dataclass(frozen=True)
class BulkInsert:
    """One table's insert-or-ignore, for rows given as columns.

    ``shared`` are the columns whose value is the same in every row of one write (a decision's
    correlation id, cluster, time ...), ``per_row`` those with one value per row; each is ``(name,
    PostgreSQL type)``, the type as the statement casts the parameter (``jsonb`` columns take JSON
    text). ``key`` is the table's unique key, the conflict target.
    """

    table: str
    key: tuple[str, ...]
    shared: tuple[tuple[str, str], ...]
    per_row: tuple[tuple[str, str], ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(name for name, _ in (*self.shared, *self.per_row))

    @cached_property
    def postgresql(self) -> str:
        """The statement for PostgreSQL: shared values as scalars, the rest unnested from arrays."""
        k = len(self.shared)
        scalars = [f"${i + 1}::{kind}" for i, (_, kind) in enumerate(self.shared)]
        arrays = [f"${k + i + 1}::{_array_of(kind)}[]" for i, (_, kind) in enumerate(self.per_row)]
        names = [f"r{i}" for i in range(len(self.per_row))]
        picked = [
            f"r.{n}::jsonb" if kind == "jsonb" else f"r.{n}"
            for n, (_, kind) in zip(names, self.per_row, strict=True)
        ]
        return (
            f"INSERT INTO {self.table} ({', '.join(self.columns)}) "
            f"SELECT {', '.join([*scalars, *picked])} "
            f"FROM unnest({', '.join(arrays)}) AS r({', '.join(names)}) "
            f"ON CONFLICT ({', '.join(self.key)}) DO NOTHING"
        )

    @cached_property
    def sqlite(self) -> str:
        """The statement for SQLite, executed once per row tuple."""
        marks = ", ".join("?" for _ in self.columns)
        return (
            f"INSERT INTO {self.table} ({', '.join(self.columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(self.key)}) DO NOTHING"
        )

    async def insert(
        self, conn: AsyncConnection, shared: Sequence[Any], per_row: Sequence[Sequence[Any]]
    ) -> int:
        """Insert the rows (``per_row``: one sequence per column, all of one length) that do not collide
        on ``key``; returns how many were inserted."""
        if len(shared) != len(self.shared) or len(per_row) != len(self.per_row):
            raise ValueError(
                f"{self.table}: {len(shared)} shared and {len(per_row)} per-row columns given, "
                f"expected {len(self.shared)} and {len(self.per_row)}"
            )
        n = len(per_row[0]) if per_row else 0
        if any(len(column) != n for column in per_row):
            raise ValueError(f"{self.table}: per-row columns of different lengths")
        if n == 0:
            return 0
        dialect, style = conn.dialect.name, conn.dialect.paramstyle
        if (dialect, style) not in (("postgresql", "numeric_dollar"), ("sqlite", "qmark")):
            raise NotImplementedError(
                f"bulk insert is written for asyncpg and aiosqlite, not {dialect}+{conn.dialect.driver}"
            )
        if dialect == "postgresql":
            params = (*shared, *(c if isinstance(c, list) else list(c) for c in per_row))
            result = await conn.exec_driver_sql(self.postgresql, params)
        else:
            rows = list(zip(*(repeat(value, n) for value in shared), *per_row, strict=True))
            result = await conn.exec_driver_sql(self.sqlite, rows)
        return max(int(result.rowcount), 0)


def _array_of(kind: str) -> str:
    """The element type of a per-row column's array: JSON travels as text and is cast row by row."""
    return "text" if kind == "jsonb" else kind


def json_rows(names: Sequence[str], table: Any) -> list[str]:
    """Each row of ``table`` (rows of floats over ``names``: a ``FloatRows``, an array or nested
    sequences) as a JSON object: the very text ``json.dumps(dict(zip(names, row)))`` gives.

    Why not ``json.dumps`` per row: printing floats is most of the cost (a 1,024-job decision's
    features are 18,432 of them), and a queue's features repeat a few values per column (its jobs
    share pools, requests and times). So each distinct value is printed once, with ``float.__repr__``
    as ``json`` prints it, and each row is one format string over those texts. Distinct means the
    same bits (``-0.0`` is not ``0.0``), so no value's text changes. A table with a value that is not
    finite (none in a validated message) goes through ``json.dumps`` row by row, as before."""
    values = np.asarray(table, dtype=np.float64)
    if values.size == 0 or not names:
        return ["{}" for _ in range(len(values))]
    if values.ndim != 2 or values.shape[1] != len(names):
        raise ValueError(f"a table of shape {values.shape} for {len(names)} names")
    if not np.isfinite(values).all():
        return [json.dumps(dict(zip(names, row, strict=True))) for row in values.tolist()]
    bits, where = np.unique(np.ascontiguousarray(values).view(np.int64), return_inverse=True)
    texts = np.array([repr(v) for v in bits.view(np.float64).tolist()], dtype=object)
    template = "{" + ", ".join(json.dumps(name).replace("%", "%%") + ": %s" for name in names) + "}"
    return [template % tuple(row) for row in texts[where.reshape(values.shape)].tolist()]
