"""Alibaba GPU cluster trace 2023 ("openb", alibaba/clusterdata ``cluster-trace-gpu-v2023``).

Pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time`` (times in seconds from the trace start).

Mapping:

- ``submit`` = ``creation_time``; ``runtime`` = ``deletion_time - scheduled_time``. Pods still
  running when the trace was taken have ``deletion_time`` at the trace end, so their runtime is
  cut there (right-censored), as in the original.
- ``num_gpu == 1`` and ``gpu_milli < 1000``: a share of one GPU (``gpus = 1``,
  ``gpu_milli`` = the share); ``num_gpu > 1``: whole GPUs (``gpu_milli = 1000``); ``num_gpu == 0``:
  a CPU-only pod (``gpus = 0``).
- ``gpu_spec``: ``|``-separated allowed GPU models (duplicates removed), empty = any model.
- ``qos`` -> ``qos``; ``cpu_milli``/``memory_mib`` -> ``cpus_milli``/``mem_mib``; no user or VC.
- ``logged_wait`` = ``scheduled_time - creation_time`` (the wait in the original cluster), so that
  a pod's logged finish (creation + wait + runtime = deletion) is known to the runtime predictor.

Excluded (counted, not silently dropped): pods with an empty ``scheduled_time``. They never ran in
the real cluster (all are ``Pending`` at the end of the trace), so they have no runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, CodeBook, JobTable, TypeSetBook
from shared.traces.errors import TraceFormatError
from shared.traces.model import Exclusion, LoadedTrace, assemble, make_exclusion, rebase_origin
from shared.traces.reading import Source, read_csv_with_header

LOADER = "openb"
# 2: excluded rows keep their submit times (per-window excluded counts); 3: logged_wait kept
VERSION = 3
POD_FIELDS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_FIELDS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
NEVER_SCHEDULED = "never scheduled in the original cluster (empty scheduled_time, no runtime)"


@dataclass(frozen=True)
class NodeGroupRow:
    """Identical openb nodes: ``count`` nodes with this model, GPUs, CPUs (milli) and memory (MiB).

    Iterable, so ``model, gpus, cpu_milli, memory_mib, count = row`` works.
    """

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    count: int

    def __iter__(self) -> Iterator[str | int]:
        return iter((self.model, self.gpus, self.cpu_milli, self.memory_mib, self.count))


def _type_sets(specs: list[str]) -> tuple[np.ndarray[tuple[int], np.dtype[np.int64]], list[tuple[str, ...]]]:
    book = TypeSetBook()
    cache: dict[str, int] = {}
    codes = np.empty(len(specs), dtype=np.int64)
    for i, spec in enumerate(specs):
        k = cache.get(spec)
        if k is None:
            k = book.code([t.strip() for t in spec.split("|") if t.strip()])
            cache[spec] = k
        codes[i] = k
    return codes, book.sets


def parse_openb(path: Path) -> LoadedTrace:
    """Read and validate every pod; pods that never ran are returned as an exclusion."""
    src = Source.read(path)
    cols = read_csv_with_header(src, POD_FIELDS)
    names = np.asarray(cols.text("name"), dtype=np.str_)
    cpu = cols.integers("cpu_milli")
    mem = cols.integers("memory_mib")
    num_gpu = cols.integers("num_gpu")
    milli = cols.integers("gpu_milli")
    over = milli > WHOLE_GPU_MILLI
    if over.any():
        raise cols.error("gpu_milli", int(np.argmax(over)), f"a GPU share 0..{WHOLE_GPU_MILLI}")
    no_share = (num_gpu > 0) & (milli == 0)
    if no_share.any():
        raise cols.error("gpu_milli", int(np.argmax(no_share)), "a GPU share 1..1000 for a pod with GPUs")
    qos_names = cols.text("qos")
    cols.text("pod_phase")
    creation = cols.numbers("creation_time", integer=True)
    deletion = cols.numbers("deletion_time", integer=True)
    sched_raw = cols.text("scheduled_time", required=False)
    never = np.asarray([v == "" for v in sched_raw], dtype=bool)
    scheduled = cols.numbers("scheduled_time", integer=True, empty=-1.0)
    early = ~never & (scheduled < creation)
    if early.any():
        i = int(np.argmax(early))
        raise cols.error("scheduled_time", i, f"a time >= creation_time ({creation[i]:g})")
    late = ~never & (deletion < scheduled)
    if late.any():
        i = int(np.argmax(late))
        raise cols.error("deletion_time", i, f"a time >= scheduled_time ({scheduled[i]:g})")

    type_set, type_sets = _type_sets(cols.text("gpu_spec", required=False))
    qoses = CodeBook()
    qos = np.fromiter((qoses.code(q) for q in qos_names), dtype=np.int64, count=len(cols))
    keep = ~never
    exclusions: list[Exclusion] = []
    if never.any():
        # their creation times on the kept pods' clock, so that a window can count its own
        origin = rebase_origin(creation, keep)
        exclusions.append(make_exclusion(NEVER_SCHEDULED, names, never, creation - origin))
    arrays = {
        "submit": creation[keep],
        "runtime": (deletion - scheduled)[keep],
        "gpus": num_gpu[keep],
        "gpu_milli": np.where(num_gpu == 1, milli, WHOLE_GPU_MILLI)[keep],
        "type_set": type_set[keep],
        "cpus_milli": cpu[keep],
        "mem_mib": mem[keep],
        "qos": qos[keep],
        "logged_wait": (scheduled - creation)[keep],
    }
    table = assemble(
        name=src.path.name,
        path=src.path,
        sha256=src.sha256,
        ids=names[keep],
        arrays=arrays,
        type_sets=type_sets,
        qoses=qoses.names,
        notes=[e.describe() for e in exclusions]
        + ["runtimes of pods running at the trace end are cut at the trace end"],
    )
    return LoadedTrace(table=table, exclusions=exclusions, loader=LOADER, path=src.path)


def load_openb(path: Path) -> JobTable:
    """The openb pods that ran, sorted by creation time; see ``parse_openb`` for the exclusions."""
    return parse_openb(path).table


def load_openb_nodes(path: Path) -> list[NodeGroupRow]:
    """The node list grouped by identical (model, GPUs, CPU milli, memory MiB), largest groups first.

    Why groups: a cluster spec describes identical nodes once with a count (1,213 nodes become
    15 groups), which is what ``shared/presets/alibaba-openb.toml`` holds.
    """
    src = Source.read(path)
    cols = read_csv_with_header(src, NODE_FIELDS)
    cols.text("sn")
    cpu = cols.integers("cpu_milli", minimum=1)
    mem = cols.integers("memory_mib", minimum=1)
    gpus = cols.integers("gpu")
    models = cols.text("model")
    counts: dict[tuple[str, int, int, int], int] = {}
    for key in zip(models, gpus.tolist(), cpu.tolist(), mem.tolist(), strict=True):
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        raise TraceFormatError(src.path, 2, "row", "at least one node", "no rows")
    groups = [NodeGroupRow(m, g, c, mm, n) for (m, g, c, mm), n in counts.items()]
    return sorted(groups, key=lambda r: (-r.count, r.model, r.gpus, r.cpu_milli, r.memory_mib))
