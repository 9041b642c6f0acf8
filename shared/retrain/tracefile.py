"""Writing a rebuilt workload as a trace file the rest of Hylo loads by path.

Why a file: the promotion gate (``shared.registry``) and ``hylo evaluate`` find a model's workload
from its card (``training.trace``: a trace name or path) and load it with ``load_trace``. A model
fine-tuned on a rebuilt workload therefore trains on the file it records, so the gate replays
exactly the jobs it was trained on, and its held-out windows are the newest part of that file.

``write_workload`` writes Hylo's own job table (``shared.traces.hylo_table``, ``.npz``): every column
of the ``JobTable`` as it is, fractional GPUs, GPU types, CPUs, memory and QOS included. The trainer
uses it. (It used to write the RLTune CSV, which turned fractional GPUs into whole ones and GPU types
outside its five into "any type": the candidate was then trained and gated on another workload than
the cluster's.)

``write_rltune_csv`` still writes that 19-column CSV, for tools that read RLTune's format; what it
cannot hold, it reports, one note per loss (with the count of jobs):

- fractional GPUs (``gpu_milli`` < 1000): written as one whole GPU;
- QOS: not written (every job ``normal``);
- GPU types other than the five of that format (T4, MISC, P100, V100M16, V100M32), or more than one
  allowed type: written as "any type";
- CPUs are whole cores in the format: milli-cores are rounded.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, JobTable
from shared.traces.hylo_table import write_hylo_table
from shared.traces.rltune import FIELDS, GPU_TYPE_NAMES

__all__ = ["WORKLOAD_FILE", "write_rltune_csv", "write_workload"]

#: the rebuilt workload's file name in a retraining run's folder
WORKLOAD_FILE = "workload.npz"

_FORBIDDEN = (",", '"', "\n", "\r", ";")


def _text(value: str, what: str, row: int) -> str:
    if not value or any(c in value for c in _FORBIDDEN) or value != value.strip():
        raise ValueError(
            f"job {row}: {what} {value!r} cannot be written to a CSV trace "
            "(expected non-empty text without commas, quotes, semicolons, line breaks or edge spaces)"
        )
    return value


def write_workload(table: JobTable, path: Path) -> None:
    """Write ``table`` losslessly (``shared.traces.hylo_table``); ``load_trace(path)`` reads it back."""
    write_hylo_table(table, path)


def write_rltune_csv(table: JobTable, path: Path) -> list[str]:
    """Write ``table`` in the RLTune 19-column format; returns notes on what the format lost."""
    code_of = {name: k for k, name in enumerate(GPU_TYPE_NAMES)}
    lost_fraction = int(np.sum(table.gpu_milli < WHOLE_GPU_MILLI))
    lost_qos = int(np.sum(np.asarray([table.qoses[q] != "normal" for q in table.qos], dtype=bool)))
    lost_types = 0
    rounded_cpus = 0
    rows: list[list[str]] = []
    for i in range(len(table)):
        allowed = table.type_sets[int(table.type_set[i])]
        if len(allowed) == 1 and allowed[0] in code_of:
            type_code = code_of[allowed[0]]
        else:
            type_code = -1
            lost_types += bool(allowed)
        cpus = int(table.cpus_milli[i])
        if cpus >= 0 and cpus % 1000:
            rounded_cpus += 1
        estimate = float(table.estimate[i])
        row = {
            "job_id": _text(str(table.ids[i]), "job id", i),
            "submit_time": repr(float(table.submit[i])),
            "wait_time": "-1",
            "run_time": repr(float(table.runtime[i])),
            "num_gpus": str(int(table.gpus[i])),
            "avg_cpu_time": "-1",
            "used_memory": "-1",
            "requested_cpus": "-1" if cpus < 0 else str(round(cpus / 1000)),
            "requested_time": "-1" if not math.isfinite(estimate) else repr(estimate),
            "requested_memory": str(int(table.mem_mib[i])),
            "status": "1",
            "user_id": _text(table.users[int(table.user[i])], "user", i),
            "group_id": "-1",
            "executable": "-1",
            "queue": "-1",
            "partition": "-1",
            "preceding_job": "-1",
            "vc_id": _text(table.vcs[int(table.vc[i])], "partition", i),
            "gpu_type": str(type_code),
        }
        rows.append([row[name] for name in FIELDS])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as handle:
        handle.write(f"; {table.meta.name}: {len(table)} jobs rebuilt by shared.retrain (RLTune format)\n")
        csv.writer(handle, lineterminator="\n").writerows(rows)
    tmp.replace(path)
    notes = []
    for count, what in (
        (lost_fraction, "fractional GPU requests written as one whole GPU"),
        (lost_qos, "QOS other than 'normal' dropped"),
        (lost_types, f"GPU types outside {'/'.join(GPU_TYPE_NAMES)} (or several) written as any type"),
        (rounded_cpus, "CPU requests rounded to whole cores"),
    ):
        if count:
            notes.append(f"{count} job(s): {what}")
    return notes
