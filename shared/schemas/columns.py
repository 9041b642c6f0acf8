"""Row types sent as columns: one JSON array per field instead of one JSON object per row.

Why: pydantic decodes a JSON array of 6,000 numbers in about 0.2 ms, but 1,024 small objects (a
queue of pending jobs) in 3-5 ms and 6,000 nested lists in about 3 ms. Every hop of the pipeline
decodes what the previous one sent, so the big collections of a message (pending jobs, running jobs,
nodes, placements) travel as columns, and ``Columns`` subclasses read back as rows: ``len(c)``,
``c[i]`` and ``for row in c`` yield row models (built without a second validation: every column was
validated already), ``C.of(rows)`` builds the columns from rows.

A column whose entries are lists of names (a running job's nodes, a placement's nodes) is sent flat,
with a per-row count: one flat array decodes an order of magnitude faster than one list per row.

Why no automatic conversion from row lists: a "before" validator would make pydantic materialize the
JSON as Python objects first and lose the fast decoding this module exists for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

import numpy as np
from pydantic import BaseModel, PrivateAttr

from shared.schemas.base import JOB_ID_FORBIDDEN, Strict
from shared.schemas.packed import FloatRows

R = TypeVar("R", bound=BaseModel)
C = TypeVar("C", bound="Columns[Any]")
F = TypeVar("F", bound="FlatNodeColumns[Any]")


def same_lengths(owner: str, columns: dict[str, Sequence[Any]]) -> int:
    """The common length of ``columns``; raise naming the first column whose length differs."""
    names = list(columns)
    n = len(columns[names[0]])
    for name in names[1:]:
        if len(columns[name]) != n:
            raise ValueError(
                f"{owner}.{name} has {len(columns[name])} entries, expected {n} (as {owner}.{names[0]})"
            )
    return n


def first_repeated(values: Iterable[str]) -> str | None:
    """The first value that appears twice, or None."""
    seen: set[str] = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None


def require_unique(name: str, values: Sequence[str] | Iterable[str]) -> None:
    """Raise naming the first repeated value: ids must identify one entry."""
    if isinstance(values, Sequence) and len(set(values)) == len(values):
        return  # the common case, at C speed
    dup = first_repeated(values)
    if dup is not None:
        raise ValueError(f"{name} must be unique, {dup!r} appears more than once")


def pick(column: Sequence[Any], index: Sequence[int]) -> tuple[Any, ...]:
    """``column``'s entries at ``index``, as a tuple (``itemgetter`` does it at C speed).

    A ``FloatRows`` table is gathered from its row tuples (built once), not row by row through its
    Python-level ``__getitem__``.
    """
    if isinstance(column, FloatRows):
        column = column.rows()
    if len(index) == 1:
        return (column[index[0]],)
    return itemgetter(*index)(column) if index else ()


def is_identity(index: Sequence[int], n: int) -> bool:
    """True if ``index`` is ``0, 1, ..., n - 1``: taking those rows changes nothing.

    Compared as arrays: as two Python lists it cost about 10 ms for the 50,000 rows of a long queue
    (the featurizer takes its kept jobs, nearly always all of them, at every snapshot;
    ``bench/big_queues.py``)."""
    if len(index) != n:
        return False
    if n == 0:
        return True
    if index[0] != 0 or index[-1] != n - 1:
        return False
    array = getattr(index, "array", index)  # a packed column's own array (``shared.schemas.numbers``)
    if isinstance(array, np.ndarray) and (array.ndim != 1 or array.dtype.kind not in "iu"):
        return list(index) == list(range(n))
    if not isinstance(array, np.ndarray):
        array = np.fromiter(index, dtype=np.int64, count=n)
    return bool((array == np.arange(n, dtype=array.dtype)).all())


#: a character a job id may not contain (``shared.schemas.base.JobId``'s class)
_NOT_IN_JOB_ID = re.compile(f"[{JOB_ID_FORBIDDEN}]")


def check_job_ids(owner: str, ids: Sequence[str]) -> None:
    """Every id must be a ``JobId`` (printable, no whitespace): checked once over the joined ids.

    Why not the ``JobId`` type per entry: a regex match per id cost about 1 ms for the 6,000 running
    jobs of a big snapshot at every hop. One regex search over the joined ids still cost 0.9 ms
    (110 kB of ids: the regex tests every character against Unicode's whitespace class), so the
    common case is decided by ``str.isprintable`` (C speed, 0.2 ms): a string with no character
    outside Unicode's printable classes other than the ASCII space contains neither whitespace nor a
    control character. Only a column that fails it (a space, or a printable-class outlier such as a
    format character, which ``JobId`` allows) gets the exact regex. Lengths are checked per entry by
    the column's type (1-128 characters).
    """
    joined = "".join(ids)
    if (joined.isprintable() and " " not in joined) or _NOT_IN_JOB_ID.search(joined) is None:
        return
    i = next(i for i, v in enumerate(ids) if _NOT_IN_JOB_ID.search(v))
    raise ValueError(f"{owner}.job_id entry {i} ({ids[i]!r}) contains whitespace or a control character")


def offsets_of(counts: Sequence[int]) -> list[int]:
    """Start of every row's slice of a flat column, plus the end: ``[0, c0, c0 + c1, ...]``."""
    return [0, *accumulate(counts)]


def check_flat(owner: str, flat: str, count: str, flat_len: int, counts: Sequence[int]) -> None:
    """A flat column must hold exactly the sum of its per-row counts."""
    array = getattr(counts, "array", None)  # a packed column's (``shared.schemas.numbers``)
    total = int(array.sum()) if array is not None else sum(counts)
    if total != flat_len:
        raise ValueError(
            f"{owner}.{flat} has {flat_len} entries, expected {total} (the sum of {owner}.{count})"
        )


class Columns(Strict, Generic[R]):
    """Columns of a row model ``ROW``: entry ``i`` of every column in ``COLUMNS`` describes row ``i``.

    Rows holding a list of node names sent flat: ``FlatNodeColumns``.
    """

    ROW: ClassVar[type[BaseModel]]
    #: the columns in row-field order; all must have the same length
    COLUMNS: ClassVar[tuple[str, ...]]
    #: the name used in error messages ("pending", "running", ...)
    OWNER: ClassVar[str] = "rows"

    @classmethod
    def of(cls: type[C], rows: Iterable[Any]) -> C:
        """Columns from rows (already validated row objects)."""
        rows = tuple(rows)
        return cls(**{c: tuple(getattr(r, c) for r in rows) for c in cls.COLUMNS})

    def __eq__(self, other: object) -> bool:
        """Equal columns, whatever was cached on either side (the offsets of a flat column)."""
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in type(self).model_fields)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f) for f in type(self).model_fields))

    def _lengths(self) -> int:
        return same_lengths(self.OWNER, {c: getattr(self, c) for c in self.COLUMNS})

    def __len__(self) -> int:
        return len(getattr(self, self.COLUMNS[0]))

    def _row_fields(self, i: int) -> dict[str, Any]:
        return {c: getattr(self, c)[i] for c in self.COLUMNS}

    def __getitem__(self, i: int) -> R:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self.OWNER} row {i} out of range ({n} rows)")
        return self.ROW.model_construct(**self._row_fields(i % n))  # type: ignore[return-value]

    def __iter__(self) -> Iterator[R]:  # type: ignore[override]  # rows, not (field, value)
        for i in range(len(self)):
            yield self[i]

    def take(self: C, index: Sequence[int]) -> C:
        """The rows at ``index`` (in that order), as columns; no re-validation."""
        if is_identity(index, len(self)):
            return self  # frozen: sharing is safe
        cols = {c: pick(getattr(self, c), index) for c in self.COLUMNS}
        return cast(C, type(self).model_construct(None, **cols))


