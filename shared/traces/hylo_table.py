"""Hylo's own job-table file (``.npz``): a ``JobTable`` written and read back without loss.

Why a format of Hylo's own: a workload rebuilt from the decisions database (``shared.retrain``)
holds what the public formats cannot: fractional GPUs (``gpu_milli``), any GPU type or set of types
per job, CPUs in milli-cores, QOS. Written as the RLTune CSV it lost them (fractions became whole
GPUs, types outside that format's five became "any type", CPUs were rounded), so a model retrained
on it was gated on another workload than the cluster's. This file keeps every column of the table.

The layout is the parsed-trace cache's (``shared.traces.cache``: the numeric columns and the ids as
arrays, the code tables and the meta as one JSON document; no pickle, so opening a file runs no
code), so there is one definition of how a ``JobTable`` is stored. ``load_trace`` reads a path
ending in ``.npz`` with this loader.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from shared.domain.jobs import JobTable
from shared.traces.cache import load_entry, save_entry
from shared.traces.errors import TraceFormatError
from shared.traces.model import LoadedTrace

__all__ = ["SUFFIX", "VERSION", "parse_hylo_table", "write_hylo_table"]

VERSION = 1
SUFFIX = ".npz"
LOADER = "hylo"


def write_hylo_table(table: JobTable, path: Path) -> None:
    """Write ``table`` to ``path`` (atomically: a temporary file renamed over it).

    The runtime predictor's columns (``DERIVED_FIELDS``) are not written: they are computed from
    the trace when a run asks for them, as for every other format."""
    if path.suffix != SUFFIX:
        raise ValueError(
            f"{path}: a Hylo job table is a {SUFFIX} file (load_trace chooses its loader by that)"
        )
    save_entry(path, LoadedTrace(table=table, loader=LOADER, path=path))


def parse_hylo_table(path: Path) -> LoadedTrace:
    """The table written by ``write_hylo_table``; ``TraceFormatError`` when the file is not one."""
    loaded = load_entry(path, path)
    if loaded is None:
        raise TraceFormatError(
            path,
            1,
            "file",
            "a Hylo job table (.npz written by write_hylo_table)",
            "another or a damaged file",
        )
    return replace(loaded, loader=LOADER, from_cache=False)
