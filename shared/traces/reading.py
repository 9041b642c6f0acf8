"""Shared low-level reading: file bytes and hash, CSV rows with line numbers, checked columns.

Why one module: every loader must give the same kind of error for the same kind of problem
(``TraceFormatError`` naming file, line and field), and every loader must be fast on files with
hundreds of thousands of rows. The pattern used throughout is "convert a whole column with numpy,
and only when that fails walk the column row by row to find and report the first bad value", so the
common, valid case costs one vectorized conversion per column.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.traces.errors import TraceFormatError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Source:
    """A trace file's raw bytes and their SHA-256 (of the file as stored, compressed or not)."""

    path: Path
    data: bytes
    sha256: str

    @classmethod
    def read(cls, path: Path) -> Source:
        data = Path(path).read_bytes()
        return cls(path=Path(path), data=data, sha256=hashlib.sha256(data).hexdigest())

    def text(self) -> str:
        """The decoded content; gzip files are decompressed, any line ending is accepted."""
        raw = self.data
        if raw[:2] == GZIP_MAGIC:
            try:
                raw = gzip.decompress(raw)
            except (OSError, EOFError) as err:
                raise TraceFormatError(self.path, 1, "file", "a readable gzip stream", str(err)) from None
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            line = raw[: err.start].count(b"\n") + 1
            bad = raw[err.start : err.end]
            raise TraceFormatError(self.path, line, "encoding", "UTF-8 text", repr(bad)) from None


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, as listed in the traces folder's SHA256SUMS."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _describe(integer: bool, minimum: float | None, unknown: float | None) -> str:
    kind = "integer" if integer else "number"
    if minimum is None:
        text = f"an {kind}" if integer else f"a {kind}"
    elif minimum == 0:
        text = f"a non-negative {kind}"
    elif minimum == 1 and integer:
        text = "a positive integer"
    else:
        text = f"a {kind} >= {minimum:g}"
    if unknown is not None:
        text += f" or {unknown:g} (unknown)"
    return text


class Columns:
    """The rows of a table-like trace, column by column, with the file line of every row.

    ``names`` gives the field names in column order. ``positional`` formats (no header: RLTune,
    SWF) also get the 1-based column number in error messages, because that is how their
    documentation refers to fields.
    """

    def __init__(
        self,
        path: Path,
        names: Sequence[str],
        columns: Sequence[Sequence[str]],
        lines: Sequence[int],
        *,
        positional: bool = False,
    ) -> None:
        self.path = path
        self.names = list(names)
        self._cols = {name: columns[i] if i < len(columns) else () for i, name in enumerate(names)}
        self._index = {name: i for i, name in enumerate(names)}
        self.lines = np.asarray(lines, dtype=np.int64)
        self.positional = positional

    def __len__(self) -> int:
        return len(self.lines)

    def error(self, name: str, row: int, expected: str, value: str | None = None) -> TraceFormatError:
        """The error for row ``row`` (0-based data row) of field ``name``."""
        found = self._cols[name][row] if value is None else value
        column = self._index[name] + 1 if self.positional else None
        return TraceFormatError.field(self.path, int(self.lines[row]), name, expected, found, column)

    def raw(self, name: str) -> Sequence[str]:
        return self._cols[name]

    def text(self, name: str, *, required: bool = True) -> list[str]:
        """A text column with surrounding spaces removed; ``required`` rejects empty values."""
        values = [v.strip() for v in self._cols[name]]
        if required:
            for i, v in enumerate(values):
                if not v:
                    raise self.error(name, i, "a non-empty value")
        return values

    def numbers(
        self,
        name: str,
        *,
        integer: bool = False,
        minimum: float | None = 0.0,
        unknown: float | None = None,
        empty: float | None = None,
    ) -> FloatArray:
        """A numeric column, checked: finite, integral if asked, >= ``minimum`` unless ``unknown``.

        ``empty``, when given, is the value of blank cells (an optional column); otherwise a blank
        cell is an error. Returns float64 (integers included) so callers can mix columns freely.
        """
        raw = self._cols[name]
        expected = _describe(integer, minimum, unknown)
        blank: npt.NDArray[np.bool_] | None = None
        if empty is not None:
            blank = np.asarray([not v.strip() for v in raw], dtype=bool)
            if blank.any():
                raw = [repr(empty) if b else v for v, b in zip(raw, blank.tolist(), strict=True)]
            else:
                blank = None
        try:
            arr = np.asarray(raw, dtype=np.float64)
        except ValueError:
            arr = self._slow_floats(name, raw, expected)
        bad = ~np.isfinite(arr)
        if integer:
            bad |= arr != np.floor(np.where(np.isfinite(arr), arr, 0.0))
        if minimum is not None:
            low = arr < minimum
            if unknown is not None:
                low &= arr != unknown
            bad |= low
        if blank is not None:
            bad &= ~blank
        if bad.any():
            raise self.error(name, int(np.argmax(bad)), expected)
        return arr

    def integers(self, name: str, *, minimum: float | None = 0.0, unknown: float | None = None) -> IntArray:
        """A checked integer column as int64."""
        return self.numbers(name, integer=True, minimum=minimum, unknown=unknown).astype(np.int64)

    def _slow_floats(self, name: str, raw: Sequence[str], expected: str) -> FloatArray:
        # numpy refused the column: find the first value Python cannot read either and report it.
        out = np.empty(len(raw), dtype=np.float64)
        for i, value in enumerate(raw):
            try:
                out[i] = float(value)
            except ValueError:
                raise self.error(name, i, expected) from None
        return out


