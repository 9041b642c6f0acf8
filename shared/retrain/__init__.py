"""Retraining inputs: the recent workload of a cluster rebuilt from the database, mixed with trace
files, split chronologically (newest part held out), and the drift statistic that triggers a run.

- ``workload.py``: jobs + outcomes of a cluster in a time range -> a ``JobTable`` (a trace);
- ``mixing.py``: trace files placed before the recorded jobs; the split that holds out recorded jobs;
- ``tracefile.py``: the rebuilt workload as a trace file the gate and ``hylo evaluate`` load
  (Hylo's own lossless job table);
- ``drift.py``: the drift statistic of the queue between the training window and the recent one.

``docs/trainer.md`` describes them.
"""

from shared.retrain.drift import DriftResult, job_samples, psi, psi_counts, queue_drift, workload_drift
from shared.retrain.mixing import mix_tables, train_fraction_for
from shared.retrain.tracefile import WORKLOAD_FILE, write_rltune_csv, write_workload
from shared.retrain.workload import (
    RebuiltWorkload,
    RecordedJob,
    fetch_recorded_jobs,
    latest_submit,
    rebuild_table,
    rebuild_workload,
)

__all__ = [
    "WORKLOAD_FILE",
    "DriftResult",
    "RebuiltWorkload",
    "RecordedJob",
    "fetch_recorded_jobs",
    "job_samples",
    "latest_submit",
    "mix_tables",
    "psi",
    "psi_counts",
    "queue_drift",
    "rebuild_table",
    "rebuild_workload",
    "train_fraction_for",
    "workload_drift",
    "write_rltune_csv",
    "write_workload",
]
