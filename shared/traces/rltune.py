"""The RLTune paper's 19-column trace format (``GPU_Traces/*.csv``, e.g. ``synthetic_trace.csv``).

No header; one job per line; ``;`` lines are comments; ``-1`` means unknown. Column mapping
(0-based, as the RLTune README numbers them):

====  =====================  =========================================================
col   meaning                Hylo field
====  =====================  =========================================================
0     job id                 ``ids``
1     submit time (s)        ``submit``
2     wait time (s)          ``logged_wait`` (``-1`` -> NaN: not logged)
3     run time (s)           ``runtime`` (``-1`` -> 10 s, as the reference loader does)
4     GPUs                   ``gpus`` (whole GPUs)
7     requested CPUs         ``cpus_milli`` = CPUs x 1000 (``-1`` -> not given)
8     requested time (s)     ``estimate`` (``-1`` -> NaN: no user estimate)
9     requested memory       ``mem_mib``, read as MiB (``-1`` -> not given)
11    user id                ``user`` (``-1`` -> ``unknown``)
12    group id               ``group`` (``-1`` -> not given)
13    executable             ``app`` (``-1`` -> not given)
14    queue                  ``queue`` (``-1`` -> not given)
15    partition              ``partition`` (``-1`` -> not given)
17    virtual cluster id     ``vc`` (``-1`` -> ``default``)
18    GPU type code          ``type_set``: 0 T4, 1 MISC, 2 P100, 3 V100M16, 4 V100M32, -1 any
====  =====================  =========================================================

Columns 5 and 6 are validated as numbers but not used; columns 10 and 16 are not used. The
reference (RLTune) overwrote the requested time with the true run time (an oracle); Hylo keeps the
trace's value and leaves the oracle to ``shared.traces.estimates``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.domain.jobs import OPTIONAL_CODE_TABLES, UNKNOWN, CodeBook, JobTable, TypeSetBook
from shared.traces.model import LoadedTrace, assemble
from shared.traces.reading import Source, read_csv_positional

LOADER = "rltune"
VERSION = 2  # 2: wait, group, executable, queue and partition kept as optional columns
FIELDS = (
    "job_id",
    "submit_time",
    "wait_time",
    "run_time",
    "num_gpus",
    "avg_cpu_time",
    "used_memory",
    "requested_cpus",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "vc_id",
    "gpu_type",
)
GPU_TYPE_NAMES = ("T4", "MISC", "P100", "V100M16", "V100M32")
UNKNOWN_RUNTIME_S = 10.0  # what the reference loader substitutes for run_time == -1


def _codes(
    values: list[str], book: CodeBook, unknown_name: str
) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
    names = (unknown_name if v == "-1" else v for v in values)
    return np.fromiter((book.code(v) for v in names), dtype=np.int64, count=len(values))


def _labels(values: list[str], book: CodeBook) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
    """Codes for an optional label column; ``-1`` (or an empty cell) stays ``UNKNOWN``."""
    codes = (UNKNOWN if v in ("-1", "") else book.code(v) for v in values)
    return np.fromiter(codes, dtype=np.int64, count=len(values))


def parse_rltune(path: Path) -> LoadedTrace:
    """Read and validate every row. No row is excluded; unknown run times are noted in the meta."""
    src = Source.read(path)
    cols = read_csv_positional(src, FIELDS)
    ids = cols.text("job_id")
    submit = cols.numbers("submit_time")
    wait = cols.numbers("wait_time", minimum=None)
    runtime = cols.numbers("run_time", unknown=-1)
    gpus = cols.integers("num_gpus")
    cols.numbers("avg_cpu_time", minimum=None)
    cols.numbers("used_memory", integer=True, minimum=None)
    req_cpus = cols.numbers("requested_cpus", unknown=-1)
    req_time = cols.numbers("requested_time", unknown=-1)
    req_mem = cols.numbers("requested_memory", unknown=-1)
    type_code = cols.integers("gpu_type", minimum=-1)
    too_big = type_code >= len(GPU_TYPE_NAMES)
    if too_big.any():
        raise cols.error("gpu_type", int(np.argmax(too_big)), "a GPU type code 0..4 or -1 (any)")
    for name in ("user_id", "vc_id"):
        cols.text(name)

    unknown_runtime = runtime == -1
    runtime = np.where(unknown_runtime, UNKNOWN_RUNTIME_S, runtime)
    notes = []
    if unknown_runtime.any():
        notes.append(f"{int(unknown_runtime.sum())} jobs with run_time -1 set to {UNKNOWN_RUNTIME_S:g} s")
    types = TypeSetBook()
    type_of_code = np.asarray([0] + [types.code((t,)) for t in GPU_TYPE_NAMES], dtype=np.int64)
    users, vcs = CodeBook(), CodeBook()
    labels = {"group": "group_id", "app": "executable", "queue": "queue", "partition": "partition"}
    books = {name: CodeBook() for name in labels}
    optional = {
        name: _labels(cols.text(column, required=False), books[name]) for name, column in labels.items()
    }
    table = assemble(
        name=src.path.name,
        path=src.path,
        sha256=src.sha256,
        ids=np.asarray(ids, dtype=np.str_),
        arrays={
            "submit": submit,
            "runtime": runtime,
            "estimate": np.where(req_time == -1, np.nan, req_time),
            "gpus": gpus,
            "type_set": type_of_code[type_code + 1],
            "cpus_milli": np.where(req_cpus == -1, -1, np.round(req_cpus * 1000)),
            "mem_mib": np.where(req_mem == -1, -1, np.ceil(req_mem)),
            "user": _codes(cols.text("user_id"), users, "unknown"),
            "vc": _codes(cols.text("vc_id"), vcs, "default"),
            "logged_wait": np.where(wait >= 0, wait, np.nan),
            **optional,
        },
        type_sets=types.sets,
        users=users.names,
        vcs=vcs.names,
        notes=notes,
        code_tables={OPTIONAL_CODE_TABLES[name]: books[name].names for name in labels},
    )
    return LoadedTrace(table=table, loader=LOADER, path=src.path)


def load_rltune(path: Path) -> JobTable:
    """The jobs of an RLTune-format trace, sorted by submit time and rebased to t = 0."""
    return parse_rltune(path).table
