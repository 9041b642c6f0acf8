"""Standard Workload Format (Parallel Workloads Archive), plain or gzip-compressed.

Header lines start with ``;`` (``; UnixStartTime: ...``, ``; Partition: 1 NAME``, ``; Queue: ...``);
each job is 18 whitespace-separated numbers, ``-1`` meaning unknown. Mapping (1-based SWF fields):

=====  =========================  ===================================================
field  SWF meaning                Hylo field
=====  =========================  ===================================================
1      job number                 ``ids``
2      submit time (s)            ``submit`` (origin = UnixStartTime + first submit)
3      wait time (s)              ``logged_wait`` (-1 -> NaN: not logged)
4      run time (s)               ``runtime``
5      allocated processors       ``gpus``; when -1, field 8 (requested processors)
9      requested time (s)         ``estimate`` (-1 or 0 -> NaN)
12     user id                    ``user`` (-1 -> ``unknown``)
13     group id                   ``group`` (-1 -> not given, ``UNKNOWN``)
14     executable (application)   ``app`` (-1 -> not given)
15     queue                      ``qos`` (-1 -> ``normal``; named from the header) and
                                  ``queue`` (-1 -> not given; named from the header)
16     partition                  ``vc`` (-1 -> ``default``; named from the header) and
                                  ``partition`` (-1 -> not given; named from the header)
=====  =========================  ===================================================

Why queue and partition twice: ``qos``/``vc`` are what the scheduler reads (a neutral name where the
log says nothing), ``queue``/``partition`` keep what the log itself says, "not given" included,
for the runtime predictor (``shared.prediction``), which must not mistake a filled-in name for data.

Why processors become ``gpus``: Hylo schedules GPU slots; an HPC trace is used as a workload of
"one processor = one slot" jobs so that CPU-cluster logs with real user estimates (which GPU traces
lack) can exercise the same schedulers. CPU and memory requests are left "not given" so that the
cluster's per-slot defaults apply.

Excluded (counted): jobs whose run time is <= 0 or unknown, and jobs with no processor count.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import UNKNOWN, CodeBook, JobTable
from shared.traces.errors import TraceFormatError
from shared.traces.model import Exclusion, LoadedTrace, assemble, make_exclusion, rebase_origin
from shared.traces.reading import Source

LOADER = "swf"
# 2: excluded rows keep their submit times (per-window excluded counts)
# 3: group, executable, queue, partition and wait kept as optional columns
VERSION = 3
FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
# Fields that may hold fractions; every other field is an integer. All may be -1 (unknown).
FRACTIONAL = {"submit_time", "wait_time", "run_time", "average_cpu_time", "requested_time", "think_time"}
NO_RUNTIME = "run time <= 0 or unknown (-1)"
NO_PROCESSORS = "no processor count (allocated and requested processors <= 0 or unknown)"
_HEADER_RE = re.compile(r";\s*(\w+)\s*:\s*(.*)$")


class _Header:
    """The ``;`` header values Hylo uses: the start time and the queue and partition names."""

    def __init__(self) -> None:
        self.unix_start: float = 0.0
        self.queues: dict[int, str] = {}
        self.partitions: dict[int, str] = {}

    def read(self, line: str) -> None:
        m = _HEADER_RE.match(line.strip())
        if not m:
            return
        key, value = m.group(1), m.group(2).strip()
        parts = value.split()
        if key == "UnixStartTime" and parts:
            with contextlib.suppress(ValueError):
                self.unix_start = float(parts[0])
        elif key in ("Queue", "Partition") and len(parts) >= 2 and parts[0].lstrip("-").isdigit():
            target = self.queues if key == "Queue" else self.partitions
            target[int(parts[0])] = " ".join(parts[1:])


def _split(src: Source) -> tuple[_Header, list[str], list[int]]:
    header = _Header()
    body: list[str] = []
    lines: list[int] = []
    for number, line in enumerate(src.text().splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped[0] == ";":
            header.read(stripped)
            continue
        body.append(stripped)
        lines.append(number)
    return header, body, lines


def _locate_bad_token(src: Source, body: list[str], lines: list[int]) -> TraceFormatError:
    """Walk the rows to find why the fast numeric read failed (slow path, errors only)."""
    width = len(FIELDS)
    for text, number in zip(body, lines, strict=True):
        tokens = text.split()
        if len(tokens) != width:
            return TraceFormatError(
                src.path, number, "row", f"{width} whitespace-separated fields", str(len(tokens))
            )
        for col, token in enumerate(tokens):
            try:
                float(token)
            except ValueError:
                return TraceFormatError.field(src.path, number, FIELDS[col], "a number", token, col + 1)
    return TraceFormatError(src.path, lines[0] if lines else 1, "row", "numeric SWF rows", "unreadable data")


def _matrix(src: Source, body: list[str], lines: list[int]) -> npt.NDArray[np.float64]:
    if not body:
        return np.zeros((0, len(FIELDS)), dtype=np.float64)
    try:
        data = np.loadtxt(io.StringIO("\n".join(body)), dtype=np.float64, ndmin=2)
    except ValueError:
        raise _locate_bad_token(src, body, lines) from None
    if data.shape[1] != len(FIELDS):
        raise _locate_bad_token(src, body, lines)
    return data


def _check(src: Source, data: npt.NDArray[np.float64], body: list[str], lines: list[int]) -> None:
    """Every field finite, -1 or >= 0, and integral unless SWF allows fractions."""
    for col, name in enumerate(FIELDS):
        values = data[:, col]
        finite = np.isfinite(values)
        bad = ~finite | ((values < 0) & (values != -1))
        integer = name not in FRACTIONAL
        if integer:
            bad |= finite & (values != np.floor(np.where(finite, values, 0.0)))
        if bad.any():
            row = int(np.argmax(bad))
            kind = "integer" if integer else "number"
            token = body[row].split()[col]
            raise TraceFormatError.field(
                src.path, lines[row], name, f"a non-negative {kind} or -1 (unknown)", token, col + 1
            )


def _names(
    values: npt.NDArray[np.float64], book: CodeBook, named: dict[int, str], unknown: str
) -> npt.NDArray[np.int64]:
    """Codes for a numeric id column, named from the header when it names them (-1 -> unknown)."""
    distinct, inverse = np.unique(values.astype(np.int64), return_inverse=True)
    codes = [book.code(unknown if k == -1 else named.get(k, str(k))) for k in distinct.tolist()]
    return np.asarray(codes, dtype=np.int64)[inverse.reshape(-1)]


def _labels(values: npt.NDArray[np.float64], book: CodeBook, named: dict[int, str]) -> npt.NDArray[np.int64]:
    """Codes for an optional id column: -1 stays ``UNKNOWN`` (not given), other ids are named from
    the header when it names them, else by their number."""
    distinct, inverse = np.unique(values.astype(np.int64), return_inverse=True)
    codes = [UNKNOWN if k == -1 else book.code(named.get(k, str(k))) for k in distinct.tolist()]
    return np.asarray(codes, dtype=np.int64)[inverse.reshape(-1)]


def parse_swf(path: Path) -> LoadedTrace:
    """Read every job, validate every field, and exclude jobs that cannot be simulated."""
    src = Source.read(path)
    header, body, lines = _split(src)
    data = _matrix(src, body, lines)
    _check(src, data, body, lines)
    col = {name: data[:, i] for i, name in enumerate(FIELDS)}
    ids = np.asarray([str(int(v)) for v in col["job_number"].tolist()], dtype=np.str_)
    procs = np.where(
        col["allocated_processors"] == -1, col["requested_processors"], col["allocated_processors"]
    )
    no_runtime = col["run_time"] <= 0
    no_procs = ~no_runtime & (procs <= 0)
    keep = ~(no_runtime | no_procs)
    # submit times of the excluded jobs on the kept jobs' clock, so that a window can count its own
    submit = col["submit_time"] - rebase_origin(col["submit_time"], keep)
    exclusions: list[Exclusion] = [
        make_exclusion(reason, ids, mask, submit)
        for reason, mask in ((NO_RUNTIME, no_runtime), (NO_PROCESSORS, no_procs))
        if mask.any()
    ]
    users, qoses, vcs = CodeBook(), CodeBook(), CodeBook()
    groups, apps, queues, partitions = CodeBook(), CodeBook(), CodeBook(), CodeBook()
    req_time = col["requested_time"]
    wait = col["wait_time"]
    arrays = {
        "submit": col["submit_time"][keep],
        "runtime": col["run_time"][keep],
        "estimate": np.where(req_time > 0, req_time, np.nan)[keep],
        "gpus": procs[keep],
        "user": _names(col["user_id"][keep], users, {}, "unknown"),
        "qos": _names(col["queue"][keep], qoses, header.queues, "normal"),
        "vc": _names(col["partition"][keep], vcs, header.partitions, "default"),
        "group": _labels(col["group_id"][keep], groups, {}),
        "app": _labels(col["executable"][keep], apps, {}),
        "queue": _labels(col["queue"][keep], queues, header.queues),
        "partition": _labels(col["partition"][keep], partitions, header.partitions),
        "logged_wait": np.where(wait >= 0, wait, np.nan)[keep],
    }
    notes = [e.describe() for e in exclusions] + ["processors are scheduled as GPU slots (gpus = processors)"]
    table = assemble(
        name=src.path.name,
        path=src.path,
        sha256=src.sha256,
        ids=ids[keep],
        arrays=arrays,
        users=users.names or ["unknown"],
        vcs=vcs.names or ["default"],
        qoses=qoses.names or ["normal"],
        origin_base=header.unix_start,
        notes=notes,
        code_tables={
            "groups": groups.names,
            "apps": apps.names,
            "queues": queues.names,
            "partitions": partitions.names,
        },
    )
    return LoadedTrace(table=table, exclusions=exclusions, loader=LOADER, path=src.path)


def load_swf(path: Path) -> JobTable:
    """The usable jobs of an SWF log (plain or .gz), sorted by submit time and rebased to t = 0."""
    return parse_swf(path).table
