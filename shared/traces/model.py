"""What a loader returns: the jobs, plus the rows that were read but could not be used.

Why exclusions are first-class: a scheduler study that silently loses 11% of a trace (for example
the Alibaba pods that were never scheduled) reports numbers nobody can reproduce. Loaders therefore
never drop a well-formed row quietly; they count it under a reason, keep a few example ids, and the
reason also goes into ``TraceMeta.notes`` so it travels with the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.domain.exclusions import Exclusion
from shared.domain.jobs import NUMERIC_FIELDS, OPTIONAL_FIELDS, JobTable, TraceMeta

__all__ = ["Exclusion", "LoadedTrace", "assemble", "make_exclusion", "rebase_origin"]

MAX_EXAMPLES = 5


@dataclass(frozen=True)
class LoadedTrace:
    """A parsed trace: the usable jobs (sorted, rebased) and what was left out and why."""

    table: JobTable
    exclusions: list[Exclusion] = field(default_factory=list)
    loader: str = ""
    path: Path | None = None
    from_cache: bool = False

    @property
    def excluded_count(self) -> int:
        return sum(e.count for e in self.exclusions)


def make_exclusion(
    reason: str,
    ids: npt.NDArray[Any] | list[str],
    mask: npt.NDArray[np.bool_],
    submit: npt.NDArray[np.float64] | None = None,
) -> Exclusion:
    """Count the rows selected by ``mask`` under ``reason``, keeping the first few ids as examples
    and, given ``submit`` (every row's submit time on the kept jobs' clock), their submit times."""
    picked = np.flatnonzero(mask)
    examples = [str(ids[i]) for i in picked[:MAX_EXAMPLES]]
    times = tuple(np.asarray(submit, dtype=np.float64)[picked].tolist()) if submit is not None else ()
    return Exclusion(reason=reason, count=len(picked), example_ids=examples, submit_s=times)


def rebase_origin(submit: npt.NDArray[Any], keep: npt.NDArray[np.bool_]) -> float:
    """The time that ``assemble`` rebases to 0: the first submit of the kept rows (0 if none)."""
    kept = np.asarray(submit, dtype=np.float64)[keep]
    return float(kept.min()) if len(kept) else 0.0


def assemble(
    *,
    name: str,
    path: Path,
    sha256: str,
    ids: npt.NDArray[np.str_],
    arrays: dict[str, npt.NDArray[Any]],
    type_sets: list[tuple[str, ...]] | None = None,
    users: list[str] | None = None,
    vcs: list[str] | None = None,
    qoses: list[str] | None = None,
    origin_base: float = 0.0,
    notes: list[str] | None = None,
    code_tables: dict[str, list[str]] | None = None,
) -> JobTable:
    """Build the final table: fill neutral defaults, sort by submit (stable), rebase to t = 0.

    ``arrays`` holds the numeric fields in file order, and any optional ones the trace has
    (``OPTIONAL_FIELDS``: group, app, queue, partition, logged_wait, with their code tables in
    ``code_tables``, e.g. ``{"groups": [...]}``); missing ones take the "not given" value.
    ``origin_base`` is the absolute time of submit = 0 in the file (the SWF UnixStartTime, or 0
    for files that already hold epoch seconds); the table's ``TraceMeta.origin`` becomes
    ``origin_base`` plus the first submit, i.e. the absolute time of the rebased t = 0.
    """
    n = len(ids)
    defaults: dict[str, float] = {"estimate": np.nan, "gpu_milli": 1000, "cpus_milli": -1, "mem_mib": -1}
    fields: dict[str, npt.NDArray[Any]] = {}
    for fname, dtype in NUMERIC_FIELDS.items():
        if fname in arrays:
            fields[fname] = np.asarray(arrays[fname], dtype=dtype)
        else:
            fields[fname] = np.full(n, defaults.get(fname, 0), dtype=dtype)
    for fname, (dtype, missing) in OPTIONAL_FIELDS.items():
        fields[fname] = (
            np.asarray(arrays[fname], dtype=dtype) if fname in arrays else np.full(n, missing, dtype)
        )
    order = np.argsort(fields["submit"], kind="stable")
    offset = float(fields["submit"][order[0]]) if n else 0.0
    fields = {k: v[order] for k, v in fields.items()}
    fields["submit"] = fields["submit"] - offset
    has_estimates = bool(np.isfinite(fields["estimate"]).any())
    meta = TraceMeta(
        name=name,
        source=str(path),
        origin=origin_base + offset,
        has_estimates=has_estimates,
        sha256=sha256,
        notes=tuple(notes or ()),
    )
    columns: dict[str, Any] = {**fields, **{name: list(v) for name, v in (code_tables or {}).items()}}
    return JobTable(
        ids=np.asarray(ids)[order],
        type_sets=type_sets if type_sets is not None else [()],
        users=users if users is not None else ["unknown"],
        vcs=vcs if vcs is not None else ["default"],
        qoses=qoses if qoses is not None else ["normal"],
        meta=meta,
        **columns,
    )