def read_csv_with_header(src: Source, required: Sequence[str]) -> Columns:
    """Read a CSV file whose first non-blank line is a header holding at least ``required``.

    Columns are addressed by name, so column order may change between releases of a trace; a row
    with a different number of fields than the header is an error, and blank lines are skipped.
    """
    reader = csv.reader(io.StringIO(src.text()))
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    append_row = rows.append
    append_line = lines.append
    for row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if header is None:
            header = [h.strip() for h in row]
            missing = [name for name in required if name not in header]
            if missing:
                raise TraceFormatError(
                    src.path,
                    reader.line_num,
                    "header",
                    f"a header line with columns {','.join(required)} (missing {', '.join(missing)})",
                    repr(",".join(row)),
                )
            width = len(header)
            continue
        if len(row) != width:
            raise TraceFormatError(
                src.path, reader.line_num, "row", f"{width} comma-separated fields", f"{len(row)}: {row!r}"
            )
        append_row(row)
        append_line(reader.line_num)
    if header is None:
        raise TraceFormatError(
            src.path, 1, "header", f"a header line with columns {','.join(required)}", "''"
        )
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in header]
    return Columns(src.path, header, columns, lines)


def read_csv_positional(src: Source, names: Sequence[str], *, comment: str = ";") -> Columns:
    """Read a header-less CSV with exactly ``len(names)`` fields per row; ``comment`` lines skipped."""
    reader = csv.reader(io.StringIO(src.text()))
    width = len(names)
    rows: list[list[str]] = []
    lines: list[int] = []
    for row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if row[0].lstrip().startswith(comment):
            continue
        if len(row) != width:
            raise TraceFormatError(
                src.path, reader.line_num, "row", f"{width} comma-separated fields", f"{len(row)}: {row!r}"
            )
        rows.append(row)
        lines.append(reader.line_num)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return Columns(src.path, names, columns, lines, positional=True)


def ids_from_rows(prefix: str, n: int) -> npt.NDArray[np.str_]:
    """Ids for traces without a job id column: ``prefix`` plus the 0-based data row, zero-padded."""
    width = max(5, len(str(max(n - 1, 0))))
    return np.asarray([f"{prefix}{i:0{width}d}" for i in range(n)], dtype=np.str_)