class FlatNodeColumns(Columns[R]):
    """Columns whose rows each hold a list of node names (a row's ``nodes``), sent as one flat
    ``nodes`` column plus a per-row ``node_count`` (in ``COLUMNS``; ``nodes`` is not).

    Other row fields with one entry per node of the row (``FLAT_COLUMNS``, after ``nodes``: a
    running job's GPUs, CPUs and memory on each of its nodes) are sent flat the same way, aligned
    with ``nodes``: entry ``k`` of each belongs to the ``k``-th flat node. A column named in
    ``OPTIONAL_COLUMNS`` (flat or per row) may be empty: not given, for every row, whose rows then
    hold the field's default; when given it is complete (one entry per flat node, or per row).

    Subclasses declare the fields (with their own bounds) and call ``_check_flat`` in their
    validator; row ``i``'s entries are ``nodes[offsets()[i]:offsets()[i + 1]]`` (the same slice of
    every flat column).
    """

    if TYPE_CHECKING:  # declared by the subclasses, with their own bounds
        node_count: tuple[int, ...]
        nodes: tuple[str, ...]

    #: the row fields with one entry per node of the row, sent flat; ``nodes`` first
    FLAT_COLUMNS: ClassVar[tuple[str, ...]] = ("nodes",)
    #: columns (of ``COLUMNS`` or ``FLAT_COLUMNS``) that may be empty: not given for any row
    OPTIONAL_COLUMNS: ClassVar[frozenset[str]] = frozenset()

    _offsets: list[int] | None = PrivateAttr(default=None)

    def given(self, column: str) -> bool:
        """Whether ``column`` holds entries (an optional column may be empty: not given)."""
        return len(getattr(self, column)) > 0

    @classmethod
    def _flat_columns(cls, rows: tuple[Any, ...]) -> dict[str, Any]:
        """The columns of ``rows`` (row objects with a ``nodes`` tuple), the ``FLAT_COLUMNS``
        flattened. An optional flat column is given by every row or by none (ValueError naming the
        first row that breaks it)."""
        cols: dict[str, Any] = {
            c: tuple(getattr(r, c) for r in rows) for c in cls.COLUMNS if c != "node_count"
        }
        cols["node_count"] = tuple(len(r.nodes) for r in rows)
        for c in cls.FLAT_COLUMNS:
            per_row = [getattr(r, c) for r in rows]
            if c in cls.OPTIONAL_COLUMNS and any(per_row) and not all(per_row):
                i = next(i for i, v in enumerate(per_row) if not v)
                j = next(i for i, v in enumerate(per_row) if v)
                raise ValueError(
                    f"{cls.OWNER} {_row_name(rows[i], i)} does not give {c} while "
                    f"{_row_name(rows[j], j)} does: a column is given for every row or for none"
                )
            cols[c] = tuple(chain.from_iterable(per_row))
        return cols

    @classmethod
    def of(cls: type[F], rows: Iterable[Any]) -> F:
        """Columns from rows (already validated row objects)."""
        return cls(**cls._flat_columns(tuple(rows)))

    def _lengths(self) -> int:
        """The common length of the per-row columns (an optional one only when given)."""
        optional = self.OPTIONAL_COLUMNS
        return same_lengths(
            self.OWNER, {c: getattr(self, c) for c in self.COLUMNS if c not in optional or self.given(c)}
        )

    def _check_flat(self) -> None:
        check_flat(self.OWNER, "nodes", "node_count", len(self.nodes), self.node_count)

    def offsets(self) -> list[int]:
        """Where each row's names start in ``nodes``, plus the end."""
        if self._offsets is None:
            self._offsets = offsets_of(self.node_count)
        return self._offsets

    def node_lists(self) -> list[tuple[str, ...]]:
        """Each row's node names."""
        o, nodes = self.offsets(), self.nodes
        return [nodes[o[i] : o[i + 1]] for i in range(len(self.node_count))]

    def _row_fields(self, i: int) -> dict[str, Any]:
        o = self.offsets()
        optional = self.OPTIONAL_COLUMNS
        fields = {
            c: getattr(self, c)[i]
            for c in self.COLUMNS
            if c != "node_count" and (c not in optional or self.given(c))
        }
        start, end = o[i], o[i + 1]
        for c in self.FLAT_COLUMNS:
            if c not in optional or self.given(c):
                fields[c] = tuple(getattr(self, c)[start:end])
        return fields

    def take(self: F, index: Sequence[int]) -> F:
        """The rows at ``index`` (in that order), as columns (every given column kept)."""
        if is_identity(index, len(self)):
            return self  # frozen: sharing is safe
        return type(self).of(self[i] for i in index)


def _row_name(row: Any, i: int) -> str:
    """How an error names row ``i``: by its job id when it has one."""
    job_id = getattr(row, "job_id", None)
    return f"job {job_id!r} (entry {i})" if job_id is not None else f"row {i}"
