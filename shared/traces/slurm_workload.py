"""The 256-job workload of the RLTune paper's real Slurm experiment (``slurm_workloads_256.csv``).

Header ``model,GPU type,Num of GPUs,batch_size,dataset,epochs,mode``. The file has no times, so
this loader generates them with a documented, seeded model (the paper's scripts drew arrivals
unseeded; seeding makes runs repeatable):

- arrivals: ``n`` times drawn uniformly in ``[0, span_s]`` (default 900 s, as the paper's dynamic
  submission script), sorted, and given to the jobs in file order (job ``i`` gets the ``i``-th
  smallest time), which is how ``dynamic_submit_all_jobs.sh`` turned them into ``sleep; sbatch``;
- runtime of a training row: ``epochs x seconds_per_epoch`` (default 60 s per epoch);
  an inference row (no epochs, e.g. ``facebook/opt125m``) runs ``inference_s`` (default 60 s);
- estimate: the scripts' wall-time limit ``--time=02:00:00`` (``time_limit_s`` = 7,200 s);
- CPUs: 4 per GPU (the scripts ask ``cpus-per-task = 4`` per GPU); memory not given (no ``--mem``);
- GPU type: upper-cased (``k80`` -> ``K80``), one allowed type per job; partition ``debug``.

The runtime model is deliberately simple: it preserves the ordering "more epochs take longer" and
gives a known total GPU demand; it is not a measured throughput model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.domain.jobs import CodeBook, JobTable, TypeSetBook
from shared.traces.model import LoadedTrace, assemble
from shared.traces.reading import Source, read_csv_with_header

LOADER = "slurm_workload"
VERSION = 1
FIELDS = ("model", "GPU type", "Num of GPUs", "batch_size", "dataset", "epochs", "mode")
DEFAULT_SEED = 0
DEFAULT_SPAN_S = 900.0
DEFAULT_SECONDS_PER_EPOCH = 60.0
DEFAULT_INFERENCE_S = 60.0
DEFAULT_TIME_LIMIT_S = 7200.0
CPUS_MILLI_PER_GPU = 4000


def parse_slurm_workload(
    path: Path,
    *,
    seed: int = DEFAULT_SEED,
    span_s: float = DEFAULT_SPAN_S,
    seconds_per_epoch: float = DEFAULT_SECONDS_PER_EPOCH,
    inference_s: float = DEFAULT_INFERENCE_S,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> LoadedTrace:
    """Read and validate the workload and draw its arrivals; nothing is excluded."""
    if span_s < 0 or seconds_per_epoch <= 0 or inference_s <= 0 or time_limit_s <= 0:
        raise ValueError("span_s must be >= 0; seconds_per_epoch, inference_s, time_limit_s > 0")
    src = Source.read(path)
    cols = read_csv_with_header(src, FIELDS)
    models = cols.text("model")
    gpu_types = [t.upper() for t in cols.text("GPU type")]
    gpus = cols.integers("Num of GPUs", minimum=1)
    cols.integers("batch_size", minimum=1)
    epochs = cols.numbers("epochs", integer=True, minimum=1, empty=0.0)
    n = len(cols)
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0.0, span_s, size=n))
    runtime = np.where(epochs > 0, epochs * seconds_per_epoch, inference_s)
    types = TypeSetBook()
    type_set = np.asarray([types.code((t,)) for t in gpu_types], dtype=np.int64)
    ids = np.asarray(
        [
            f"job{i}_{m.replace('/', '-')}_{g}"
            for i, (m, g) in enumerate(zip(models, gpus.tolist(), strict=True))
        ],
        dtype=np.str_,
    )
    table = assemble(
        name=src.path.name,
        path=src.path,
        sha256=src.sha256,
        ids=ids,
        arrays={
            "submit": submit,
            "runtime": runtime,
            "estimate": np.full(n, time_limit_s),
            "gpus": gpus,
            "type_set": type_set,
            "cpus_milli": gpus * CPUS_MILLI_PER_GPU,
            "vc": np.zeros(n, dtype=np.int64),
        },
        type_sets=types.sets,
        users=CodeBook("unknown").names,
        vcs=["debug"],
        notes=[
            (
                f"generated arrivals: uniform over {span_s:g} s, seed {seed}; runtime = epochs x "
                f"{seconds_per_epoch:g} s (inference rows {inference_s:g} s); estimate = {time_limit_s:g} s"
            )
        ],
    )
    return LoadedTrace(table=table, loader=LOADER, path=src.path)


def load_slurm_workload(
    path: Path,
    *,
    seed: int = DEFAULT_SEED,
    span_s: float = DEFAULT_SPAN_S,
    seconds_per_epoch: float = DEFAULT_SECONDS_PER_EPOCH,
) -> JobTable:
    """The 256 jobs with seeded arrivals; see the module docstring for the runtime model."""
    return parse_slurm_workload(path, seed=seed, span_s=span_s, seconds_per_epoch=seconds_per_epoch).table
