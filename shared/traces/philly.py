"""Microsoft Philly (2017), the processed subset used by the Pollux/Sia/Blox simulators.

File: ``philly/pollux_philly.csv`` with header ``timestamp,duration,num_gpus,gpu_time,cluster``.
The trace has no GPU type, CPU, memory, user or runtime estimate, so those fields are "any type",
"not given" (-1), the single user ``unknown`` and NaN. The ``cluster`` column is the virtual cluster
(VC). Rows are not sorted in the file; the table is sorted by submit time. Timestamps are wall-clock
text without a zone and are read as UTC (only differences matter to a simulation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.domain.jobs import CodeBook, JobTable
from shared.traces.model import LoadedTrace, assemble
from shared.traces.reading import Columns, Source, ids_from_rows, read_csv_with_header

LOADER = "philly"
VERSION = 1
FIELDS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
TIMESTAMP_FORMAT = "YYYY-MM-DD HH:MM:SS"


def _timestamps(cols: Columns) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """Epoch seconds (UTC) of the ``timestamp`` column, checked row by row only on failure."""
    raw = cols.text("timestamp", required=False)
    expected = f"a timestamp {TIMESTAMP_FORMAT}"
    arr = np.asarray(raw, dtype=np.str_)
    wrong_length = np.char.str_len(arr) != len(TIMESTAMP_FORMAT) if len(arr) else np.zeros(0, dtype=bool)
    if wrong_length.any():
        raise cols.error("timestamp", int(np.argmax(wrong_length)), expected)
    try:
        stamps = arr.astype("datetime64[s]")
    except ValueError:
        for i, value in enumerate(raw):
            try:
                np.datetime64(value, "s")
            except ValueError:
                raise cols.error("timestamp", i, expected) from None
        raise
    nat = np.isnat(stamps)
    if nat.any():
        raise cols.error("timestamp", int(np.argmax(nat)), expected)
    return stamps.astype(np.int64).astype(np.float64)


def parse_philly(path: Path) -> LoadedTrace:
    """Read and validate every row; nothing in this format is excluded (all rows are usable)."""
    src = Source.read(path)
    cols = read_csv_with_header(src, FIELDS)
    submit = _timestamps(cols)
    duration = cols.numbers("duration", minimum=0)
    gpus = cols.integers("num_gpus")
    cols.numbers("gpu_time", minimum=0)  # unused, but a non-number there means a broken row
    vcs = CodeBook()
    vc = np.fromiter((vcs.code(v) for v in cols.text("cluster")), dtype=np.int64, count=len(cols))
    table = assemble(
        name=src.path.name,
        path=src.path,
        sha256=src.sha256,
        ids=ids_from_rows("philly-", len(cols)),
        arrays={"submit": submit, "runtime": duration, "gpus": gpus, "vc": vc},
        users=["unknown"],
        vcs=vcs.names,
        notes=["timestamps read as UTC; no GPU type, CPU, memory, user or estimate columns"],
    )
    return LoadedTrace(table=table, loader=LOADER, path=src.path)


def load_philly(path: Path) -> JobTable:
    """The Philly jobs, sorted by submit time, submit rebased to 0 (origin = first epoch second)."""
    return parse_philly(path).table
