"""Errors raised while reading a trace.

Why a dedicated error: a trace is a large file written by someone else. When one of 80,000 rows is
broken, the only useful message is the one that lets a person open the file at the right line and
see the bad value, so every message names the file, the 1-based line, the field and what was
expected versus what was found.
"""

from __future__ import annotations

from pathlib import Path


class TraceFormatError(ValueError):
    """A trace row or header that cannot be read.

    The message reads ``<file> line <n>, <where>: expected <what>, got <found>``, for example
    ``pollux_philly.csv line 17, field 'num_gpus': expected a non-negative integer, got 'abc'``.
    ``where`` is ``field 'name'`` for a value, ``header`` for the header line and ``row`` for a
    row with the wrong number of fields.
    """

    def __init__(self, path: Path | str, line: int, where: str, expected: str, found: str) -> None:
        self.path = Path(path)
        self.line = line
        self.where = where
        self.expected = expected
        self.found = found
        super().__init__(f"{self.path.name} line {line}, {where}: expected {expected}, got {found}")

    @classmethod
    def field(
        cls, path: Path | str, line: int, name: str, expected: str, value: str, column: int | None = None
    ) -> TraceFormatError:
        """A bad value; ``column`` (1-based) is added for positional formats such as SWF."""
        where = f"field {name!r}" if column is None else f"field {name!r} (column {column})"
        return cls(path, line, where, expected, repr(value))


class TraceNotFoundError(FileNotFoundError):
    """A named trace whose file is not in the traces folder; the message says where to get it."""
