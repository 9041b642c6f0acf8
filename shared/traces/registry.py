"""Trace names, file resolution, format detection and the one entry point ``load_trace``.

Why a registry: experiments, presets and the CLI refer to traces by short names (``philly``,
``openb``, ``hpc2n``) that must mean the same file everywhere, and a missing file must say where
the public original is obtained instead of failing with a bare ``FileNotFoundError``. Any other
value is a path, and its loader is chosen from the extension or the first line of the file.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shared.config import get_settings
from shared.traces import hylo_table, openb, philly, rltune, slurm_workload, swf
from shared.traces.cache import cached_parse
from shared.traces.errors import TraceFormatError, TraceNotFoundError
from shared.traces.model import LoadedTrace

DOCS = "docs/traces.md"


@dataclass(frozen=True)
class Loader:
    """A parser and its version (part of the cache key: bump it when the output changes)."""

    name: str
    version: int
    parse: Callable[..., LoadedTrace]


@dataclass(frozen=True)
class TraceInfo:
    """A named trace: its file under the traces folder, its loader and where to get it."""

    name: str
    relpath: str
    loader: str
    obtain: str
    options: dict[str, Any] = field(default_factory=dict)


LOADERS: dict[str, Loader] = {
    "philly": Loader("philly", philly.VERSION, philly.parse_philly),
    "openb": Loader("openb", openb.VERSION, openb.parse_openb),
    "rltune": Loader("rltune", rltune.VERSION, rltune.parse_rltune),
    "swf": Loader("swf", swf.VERSION, swf.parse_swf),
    "slurm_workload": Loader("slurm_workload", slurm_workload.VERSION, slurm_workload.parse_slurm_workload),
    "hylo": Loader("hylo", hylo_table.VERSION, hylo_table.parse_hylo_table),
}

_OPENB = "alibaba/clusterdata on GitHub, folder cluster-trace-gpu-v2023 (csv/{file})"
_RLTUNE = "the RLTune paper's code, github.com/dshruti20/RLTune, {file}"
KNOWN: dict[str, TraceInfo] = {
    info.name: info
    for info in (
        TraceInfo(
            "philly",
            "philly/pollux_philly.csv",
            "philly",
            "the Pollux artifact's Philly subset: github.com/petuum/adaptdl, branch osdi21-artifact, "
            "simulator/traces/philly.csv (derived from github.com/msr-fiddle/philly-traces)",
        ),
        TraceInfo(
            "openb",
            "alibaba/openb_pod_list_default.csv",
            "openb",
            _OPENB.format(file="openb_pod_list_default.csv"),
        ),
        TraceInfo(
            "openb-default",
            "alibaba/openb_pod_list_default.csv",
            "openb",
            _OPENB.format(file="openb_pod_list_default.csv"),
        ),
        TraceInfo(
            "openb-gpuspec33",
            "alibaba/openb_pod_list_gpuspec33.csv",
            "openb",
            _OPENB.format(file="openb_pod_list_gpuspec33.csv"),
        ),
        TraceInfo(
            "rltune-synthetic",
            "rltune/synthetic_trace.csv",
            "rltune",
            _RLTUNE.format(file="GPU_Traces/synthetic_trace.csv"),
        ),
        TraceInfo(
            "hpc2n",
            "swf/HPC2N-2002-2.2-cln.swf.gz",
            "swf",
            "the Parallel Workloads Archive (www.cs.huji.ac.il/labs/parallel/workload/), "
            "log HPC2N-2002-2.2-cln.swf.gz",
        ),
        TraceInfo(
            "slurm-256",
            "rltune/slurm_workloads_256.csv",
            "slurm_workload",
            _RLTUNE.format(file="slurm_synth_setup/workloads_256.csv (saved as slurm_workloads_256.csv)"),
        ),
    )
}


def trace_names() -> list[str]:
    """The names ``load_trace`` resolves under the traces folder (``HYLO_TRACES_DIR``)."""
    return sorted(KNOWN)


def trace_path(name: str) -> Path:
    """Where the named trace is expected (it may not exist; ``load_trace`` says how to get it)."""
    return get_settings().traces_dir / KNOWN[name].relpath


def _missing_known(info: TraceInfo, path: Path) -> TraceNotFoundError:
    folder = get_settings().traces_dir
    return TraceNotFoundError(
        f"trace {info.name!r}: file {path} does not exist. The public original is {info.obtain}. "
        f"Save it as {info.relpath} inside the traces folder and point the setting traces_dir "
        f"(environment variable HYLO_TRACES_DIR, now {folder}) at that folder; {DOCS} lists every trace."
    )


def _first_line(path: Path) -> tuple[int, str]:
    """The first line that is neither blank nor a ``;`` comment, with its 1-based number."""
    with path.open("rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as text:
            for number, line in enumerate(text, 1):
                stripped = line.strip()
                if stripped and not stripped.startswith(";"):
                    return number, stripped
                if number > 10_000:
                    break
    except (OSError, EOFError) as err:
        raise TraceFormatError(path, 1, "file", "a readable gzip stream", str(err)) from None
    return 1, ""


def detect_loader(path: Path) -> str:
    """Choose a loader from the file name (``.swf``, ``.swf.gz``, ``.npz``: Hylo's own job table)
    or from the first data line."""
    name = path.name.lower()
    if name.endswith((".swf", ".swf.gz")):
        return "swf"
    if name.endswith(hylo_table.SUFFIX):
        return "hylo"
    number, line = _first_line(path)
    columns = {c.strip() for c in line.split(",")}
    if {"timestamp", "duration", "num_gpus"} <= columns:
        return "philly"
    if {"name", "cpu_milli", "num_gpu", "gpu_milli"} <= columns:
        return "openb"
    if {"model", "GPU type", "Num of GPUs"} <= columns:
        return "slurm_workload"
    if {"sn", "cpu_milli", "gpu", "model"} <= columns:
        raise TraceFormatError(
            path, number, "header", "a job trace", "an openb node list (read it with load_openb_nodes)"
        )
    if line.count(",") == len(rltune.FIELDS) - 1:
        return "rltune"
    if len(line.split()) == len(swf.FIELDS):
        return "swf"
    known = "Philly CSV, openb pod CSV, RLTune 19-column CSV, SWF, Slurm workload CSV"
    raise TraceFormatError(path, number, "header", f"a known trace format ({known})", repr(line[:120]))


def load_trace(
    name_or_path: str | Path,
    *,
    loader: str | None = None,
    use_cache: bool | None = None,
    **options: Any,
) -> LoadedTrace:
    """Load a trace by name (``trace_names()``) or path, through the parsed-trace cache.

    ``loader`` forces a format for a path (``philly``, ``openb``, ``rltune``, ``swf``,
    ``slurm_workload``, ``hylo``); ``options`` go to the loader (e.g. ``seed`` for ``slurm-256``) and are part
    of the cache key. ``use_cache`` overrides the ``trace_cache`` setting for this call.
    """
    key = str(name_or_path)
    info = KNOWN.get(key) if isinstance(name_or_path, str) else None
    if info is not None:
        path = get_settings().traces_dir / info.relpath
        if not path.is_file():
            raise _missing_known(info, path)
        chosen = loader or info.loader
        opts = {**info.options, **options}
    else:
        path = Path(key).expanduser()
        if not path.is_file():
            folder = get_settings().traces_dir
            raise TraceNotFoundError(
                f"trace {key!r}: no such file and not a trace name (names: {', '.join(trace_names())}, "
                f"resolved under the traces folder HYLO_TRACES_DIR = {folder}); see {DOCS}"
            )
        chosen = loader or detect_loader(path)
        opts = dict(options)
    if chosen not in LOADERS:
        raise ValueError(f"unknown trace loader {chosen!r}; loaders: {', '.join(sorted(LOADERS))}")
    spec = LOADERS[chosen]
    loaded = cached_parse(path, spec.name, spec.version, spec.parse, opts, use_cache=use_cache)
    if info is not None:
        table = replace(loaded.table, meta=replace(loaded.table.meta, name=info.name))
        loaded = replace(loaded, table=table)
    return loaded
