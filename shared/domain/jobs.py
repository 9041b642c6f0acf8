"""Jobs as a struct of numpy arrays.

Why arrays and not one object per job: the simulator, the policies and the featurizer all work on
the whole queue at once (vectorized keys, masks, features). A ``JobTable`` keeps every field of
every job in one contiguous array, so selecting the queued jobs is one fancy-index and computing a
policy key over 10,000 queued jobs costs microseconds, not milliseconds.

Units, everywhere in Hylo:
- times in seconds (float64), submit times rebased so that the trace starts at 0
  (``TraceMeta.origin`` keeps the original epoch or offset);
- GPUs as a whole count (``gpus``) plus a per-GPU share in milli-GPUs (``gpu_milli``: 1000 means
  whole GPUs, 1..999 a fraction of one shared GPU; only ``gpus == 1`` may be fractional);
- CPUs in milli-cores and memory in MiB (int64); ``-1`` means "not given", to be filled from the
  cluster's per-GPU defaults when the job is bound to a cluster.

Besides the fields every job has (``NUMERIC_FIELDS``), a table holds optional columns
(``OPTIONAL_FIELDS``) that only some traces carry: the submitter's group, the application
(executable), the trace's own queue and partition labels, and the wait the trace logged. Why they
are separate: the scheduler never needs them, but a runtime predictor (``shared.prediction``) learns
from them, and a trace that lacks one must say "not given" rather than invent a value. A missing
value is ``UNKNOWN`` (-1) in a code column and NaN in ``logged_wait``; a loader that has no such
column leaves it out and the table fills it with that marker. Three optional columns are derived,
not loaded (``DERIVED_FIELDS``): the runtime predictor's prediction and its band, which
predictor-based policies (``sjf-pred``, ``small-first``, ...) order by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

WHOLE_GPU_MILLI = 1000
UNKNOWN = -1

# Field name -> numpy dtype, in a fixed order. The single source of truth for what a job holds.
NUMERIC_FIELDS: dict[str, type[np.generic]] = {
    "submit": np.float64,  # seconds since trace start
    "runtime": np.float64,  # true runtime, seconds (what the simulator uses to end a job)
    "estimate": np.float64,  # requested runtime / user estimate, seconds; NaN = not given
    "gpus": np.int64,  # whole GPUs requested (1 for a fractional job)
    "gpu_milli": np.int64,  # per-GPU share in milli-GPUs, 1000 = whole GPU
    "type_set": np.int64,  # index into JobTable.type_sets (allowed GPU types)
    "cpus_milli": np.int64,  # requested CPUs in milli-cores, -1 = not given
    "mem_mib": np.int64,  # requested memory in MiB, -1 = not given
    "user": np.int64,  # index into JobTable.users
    "vc": np.int64,  # virtual cluster / partition, index into JobTable.vcs
    "qos": np.int64,  # index into JobTable.qoses
}

# Optional field name -> (numpy dtype, missing marker); the code columns index the code table named
# in OPTIONAL_CODE_TABLES. ``queue``/``partition`` are the trace's raw labels (-1 = the trace does not
# say), next to ``qos``/``vc``, the scheduling view of the same labels with neutral names filled in.
OPTIONAL_FIELDS: dict[str, tuple[type[np.generic], float]] = {
    "group": (np.int64, UNKNOWN),  # the submitter's group, index into JobTable.groups
    "app": (np.int64, UNKNOWN),  # application / executable, index into JobTable.apps
    "queue": (np.int64, UNKNOWN),  # the trace's queue, index into JobTable.queues
    "partition": (np.int64, UNKNOWN),  # the trace's partition, index into JobTable.partitions
    "logged_wait": (np.float64, np.nan),  # wait logged in the trace (s), NaN = not in the trace
    "predicted": (np.float64, np.nan),  # predicted runtime (s), shared.prediction; NaN = none
    "predicted_lo": (np.float64, np.nan),  # low end of the prediction's band (s)
    "predicted_hi": (np.float64, np.nan),  # high end of the prediction's band (s)
}
#: optional columns that no trace loader fills: ``shared.prediction.attach_predictions`` computes
#: them from the trace (online, leak-free), so the trace cache does not store them
DERIVED_FIELDS: tuple[str, ...] = ("predicted", "predicted_lo", "predicted_hi")
OPTIONAL_CODE_TABLES: dict[str, str] = {
    "group": "groups",
    "app": "apps",
    "queue": "queues",
    "partition": "partitions",
}


def _not_given_int() -> IntArray:
    return np.zeros(0, dtype=np.int64)


def _not_given_float() -> FloatArray:
    return np.zeros(0, dtype=np.float64)


@dataclass(frozen=True)
class TraceMeta:
    """Where a table of jobs came from, so a result can always be traced back to its input."""

    name: str
    source: str = ""
    origin: float = 0.0  # original timestamp of t = 0 (epoch seconds or the trace's own origin)
    has_estimates: bool = False  # True when the trace carries user runtime estimates
    sha256: str = ""
    notes: tuple[str, ...] = ()


@dataclass
class JobTable:
    """All jobs of a trace or workload, one array per field, sorted by submit time.

    ``type_sets[k]`` is the tuple of GPU types allowed for jobs with ``type_set == k``; the empty
    tuple means "any GPU type". Code tables (``users``, ``vcs``, ``qoses``) map the integer codes
    back to the names that appeared in the trace.

    The optional columns (``OPTIONAL_FIELDS``) may be omitted; an omitted one (an empty array) is
    filled with its missing marker, so every column always has one value per job.
    """

    ids: npt.NDArray[np.str_]
    submit: FloatArray
    runtime: FloatArray
    estimate: FloatArray
    gpus: IntArray
    gpu_milli: IntArray
    type_set: IntArray
    cpus_milli: IntArray
    mem_mib: IntArray
    user: IntArray
    vc: IntArray
    qos: IntArray
    type_sets: list[tuple[str, ...]] = field(default_factory=lambda: [()])
    users: list[str] = field(default_factory=lambda: ["default"])
    vcs: list[str] = field(default_factory=lambda: ["default"])
    qoses: list[str] = field(default_factory=lambda: ["normal"])
    meta: TraceMeta = field(default_factory=lambda: TraceMeta(name="unnamed"))
    group: IntArray = field(default_factory=_not_given_int)
    app: IntArray = field(default_factory=_not_given_int)
    queue: IntArray = field(default_factory=_not_given_int)
    partition: IntArray = field(default_factory=_not_given_int)
    logged_wait: FloatArray = field(default_factory=_not_given_float)
    predicted: FloatArray = field(default_factory=_not_given_float)
    predicted_lo: FloatArray = field(default_factory=_not_given_float)
    predicted_hi: FloatArray = field(default_factory=_not_given_float)
    groups: list[str] = field(default_factory=list)
    apps: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name, (dtype, missing) in OPTIONAL_FIELDS.items():
            if len(getattr(self, name)) == 0 and n > 0:
                setattr(self, name, np.full(n, missing, dtype=dtype))
        for name in (*NUMERIC_FIELDS, *OPTIONAL_FIELDS):
            arr = getattr(self, name)
            if len(arr) != n:
                raise ValueError(f"JobTable field {name!r} has {len(arr)} values, expected {n}")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def gpu_demand(self) -> FloatArray:
        """GPUs used while running, counting a fractional share as its fraction."""
        return self.gpus * (self.gpu_milli / WHOLE_GPU_MILLI)

    def take(self, index: npt.ArrayLike) -> JobTable:
        """A new table holding the selected rows (code tables are shared, not copied)."""
        idx = np.asarray(index)
        names = (*NUMERIC_FIELDS, *OPTIONAL_FIELDS)
        fields: dict[str, Any] = {name: getattr(self, name)[idx] for name in names}
        return replace(self, ids=self.ids[idx], **fields)

    def with_fields(self, **arrays: npt.NDArray[Any]) -> JobTable:
        """A copy with some numeric or optional fields replaced (for example estimates filled in)."""
        unknown = set(arrays) - set(NUMERIC_FIELDS) - set(OPTIONAL_FIELDS)
        if unknown:
            raise KeyError(f"unknown JobTable fields: {sorted(unknown)}")
        fields: dict[str, Any] = dict(arrays)
        return replace(self, **fields)

    def sorted_by_submit(self) -> JobTable:
        """Stable sort by submit time: the order every simulator and window relies on."""
        order = np.argsort(self.submit, kind="stable")
        if np.all(order == np.arange(len(order))):
            return self
        return self.take(order)

    def rebased(self) -> tuple[JobTable, float]:
        """Shift submit times so that the first job arrives at t = 0; returns (table, offset)."""
        if len(self) == 0:
            return self, 0.0
        offset = float(self.submit.min())
        return self.with_fields(submit=self.submit - offset), offset

    def type_names(self, k: int) -> tuple[str, ...]:
        return self.type_sets[k]

    def label(self, column: str, i: int) -> str | None:
        """The name job ``i`` has in an optional code column (``group``, ``app``, ``queue``,
        ``partition``), or None where the trace does not give it."""
        code = int(getattr(self, column)[i])
        if code == UNKNOWN:
            return None
        names: list[str] = getattr(self, OPTIONAL_CODE_TABLES[column])
        return names[code]

    def has_column(self, column: str) -> bool:
        """True when at least one job has a value in the optional ``column`` (not all missing)."""
        values = getattr(self, column)
        _, missing = OPTIONAL_FIELDS[column]
        return bool(np.isfinite(values).any() if np.isnan(missing) else (values != missing).any())


def empty_table(meta: TraceMeta | None = None) -> JobTable:
    """A table with no jobs, useful as a neutral element in tests and filters."""
    arrays: dict[str, Any] = {name: np.zeros(0, dtype=dt) for name, dt in NUMERIC_FIELDS.items()}
    return JobTable(ids=np.zeros(0, dtype=np.str_), meta=meta or TraceMeta(name="empty"), **arrays)


class CodeBook:
    """Interns strings (users, VCs, QOS names, GPU-type sets) into dense integer codes."""

    def __init__(self, first: str | None = None) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        if first is not None:
            self.code(first)

    def code(self, name: str) -> int:
        k = self._index.get(name)
        if k is None:
            k = len(self.names)
            self._index[name] = k
            self.names.append(name)
        return k


class TypeSetBook:
    """Interns allowed-GPU-type sets; code 0 is always "any type"."""

    def __init__(self) -> None:
        self.sets: list[tuple[str, ...]] = [()]
        self._index: dict[tuple[str, ...], int] = {(): 0}

    def code(self, types: tuple[str, ...] | list[str] | set[str]) -> int:
        key = tuple(sorted(set(types)))
        k = self._index.get(key)
        if k is None:
            k = len(self.sets)
            self._index[key] = k
            self.sets.append(key)
        return k


#: a column given to ``build_table``: a list, or an array (taken as it is, no per-item copy)
Column = Sequence[Any] | npt.NDArray[Any]


def build_table(
    *,
    ids: Column,
    submit: Column,
    runtime: Column,
    estimate: Column | None = None,
    gpus: Column,
    gpu_milli: Column | None = None,
    type_set: Column | None = None,
    cpus_milli: Column | None = None,
    mem_mib: Column | None = None,
    user: Column | None = None,
    vc: Column | None = None,
    qos: Column | None = None,
    type_sets: list[tuple[str, ...]] | None = None,
    users: list[str] | None = None,
    vcs: list[str] | None = None,
    qoses: list[str] | None = None,
    meta: TraceMeta | None = None,
    optional: dict[str, list[Any]] | None = None,
    code_tables: dict[str, list[str]] | None = None,
) -> JobTable:
    """Build a submit-sorted JobTable from plain lists; omitted fields take neutral defaults.

    ``optional`` holds optional columns by name (``OPTIONAL_FIELDS``, e.g. ``{"group": [0, -1]}``)
    and ``code_tables`` their names (e.g. ``{"groups": ["g1"]}``); omitted ones are "not given".
    """
    n = len(ids)
    extra: dict[str, Any] = {
        name: np.asarray(values, dtype=OPTIONAL_FIELDS[name][0]) for name, values in (optional or {}).items()
    }
    extra.update({name: list(names) for name, names in (code_tables or {}).items()})

    def arr(values: Column | None, dtype: type[np.generic], default: float) -> npt.NDArray[Any]:
        if values is None:
            return np.full(n, default, dtype=dtype)
        return np.asarray(values, dtype=dtype)

    table = JobTable(
        ids=np.asarray(ids, dtype=np.str_),
        submit=arr(submit, np.float64, 0.0),
        runtime=arr(runtime, np.float64, 0.0),
        estimate=arr(estimate, np.float64, np.nan),
        gpus=arr(gpus, np.int64, 0),
        gpu_milli=arr(gpu_milli, np.int64, WHOLE_GPU_MILLI),
        type_set=arr(type_set, np.int64, 0),
        cpus_milli=arr(cpus_milli, np.int64, UNKNOWN),
        mem_mib=arr(mem_mib, np.int64, UNKNOWN),
        user=arr(user, np.int64, 0),
        vc=arr(vc, np.int64, 0),
        qos=arr(qos, np.int64, 0),
        type_sets=type_sets if type_sets is not None else [()],
        users=users if users is not None else ["default"],
        vcs=vcs if vcs is not None else ["default"],
        qoses=qoses if qoses is not None else ["normal"],
        meta=meta or TraceMeta(name="jobs"),
        **extra,
    )
    return table.sorted_by_submit()
