"""The end-to-end Slurm experiment (issues 6 and 23): the RLTune paper's section 5.6 at small scale.

    .venv/bin/python bench/slurm_experiment.py --repeats 3              # 3 arms x 3 draws (~60 min)
    .venv/bin/python bench/slurm_experiment.py --repeats 3 --model CHECKPOINT
    .venv/bin/python bench/slurm_experiment.py --seconds-per-epoch 16   # jobs (and arrivals) 4x longer
    .venv/bin/python bench/slurm_experiment.py --arms hylo --jobs 40 --placement best-fit  # time to priority
    .venv/bin/python bench/slurm_experiment.py --from-json bench/results/slurm_experiment_repeated.json

What it does, in order (root is needed, as for ``deploy/slurm-dev/up``):

1. **Workload.** Rows of ``rltune/slurm_workloads_256.csv`` (``HYLO_TRACES_DIR``; default the last
   100 rows, 156-255, which ``hylo train --train-fraction 0.6`` never sees), each turned into a sleep
   job: ``sbatch -p gpu --gres=gpu:<type>:<n> -n 1 -c <4 n> --time=<limit> --wrap 'sleep <runtime>'``.
   Runtime = epochs (1 for inference rows) x ``--seconds-per-epoch`` (default 4 s: the trace loader's
   60 s per epoch compressed 15 x). Arrivals: uniform over ``[0, span]``, drawn with the repetition's
   seed (``--seed`` + repetition - 1, or ``--seeds``), sorted and given to the rows in file order (as
   the trace loader does); the span keeps the loader's arrival rate (256 jobs in 900 s) compressed by
   the same factor, so the jobs arrive as a burst and a queue builds, as in the paper. Time limit:
   ``epochs`` minutes (``--time-limits epochs``, the job's length at the trace's uncompressed scale)
   or 1 minute for all (``flat``). Partition: ``gpu`` for every job, or with ``--partitions
   per-type`` one partition per GPU type, added to the scratch cluster's ``slurm.conf`` after ``up``.
2. **The decisions database.** One per invocation (``--store postgres``, default: a database with a
   unique name on ``--pg-admin-url``, the machine's server; ``--store sqlite``: a file), migrated by
   ``python -m shared.store.migrate`` as its own process, as the product does, dropped at the end
   (``--keep-database`` keeps it); ``bench/support/slurm_store.py``.
3. **Repetitions x arms.** For each repetition (a new arrival draw), each arm on a fresh cluster
   (``deploy/slurm-dev/up``, testbed layout: 2 x 4 P100, 2 x 2 K80, 1 x 1 M40; EASY backfill), with
   Hylo's services started as separate processes beside it (nats-server on a free loopback port;
   ``featurizer``, ``prioritizer``, ``placer`` and ``adapter_slurm``, each ``python -m
   services.<name>`` configured by ``HYLO_*`` only, recording into the database under a cluster
   name of the run's own):
   - ``slurm``: multifactor with equal weights (``up``'s default); Hylo only observes
     (``HYLO_SLURM_DRY_RUN``: it polls, decides and records, and writes nothing to Slurm);
   - ``slurm-tuned``: multifactor with the weights an admin would choose, picked in Hylo's simulator
     on other rows (``--tune-rows``, default 0-155; ``bench/support/multifactor_tuning.py``) or given
     (``--tuned-weights``), on a cluster with accounting (``up --accounting``: slurmctld ignores the
     age weight without slurmdbd); Hylo observes;
   - ``hylo``: Hylo decides (``--base-policy``, or ``--model``): the adapter polls every
     ``--poll-interval`` s and on slurmctld's push events, manages partition ``gpu`` and writes
     priorities 10,000-1,000,000, above multifactor's.
   ``--no-observe`` runs the multifactor arms without Hylo (per-job figures from the completion file).
4. **Metrics** from every job's ``outcomes`` row in the database (submit, start, end, nodes; Slurm's
   whole seconds), checked against Slurm's job completion file: makespan = last end - first submit;
   wait = start - submit; GPU utilization = sum(GPUs x (end - start)) / (13 GPUs x makespan); the
   makespan's lower bound (``bench/support/slurm_summary.py``) and the gap to it. A monitor thread
   runs ``squeue`` every ``--monitor-interval`` s (0.25) for the queue-length timeline, and a second
   one reads the pending jobs' priorities every ``--priority-interval`` s (0.02): in the Hylo arm,
   the first moment each job shows a priority in Hylo's band; time to priority = that moment - the
   moment ``sbatch`` returned (resolution: the time between two reads, ``priority_sample_gap_*``).
   The adapter's timing lines (``HYLO_SLURM_TIMING_LOG``) split that time by hop
   (``bench/support/slurm_path.py``). ``--service-env HYLO_X=Y`` passes a setting to every service.
5. **Summary**: per arm, mean, min-max and 95% CI over repetitions; paired changes between arms.

Writes ``bench/results/slurm_experiment_repeated.json`` (setup, seeds, tuning, every run's per-job
records, timeline, metrics, the summary; rewritten after every run, so a stopped experiment keeps
its runs) and ``docs/results/slurm-experiment-repeated.png``, and prints the tables. Discussion:
``docs/results/slurm-experiment.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support.multifactor_tuning import SlurmWeights, parse_weights, tune  # noqa: E402
from bench.support.slurm_path import job_paths, profile, profile_table  # noqa: E402
from bench.support.slurm_store import DEFAULT_ADMIN_URL, ExperimentStore, StoreError  # noqa: E402
from bench.support.slurm_summary import (  # noqa: E402
    ARMS,
    makespan_lower_bound,
    plot_repeated,
    summarize,
    summary_table,
)
from services.adapter_sim.stack import PIPELINE, LocalStack  # noqa: E402

TRACE_FILE = "rltune/slurm_workloads_256.csv"
#: the trace loader's arrival model (shared.traces.slurm_workload): 256 jobs uniform over 900 s
LOADER_SPAN_S = 900.0
LOADER_JOBS = 256
LOADER_SECONDS_PER_EPOCH = 60.0
#: longest wait, after the last job ended, for every job's outcome row in the database
OUTCOME_WAIT_S = 90.0
CPUS_PER_GPU = 4
PARTITION = "gpu"
CLUSTER = "slurmexp"
#: Hylo's priority band in this experiment: far above multifactor's values (about 1,000-4,000 with
#: the weights of deploy/slurm-dev), so a priority >= BAND_BOTTOM is one Hylo wrote
BAND_TOP = 1_000_000
BAND_BOTTOM = 10_000
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
#: the testbed layout: GPUs per node and nodes per type (nodes are named <type>-<i> by up)
NODE_GPUS = {"p100": 4, "k80": 2, "m40": 1}
TESTBED_NODES = {"p100": 2, "k80": 2, "m40": 1}
PAPER = {"makespan": -24.8, "mean_wait": -30.5, "utilization": +3.9}


# -- workload ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    index: int  # row of the trace (0-based, after the header)
    name: str
    gpu_type: str  # Slurm's spelling: p100, k80, m40
    gpus: int
    epochs: int
    runtime_s: int
    time_limit_min: int
    arrival_s: float
    partition: str = PARTITION

    def sbatch_argv(self) -> list[str]:
        return [
            "sbatch",
            "--parsable",
            "-p",
            self.partition,
            "-J",
            self.name,
            f"--gres=gpu:{self.gpu_type}:{self.gpus}",
            "-n",
            "1",
            "-c",
            str(CPUS_PER_GPU * self.gpus),
            f"--time={self.time_limit_min}",
            "-o",
            "/dev/null",
            "-e",
            "/dev/null",
            "--wrap",
            f"sleep {self.runtime_s}",
        ]


def parse_rows(spec: str, total: int) -> range:
    """``'156:'``, ``'0:60'`` -> a range of row indices (Python slice notation, no step)."""
    start_s, _, stop_s = spec.partition(":")
    start = int(start_s) if start_s else 0
    stop = int(stop_s) if stop_s else total
    if not 0 <= start < stop <= total:
        raise SystemExit(f"--rows {spec!r}: expected START:STOP within 0..{total}")
    return range(start, stop)


def build_workload(
    trace: Path,
    rows: str,
    jobs: int | None,
    seed: int,
    seconds_per_epoch: float,
    time_limits: str,
    partitions: str = "one",
) -> list[Job]:
    with trace.open(newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    picked = list(parse_rows(rows, len(table)))
    if jobs is not None:
        picked = picked[:jobs]
    n = len(picked)
    compress = seconds_per_epoch / LOADER_SECONDS_PER_EPOCH
    span = LOADER_SPAN_S * n / LOADER_JOBS * compress  # the loader's arrival rate, compressed
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0.0, span, size=n))
    out = []
    for k, (i, at) in enumerate(zip(picked, arrivals, strict=True)):
        row = table[i]
        epochs = int(row["epochs"]) if row["epochs"].strip() else 1  # inference rows: one "epoch"
        gpus = int(row["Num of GPUs"])
        model = "".join(c if c.isalnum() else "-" for c in row["model"])
        limit = epochs if time_limits == "epochs" else 1
        runtime = max(1, round(epochs * seconds_per_epoch))
        if runtime > limit * 60:
            raise SystemExit(f"row {i}: runtime {runtime} s exceeds its time limit of {limit} min")
        out.append(
            Job(
                i,
                f"job{i}_{model}_{gpus}",
                row["GPU type"].lower(),
                gpus,
                epochs,
                runtime,
                limit,
                round(float(at), 3),
                row["GPU type"].lower() if partitions == "per-type" else PARTITION,
            )
        )
        del k
    return out


# -- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    state_dir: Path
    ctld_port: int
    slurmd_port_base: int
    push_events: bool = True
    #: Hylo's name for this cluster (the hooks' datagrams carry it; one per run, so that every run's
    #: rows are apart in the experiment's one database)
    hylo_cluster: str = CLUSTER
    #: multifactor settings given to up (None: up's equal-weight default)
    weights: SlurmWeights | None = None

    @property
    def events_listen(self) -> str:
        """Where ``up``'s hooks send (its default: the slurmctld port + 80)."""
        return f"127.0.0.1:{self.ctld_port + 80}"

    @property
    def conf(self) -> Path:
        return self.state_dir / "slurm.conf"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "SLURM_TIME_FORMAT": "%s"}

    def up_argv(self) -> list[str]:
        return [
            str(ROOT / "deploy/slurm-dev/up"),
            "--state-dir",
            str(self.state_dir),
            "--layout",
            "testbed",
            "--ctld-port",
            str(self.ctld_port),
            "--slurmd-port-base",
            str(self.slurmd_port_base),
            "--hylo-cluster",  # the name the push-event hooks put in their datagrams
            self.hylo_cluster,
            *(() if self.push_events else ("--no-push-events",)),
            # with slurmdbd only: slurmctld 22.05 ignores PriorityWeightAge without it ("can only be
            # used with SlurmDBD"), and a tuned arm's age weight must act
            *((*self.weights.up_args(), "--accounting") if self.weights is not None else ()),
        ]

    def down_argv(self) -> list[str]:
        return [str(ROOT / "deploy/slurm-dev/down"), "--state-dir", str(self.state_dir)]

    def fresh(self, per_type_partitions: bool = False) -> float:
        """down (if anything is there) then up: a cluster with no history; returns seconds taken.

        ``per_type_partitions``: also one partition per GPU type (``p100``, ``k80``, ``m40``, each over
        that type's nodes), added to this scratch cluster's slurm.conf and read with ``scontrol
        reconfigure``. Slurm's main scheduler stops at the first job of a partition that cannot start
        (lower ones wait for the backfill pass, reason "Priority"); with one partition per type a
        blocked K80 job no longer holds back P100 jobs.
        """
        t0 = time.monotonic()
        subprocess.run(self.down_argv(), check=False, capture_output=True, text=True)
        done = subprocess.run(self.up_argv(), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"deploy/slurm-dev/up failed ({done.returncode}):\n{done.stderr}{done.stdout}")
        if per_type_partitions:
            lines = [
                f"PartitionName={t} Nodes={','.join(f'{t}-{i}' for i in range(n))} Default=NO "
                "MaxTime=INFINITE State=UP"
                for t, n in TESTBED_NODES.items()
            ]
            with self.conf.open("a", encoding="utf-8") as fh:
                fh.write("# added by bench/slurm_experiment.py --partitions per-type\n")
                fh.write("\n".join(lines) + "\n")
            subprocess.run(["scontrol", "reconfigure"], env=self.env(), check=True, capture_output=True)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                out = subprocess.run(
                    ["sinfo", "-h", "-o", "%P"], env=self.env(), capture_output=True, text=True
                ).stdout.split()
                if set(TESTBED_NODES) <= {x.rstrip("*") for x in out}:
                    break
                time.sleep(0.5)
            else:
                raise SystemExit("the per-type partitions did not appear after scontrol reconfigure")
        return time.monotonic() - t0

    def down(self) -> None:
        subprocess.run(self.down_argv(), check=False, capture_output=True, text=True)

    def _squeue(self, states: str, fields: str) -> list[list[str]]:
        """``squeue -h -t STATES -o FIELDS`` (fields joined by ``|``), one list per job."""
        done = subprocess.run(
            ["squeue", "-h", "-t", states, "-o", fields],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"squeue failed: {done.stderr.strip()}")
        return [line.split("|") for line in done.stdout.splitlines() if line.strip()]

    def squeue(self) -> list[list[str]]:
        return self._squeue("all", "%i|%j|%T|%Q")

    def pending_priorities(self) -> list[list[str]]:
        """``squeue -t PD``: job id and priority of the pending jobs only (the fast monitor's read)."""
        return self._squeue("PD", "%i|%Q")

    def jobcomp(self) -> dict[str, dict[str, str]]:
        """The job completion file: job id -> its key=value fields."""
        path = self.state_dir / "jobcomp.txt"
        records: dict[str, dict[str, str]] = {}
        if not path.exists():
            return records
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            if "JobId" in fields:
                records[fields["JobId"]] = fields
        return records


def slurm_epoch(text: str) -> float:
    """jobcomp's local ISO time (``2026-11-22T18:48:08``) -> epoch seconds."""
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


# -- one run -------------------------------------------------------------------------------------


@dataclass
class Monitor:
    """squeue every ``interval`` s: the queue-length timeline; and every ``priority_interval`` s the
    pending jobs' priorities: the first Hylo priority per job, at the read's resolution."""

    cluster: Cluster
    interval: float
    priority_interval: float = 0.02
    t0: float = 0.0
    sample_gaps: list[float] = field(default_factory=list)  # between two priority reads' answers
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (t, pending, running)
    first_band: dict[str, float] = field(default_factory=dict)  # job id -> wall time
    first_running: dict[str, float] = field(default_factory=dict)
    max_band_seen: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            t_call = time.time()
            try:
                rows = self.cluster.squeue()
            except (RuntimeError, subprocess.TimeoutExpired):
                self.errors += 1
                rows = None
            t_seen = time.time()
            if rows is not None:
                pending = running = 0
                for job_id, _name, state, _prio in rows:
                    if state == "PENDING":
                        pending += 1
                    elif state in ("RUNNING", "CONFIGURING", "COMPLETING"):
                        running += 1
                        self.first_running.setdefault(job_id, t_seen)
                self.timeline.append((round(t_seen - self.t0, 3), pending, running))
            self.stop.wait(max(0.0, self.interval - (time.time() - t_call)))

    def watch_priorities(self) -> None:
        """The fast loop: a job's priority was set between the previous read's answer and this one's."""
        previous: float | None = None
        while not self.stop.is_set():
            t_call = time.time()
            try:
                rows = self.cluster.pending_priorities()
            except (RuntimeError, subprocess.TimeoutExpired):
                self.errors += 1
                previous = None
                continue
            t_seen = time.time()
            if previous is not None:
                self.sample_gaps.append(t_seen - previous)
            previous = t_seen
            for job_id, prio in rows:
                if prio.isdigit() and int(prio) >= BAND_BOTTOM and job_id not in self.first_band:
                    self.first_band[job_id] = t_seen
            self.stop.wait(max(0.0, self.priority_interval - (time.time() - t_call)))


def submit_all(cluster: Cluster, jobs: list[Job], t0: float) -> dict[str, tuple[Job, float]]:
    """sbatch each job at t0 + its arrival; job id -> (job, wall time sbatch returned)."""
    out: dict[str, tuple[Job, float]] = {}
    env = cluster.env()
    for job in jobs:
        delay = t0 + job.arrival_s - time.time()
        if delay > 0:
            time.sleep(delay)
        done = subprocess.run(job.sbatch_argv(), env=env, capture_output=True, text=True, timeout=60)
        returned = time.time()
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(job.sbatch_argv())} failed: {done.stderr.strip()}")
        job_id = done.stdout.strip().split(";")[0]
        out[job_id] = (job, returned)
    return out


def wait_finished(cluster: Cluster, ids: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = {row[0]: row[2] for row in cluster.squeue()}
        if all(states.get(i) in FINAL_STATES for i in ids):
            return
        time.sleep(1.0)
    raise SystemExit(f"jobs still not finished after {timeout_s:g} s")


def run_workload(
    cluster: Cluster,
    jobs: list[Job],
    monitor_interval: float,
    timeout_s: float,
    priority_interval: float = 0.02,
    store: ExperimentStore | None = None,
) -> dict[str, Any]:
    """Submit ``jobs``, wait for them, and return every job's record: from the decisions database's
    ``outcomes`` rows when ``store`` is given (Hylo recorded the run), else from Slurm's job
    completion file; the completion file also checks the database's times."""
    monitor = Monitor(cluster, monitor_interval, priority_interval)
    t0 = time.time() + 1.0
    monitor.t0 = t0
    threads = [
        threading.Thread(target=monitor.run, name="squeue-monitor", daemon=True),
        threading.Thread(target=monitor.watch_priorities, name="priority-monitor", daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        submitted = submit_all(cluster, jobs, t0)
        wait_finished(cluster, set(submitted), timeout_s)
        time.sleep(1.0)  # let jobcomp be written
    finally:
        monitor.stop.set()
        for thread in threads:
            thread.join()
    comp = cluster.jobcomp()
    rows: dict[str, dict[str, Any]] = {}
    outcome_wait_s = 0.0
    if store is not None:
        t_wait = time.monotonic()
        store.wait_outcomes(cluster.hylo_cluster, len(submitted), OUTCOME_WAIT_S)
        outcome_wait_s = time.monotonic() - t_wait
        rows = store.outcomes(cluster.hylo_cluster)
    records = []
    disagree = 0
    for job_id, (job, returned) in submitted.items():
        rec = comp.get(job_id)
        row = rows.get(job_id)
        if row is not None:
            submit, start, end = float(row["submit_s"]), float(row["start_s"]), float(row["end_s"])
            state, node, source = str(row["status"]).upper(), ",".join(row["nodes"] or []), "database"
            if rec is not None and any(
                abs(a - slurm_epoch(rec[k])) > 1.0 for a, k in ((start, "StartTime"), (end, "EndTime"))
            ):
                disagree += 1
        elif rec is not None:
            submit, start, end = (slurm_epoch(rec[k]) for k in ("SubmitTime", "StartTime", "EndTime"))
            state, node, source = rec.get("JobState", ""), rec.get("NodeList", ""), "jobcomp"
        else:
            raise SystemExit(f"job {job_id} ({job.name}) has neither an outcome row nor a completion record")
        band = monitor.first_band.get(job_id)
        records.append(
            {
                "job_id": job_id,
                "name": job.name,
                "row": job.index,
                "gpu_type": job.gpu_type,
                "gpus": job.gpus,
                "runtime_s": job.runtime_s,
                "time_limit_min": job.time_limit_min,
                "arrival_s": job.arrival_s,
                "state": state,
                "node": node,
                "partition": rec.get("Partition") if rec is not None else None,
                "source": source,
                "submit": submit,
                "start": start,
                "end": end,
                "wait_s": start - submit,
                "sbatch_returned": round(returned, 3),
                "hylo_priority_seen": None if band is None else round(band, 3),
                "time_to_priority_s": None if band is None else round(band - returned, 3),
                "first_seen_running": monitor.first_running.get(job_id),
            }
        )
    records.sort(key=lambda r: int(str(r["job_id"])))
    gaps = np.array(monitor.sample_gaps or [float("nan")])
    return {
        "jobs": records,
        "per_job_source": {
            "database": sum(1 for r in records if r["source"] == "database"),
            "jobcomp": sum(1 for r in records if r["source"] == "jobcomp"),
            "database_vs_jobcomp_over_1s": disagree,
            "outcome_wait_s": round(outcome_wait_s, 2),
        },
        "timeline": monitor.timeline,
        "monitor_errors": monitor.errors,
        "priority_sample_gap_p50_s": round(float(np.percentile(gaps, 50)), 4),
        "priority_sample_gap_p99_s": round(float(np.percentile(gaps, 99)), 4),
    }


def idle_while_fitting(jobs: list[dict[str, Any]]) -> float:
    """GPU-seconds a node's GPUs sat idle while a pending job of that GPU type would have fit in them.

    From Slurm's records at its 1 s resolution: each second, a node's free GPUs count when some job
    submitted and not yet started asks for that type and at most that many GPUs. It measures how long
    the scheduler (its cadence, or a blocked higher-priority job) left startable work waiting.
    """
    nodes = sorted({j["node"] for j in jobs if j.get("node")})
    t0, t1 = int(min(j["submit"] for j in jobs)), int(max(j["end"] for j in jobs))
    total = 0.0
    for t in range(t0, t1):
        waiting = [j for j in jobs if j["submit"] <= t < j["start"]]
        if not waiting:
            continue
        for node in nodes:
            gpu_type = node.split("-")[0]
            free = NODE_GPUS.get(gpu_type, 0) - sum(
                j["gpus"] for j in jobs if j["node"] == node and j["start"] <= t < j["end"]
            )
            if free > 0 and any(w["gpu_type"] == gpu_type and w["gpus"] <= free for w in waiting):
                total += free
    return total


def metrics(run: dict[str, Any], capacity: int) -> dict[str, Any]:
    jobs = run["jobs"]
    first_submit = min(j["submit"] for j in jobs)
    last_end = max(j["end"] for j in jobs)
    makespan = last_end - first_submit
    waits = np.array([j["wait_s"] for j in jobs], dtype=float)
    busy = sum(j["gpus"] * (j["end"] - j["start"]) for j in jobs)
    m: dict[str, Any] = {
        "jobs": len(jobs),
        "completed": sum(1 for j in jobs if j["state"] == "COMPLETED"),
        "makespan_s": makespan,
        "mean_wait_s": float(waits.mean()),
        "median_wait_s": float(np.median(waits)),
        "p95_wait_s": float(np.percentile(waits, 95)),
        "max_wait_s": float(waits.max()),
        "mean_jct_s": float(np.mean([j["end"] - j["submit"] for j in jobs])),
        "gpu_utilization": busy / (capacity * makespan) if makespan > 0 else math.nan,
        "busy_gpu_s": busy,
        "max_pending": max((p for _t, p, _r in run["timeline"]), default=0),
        "idle_gpu_s_while_fitting_job_waits": idle_while_fitting(jobs),
    }
    bound = makespan_lower_bound(jobs, {t: n * NODE_GPUS[t] for t, n in TESTBED_NODES.items()})
    m["makespan_lower_bound_s"] = bound
    m["makespan_gap_to_bound_pct"] = (makespan / bound - 1.0) * 100.0 if bound > 0 else math.nan
    lat = [j["time_to_priority_s"] for j in jobs if j["time_to_priority_s"] is not None]
    # only where Hylo decided: a multifactor arm's own priorities may reach the band (tuned weights)
    if run.get("hylo", {}).get("mode") == "deciding":
        queued = [j for j in jobs if j["wait_s"] > 0]
        m["priority_set_jobs"] = len(lat)
        m["queued_jobs"] = len(queued)
        m["queued_started_before_priority"] = sum(1 for j in queued if j["hylo_priority_seen"] is None)
        if lat:
            arr = np.array(lat)
            m["time_to_priority_p50_s"] = float(np.percentile(arr, 50))
            m["time_to_priority_p99_s"] = float(np.percentile(arr, 99))
            m["time_to_priority_max_s"] = float(arr.max())
            m["priority_sample_gap_p99_s"] = run.get("priority_sample_gap_p99_s")
    return m


# -- Hylo ----------------------------------------------------------------------------------------


def hylo_env(
    args: argparse.Namespace, cluster: Cluster, nats_url: str, db_url: str, observe: bool = False
) -> dict[str, str]:
    """The services' settings (``HYLO_*`` only, as deployed). ``observe``: the adapter writes
    nothing to Slurm (``HYLO_SLURM_DRY_RUN``), so Slurm's own priorities decide while Hylo still
    polls, decides and records every job: how a provider runs Hylo beside multifactor."""
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_DATABASE_URL": db_url,
        "HYLO_SUBJECT_ROOT": f"slurmexp{uuid.uuid4().hex[:6]}",
        "HYLO_CLUSTERS": json.dumps({cluster.hylo_cluster: "slurm-testbed"}),
        "HYLO_BASE_POLICY": args.base_policy,
        "HYLO_DEADLINE_MS": str(args.deadline_ms),
        "HYLO_PLACEMENT": args.placement,
        "HYLO_SLURM_CLUSTER": cluster.hylo_cluster,
        "HYLO_SLURM_DRY_RUN": "true" if observe else "false",
        "HYLO_SLURM_TIMING_LOG": "true",  # the path's hops, for bench/support/slurm_path.py
        # the services run this checkout's code (the bench may run from a copy of the tree)
        "PYTHONPATH": str(ROOT),
        "HYLO_SLURM_CONF": str(cluster.conf),
        "HYLO_SLURM_POLL_INTERVAL_S": str(args.poll_interval),
        "HYLO_SLURM_PARTITIONS": json.dumps(
            sorted(TESTBED_NODES) if args.partitions == "per-type" else [PARTITION]
        ),
        "HYLO_SLURM_PRIORITY_TOP": str(BAND_TOP),
        "HYLO_SLURM_PRIORITY_BOTTOM": str(BAND_BOTTOM),
        "HYLO_SLURM_RETRY_MAX_S": "5",
        "HYLO_SLURM_APPLY_NODES": "true" if args.apply_nodes else "false",
    }
    if cluster.push_events:
        env["HYLO_SLURM_EVENTS_LISTEN"] = cluster.events_listen
    if args.model is not None:
        card = args.model.resolve()
        env["HYLO_MODEL_PATH"] = str(card / "card.json" if card.is_dir() else card)
    env.update(args.service_env_map)
    return env


def service_stats(stack: LocalStack) -> dict[str, Any]:
    """Fallbacks, messages handled and decision latency, from each service's /metrics."""
    import httpx

    wanted = ("fallbacks_total", "decision_latency_seconds_sum", "decision_latency_seconds_count")
    out: dict[str, Any] = {}
    for child in stack.services():
        try:
            text = httpx.get(f"http://127.0.0.1:{child.port}/metrics", timeout=2.0).text
        except httpx.HTTPError as err:
            out[child.name] = f"unreachable: {err}"
            continue
        out[child.name] = [
            line
            for line in text.splitlines()
            if line
            and not line.startswith("#")
            and (any(k in line for k in wanted) or ('outcome="handled"' in line and "messages_total" in line))
        ]
    return out


_DECISION_LINE = re.compile(
    r"decision \S+: (\d+) priorities sent.*?(\d+) unchanged, (\d+) skipped, (\d+) gone, (\d+) failed"
)


def adapter_summary(log: Path, wall_s: float) -> dict[str, Any]:
    """What the adapter's log says it did: decisions applied and scontrol updates sent."""
    decisions = sent = unchanged = gone = failed = 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _DECISION_LINE.search(line)
        if m:
            decisions += 1
            sent += int(m[1])
            unchanged += int(m[2])
            gone += int(m[4])
            failed += int(m[5])
    return {
        "decisions_applied": decisions,
        "scontrol_updates": sent,
        "unchanged": unchanged,
        "gone": gone,
        "failed": failed,
        "decisions_per_s": round(decisions / wall_s, 2) if wall_s else None,
    }


def run_hylo(
    args: argparse.Namespace,
    cluster: Cluster,
    jobs: list[Job],
    workdir: Path,
    store: ExperimentStore,
    observe: bool = False,
) -> dict[str, Any]:
    """One run with Hylo's services beside the cluster, recording into ``store``: deciding (the
    Hylo arm) or, with ``observe``, only watching and recording (the multifactor arms)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(workdir)
    try:
        nats_url = stack.start_nats()
        env = hylo_env(args, cluster, nats_url, store.url, observe)
        t0 = time.monotonic()
        stack.start_services(env, names=(*PIPELINE, "adapter_slurm"))
        stack.wait_ready(180.0)
        print(f"  Hylo ready in {time.monotonic() - t0:.1f} s (logs in {workdir})", flush=True)
        t_run = time.monotonic()
        result = run_workload(
            cluster, jobs, args.monitor_interval, args.timeout, args.priority_interval, store
        )
        stack.check_alive()
        if observe:  # what the band reader saw were Slurm's own priorities (tuned weights reach it)
            for j in result["jobs"]:
                j["hylo_priority_seen"] = j["time_to_priority_s"] = None
        result["hylo"] = {
            "mode": "observing (dry run)" if observe else "deciding",
            "cluster": cluster.hylo_cluster,
            "decisions": store.decision_summary(cluster.hylo_cluster),
            "env": {k: v for k, v in env.items() if k not in ("HYLO_NATS_URL", "HYLO_DATABASE_URL")},
            "workdir": str(workdir),
            "services": service_stats(stack),
            "adapter": adapter_summary(workdir / "adapter_slurm.log", time.monotonic() - t_run),
        }
        if not observe:  # where the time to a new job's priority went (the adapter's timing lines)
            rows = job_paths(workdir / "adapter_slurm.log", result["jobs"])
            result["hylo"]["path_profile"] = profile(rows)
            result["hylo"]["path_rows"] = [{k: _round(v) for k, v in r.items()} for r in rows]
        return result
    finally:
        stack.stop()


# -- report --------------------------------------------------------------------------------------


def _round(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def rel(new: float, old: float) -> float:
    return (new - old) / old * 100.0 if old else math.nan


def table(m1: dict[str, Any], m2: dict[str, Any]) -> str:
    rows = [
        ("makespan (s)", "makespan_s", "{:.0f}", "makespan"),
        ("mean wait (s)", "mean_wait_s", "{:.1f}", "mean_wait"),
        ("median wait (s)", "median_wait_s", "{:.1f}", None),
        ("p95 wait (s)", "p95_wait_s", "{:.1f}", None),
        ("mean JCT (s)", "mean_jct_s", "{:.1f}", None),
        ("GPU utilization", "gpu_utilization", "{:.3f}", "utilization"),
        ("max pending jobs", "max_pending", "{:d}", None),
        ("idle GPU-s, fit", "idle_gpu_s_while_fitting_job_waits", "{:.0f}", None),
    ]
    lines = [f"{'metric':<18}{'Slurm multifactor':>19}{'Hylo':>10}{'change':>10}{'paper':>9}"]
    for label, key, fmt, paper in rows:
        a, b = m1[key], m2[key]
        change = rel(b, a)
        if key == "gpu_utilization":
            change = (b - a) * 100.0 / a if a else math.nan
        p = f"{PAPER[paper]:+.1f}%" if paper else ""
        lines.append(f"{label:<18}{fmt.format(a):>19}{fmt.format(b):>10}{change:>+9.1f}%{p:>9}")
    if "time_to_priority_p50_s" in m2:
        lines.append(
            f"time from sbatch to Hylo priority in squeue: p50 {m2['time_to_priority_p50_s']:.2f} s, "
            f"p99 {m2['time_to_priority_p99_s']:.2f} s, max {m2['time_to_priority_max_s']:.2f} s "
            f"({m2['priority_set_jobs']} jobs got a Hylo priority; {m2['queued_jobs']} waited at all, "
            f"{m2['queued_started_before_priority']} of them started before Hylo set theirs)"
        )
    return "\n".join(lines)


def plot(runs: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for label, run in runs.items():
        tl = np.array(run["timeline"], dtype=float)
        if len(tl):
            ax1.step(tl[:, 0], tl[:, 1], where="post", label=f"{label}: pending")
        waits = np.sort([j["wait_s"] for j in run["jobs"]])
        ax2.step(waits, np.arange(1, len(waits) + 1) / len(waits), where="post", label=label)
    ax1.set_xlabel("seconds since the first arrival")
    ax1.set_ylabel("pending jobs (squeue)")
    ax1.set_title("queue length")
    ax1.legend()
    ax2.set_xlabel("wait (s, Slurm's records)")
    ax2.set_ylabel("fraction of jobs")
    ax2.set_title("per-job wait, CDF")
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", default="156:", help="trace rows (START:STOP, 0-based) to draw jobs from [156:]")
    p.add_argument("--jobs", type=int, default=None, help="at most this many of those rows (in order)")
    p.add_argument("--seed", type=int, default=7, help="seed of the first repetition's arrivals [7]")
    p.add_argument(
        "--seeds", default=None, help="one arrival seed per repetition, comma-separated [seed, seed+1, ...]"
    )
    p.add_argument("--repeats", type=int, default=1, help="repetitions, each a new arrival draw [1]")
    p.add_argument("--seconds-per-epoch", type=float, default=4.0, help="sleep seconds per epoch [4]")
    p.add_argument(
        "--time-limits",
        choices=("epochs", "flat"),
        default="epochs",
        help="epochs: --time=<epochs> min; flat: 1 min for every job [epochs]",
    )
    p.add_argument(
        "--partitions",
        choices=("one", "per-type"),
        default="one",
        help="one: every job in partition gpu (deploy/slurm-dev's); per-type: a partition per GPU type [one]",
    )
    p.add_argument(
        "--arms",
        "--runs",
        dest="arms",
        default="slurm,slurm-tuned,hylo",
        help="arms run in each repetition: slurm (multifactor, equal weights), slurm-tuned, hylo "
        "[slurm,slurm-tuned,hylo]",
    )
    p.add_argument(
        "--tuned-weights",
        default=None,
        help="the slurm-tuned arm's settings (age=N,job_size=N,partition=N,qos=N,max_age_s=N,"
        "favor_small=0|1,calc_period_s=N); default: chosen by --tune-rows in the simulator",
    )
    p.add_argument("--tune-rows", default="0:156", help="trace rows the tuned weights are chosen on [0:156]")
    p.add_argument("--tune-draws", type=int, default=10, help="arrival draws of the tuning sample [10]")
    p.add_argument("--base-policy", default="unicep", help="HYLO_BASE_POLICY of the prioritizer [unicep]")
    p.add_argument(
        "--model", type=Path, default=None, help="checkpoint dir for the prioritizer (none: base policy)"
    )
    p.add_argument("--placement", default="cp-sat", help="HYLO_PLACEMENT [cp-sat]")
    p.add_argument(
        "--apply-nodes",
        action="store_true",
        help="HYLO_SLURM_APPLY_NODES: also send the placer's nodes (ReqNodeList, NumNodes) [off]",
    )
    p.add_argument("--deadline-ms", type=float, default=1000.0, help="HYLO_DEADLINE_MS [1000]")
    p.add_argument("--poll-interval", type=float, default=2.0, help="HYLO_SLURM_POLL_INTERVAL_S [2]")
    p.add_argument("--monitor-interval", type=float, default=0.25, help="squeue timeline period [0.25]")
    p.add_argument(
        "--priority-interval",
        type=float,
        default=0.02,
        help="period of the pending jobs' priority reads (time to priority's resolution) [0.02]",
    )
    p.add_argument(
        "--push-events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="slurmctld's push events (hooks installed by up; HYLO_SLURM_EVENTS_LISTEN) [on]",
    )
    p.add_argument(
        "--store",
        choices=("postgres", "sqlite"),
        default="postgres",
        help="the decisions database: a new PostgreSQL database per invocation, or a SQLite file [postgres]",
    )
    p.add_argument(
        "--pg-admin-url",
        default=os.environ.get("HYLO_BENCH_PG_ADMIN_URL", DEFAULT_ADMIN_URL),
        help=f"PostgreSQL to create the database on (HYLO_BENCH_PG_ADMIN_URL) [{DEFAULT_ADMIN_URL}]",
    )
    p.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
    p.add_argument(
        "--observe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="multifactor arms: run Hylo beside Slurm in dry run, recording every job (per-job "
        "figures from the database); --no-observe: Slurm alone, figures from its completion file [on]",
    )
    p.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="HYLO_NAME=VALUE",
        help="an extra setting for every Hylo service (repeatable), e.g. HYLO_SLURM_UPDATE_WORKERS=1",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="longest wait for a run's jobs [1800]")
    p.add_argument("--state-dir", type=Path, default=Path("/tmp/slurmexp/slurm"))
    p.add_argument("--workdir", type=Path, default=Path("/tmp/slurmexp/work"))
    p.add_argument("--ctld-port", type=int, default=7017)
    p.add_argument("--slurmd-port-base", type=int, default=7030)
    p.add_argument("--keep-cluster", action="store_true", help="leave the last cluster running")
    p.add_argument("--json", type=Path, default=ROOT / "bench/results/slurm_experiment_repeated.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs/results/slurm-experiment-repeated.png")
    p.add_argument(
        "--summary-json",
        type=Path,
        default=ROOT / "docs/results/slurm-experiment-repeated.json",
        help="the compact report kept beside the figure (no timelines; per-job times, metrics, summary)",
    )
    p.add_argument("--quick", action="store_true", help="no plot and no compact report (tests)")
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="run nothing: recompute the metrics, table and figure of a report this bench wrote",
    )
    p.add_argument(
        "--replace-arm-from",
        default=None,
        metavar="ARM=PATH",
        help="with --from-json: that arm's runs come from another report of the same seeds (a rerun); "
        "the replaced runs are kept under superseded_runs",
    )
    args = p.parse_args(argv)
    args.arm_list = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arm_list if a not in ARMS]
    if unknown or not args.arm_list:
        p.error(f"--arms: unknown arm(s) {unknown} (choose from {', '.join(ARMS)})")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.seeds is not None:
        try:
            args.seed_list = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            p.error(f"--seeds {args.seeds!r}: expected whole numbers separated by commas")
        if len(args.seed_list) != args.repeats:
            p.error(f"--seeds lists {len(args.seed_list)} seeds for --repeats {args.repeats}")
    else:
        args.seed_list = [args.seed + r for r in range(args.repeats)]
    args.service_env_map = {}
    for item in args.service_env:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"HYLO_[A-Z0-9_]+", key):
            p.error(f"--service-env {item!r}: expected HYLO_NAME=VALUE")
        args.service_env_map[key] = value
    if args.model is not None and not args.model.exists():
        p.error(f"--model {args.model}: no such checkpoint folder or card")
    return args


def tuned_weights(args: argparse.Namespace, trace: Path) -> tuple[SlurmWeights, dict[str, Any] | None]:
    """The slurm-tuned arm's settings: given, or chosen in the simulator on rows the experiment
    never replays (``bench/support/multifactor_tuning.py``); with the tuning's record."""
    if args.tuned_weights is not None:
        return parse_weights(args.tuned_weights), None
    with trace.open(encoding="utf-8") as fh:
        total = sum(1 for _ in fh) - 1
    tune_rows, rows = parse_rows(args.tune_rows, total), parse_rows(args.rows, total)
    if set(tune_rows) & set(rows):
        raise SystemExit(f"--tune-rows {args.tune_rows} overlaps --rows {args.rows}: tune on other rows")
    n = len(tune_rows)
    span = LOADER_SPAN_S * n / LOADER_JOBS * args.seconds_per_epoch / LOADER_SECONDS_PER_EPOCH
    seeds = [1000 + k for k in range(args.tune_draws)]  # apart from the experiment's seeds
    t0 = time.monotonic()
    record = tune(trace, tune_rows, seeds, args.seconds_per_epoch, span)
    record["seconds"] = round(time.monotonic() - t0, 1)
    chosen = {k: record["chosen"][k] for k in SlurmWeights.__dataclass_fields__}
    return SlurmWeights(**chosen), record


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=float) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_arm(
    args: argparse.Namespace,
    arm: str,
    repeat: int,
    jobs: list[Job],
    store: ExperimentStore,
    weights: SlurmWeights | None,
) -> dict[str, Any]:
    """One arm of one repetition on a fresh cluster; returns its run record with metrics."""
    cluster = Cluster(
        args.state_dir.resolve(),
        args.ctld_port,
        args.slurmd_port_base,
        args.push_events,
        hylo_cluster=f"sx-r{repeat}-{arm}",
        weights=weights if arm == "slurm-tuned" else None,
    )
    up_s = cluster.fresh(args.partitions == "per-type")
    t0 = time.monotonic()
    workdir = args.workdir / f"r{repeat}-{arm}-{uuid.uuid4().hex[:6]}"
    if arm == "hylo":
        result = run_hylo(args, cluster, jobs, workdir, store)
    elif args.observe:
        result = run_hylo(args, cluster, jobs, workdir, store, observe=True)
    else:
        result = run_workload(cluster, jobs, args.monitor_interval, args.timeout, args.priority_interval)
    result["arm"] = arm
    result["repeat"] = repeat
    result["cluster_up_s"] = round(up_s, 2)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["metrics"] = metrics(result, 13)
    return result


def finish(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Summary, table, figure and JSON of a report whose runs are done."""
    runs = report["runs"]
    summary = summarize(runs)
    report["summary"] = summary
    print(summary_table(summary))
    for run in runs:
        prof = (run.get("hylo") or {}).get("path_profile")
        if prof:
            print(f"\nrepetition {run['repeat']}, {run['arm']}: sbatch -> Hylo priority, by hop")
            print(profile_table(prof))
    if not args.quick:
        setup = report["setup"]
        who = "a model" if setup.get("model") else f"the {setup.get('base_policy')} base policy"
        plot_repeated(
            runs,
            summary,
            args.plot,
            f"{setup['jobs']} sleep jobs of slurm_workloads_256 ({setup['seconds_per_epoch']:g} s per epoch) "
            f"on the local testbed Slurm, {setup.get('repeats', 1)} repetition(s); Hylo with {who}",
        )
        print(f"wrote {args.plot}")
        write_report(args.summary_json, compact(report))
        print(f"wrote {args.summary_json}")
    write_report(args.json, report)
    print(f"wrote {args.json}")


def replace_arm(report: dict[str, Any], spec: str) -> None:
    """``--replace-arm-from ARM=PATH``: ARM's runs of ``report`` replaced by PATH's, repetition by
    repetition (the seeds must agree); the old ones kept under ``superseded_runs``."""
    arm, sep, path = spec.partition("=")
    if not sep or arm not in ARMS:
        raise SystemExit(f"--replace-arm-from {spec!r}: expected ARM=PATH with ARM in {', '.join(ARMS)}")
    try:
        other = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SystemExit(f"--replace-arm-from {spec!r}: cannot read {path} ({err})") from None
    if other["setup"]["seeds"] != report["setup"]["seeds"]:
        raise SystemExit(
            f"--replace-arm-from: {path} has seeds {other['setup']['seeds']}, not {report['setup']['seeds']}"
        )
    new = [r for r in other["runs"] if r["arm"] == arm]
    if len(new) != len(report["setup"]["seeds"]):
        raise SystemExit(f"--replace-arm-from: {path} has {len(new)} {arm} runs, expected one per seed")
    for r in report["runs"]:
        if r["arm"] == arm:
            r["replaced_by"] = path
            report.setdefault("superseded_runs", []).append(r)
    kept = [r for r in report["runs"] if r["arm"] != arm]
    order = {a: i for i, a in enumerate(ARMS)}
    report["runs"] = sorted([*kept, *new], key=lambda r: (r["repeat"], order[r["arm"]]))
    report.setdefault("replaced_arms", []).append(
        {
            "arm": arm,
            "from": path,
            "command": other.get("command"),
            "started": other.get("started"),
            "setup": other["setup"],
            "tuning": other.get("tuning"),
        }
    )
    if arm not in report["setup"]["arms"]:
        report["setup"]["arms"].append(arm)


#: what the compact report keeps of each job
COMPACT_JOB = ("job_id", "row", "gpu_type", "gpus", "runtime_s", "submit", "start", "end", "node", "source")


def compact(report: dict[str, Any]) -> dict[str, Any]:
    """The report without timelines, workloads' duplicates and per-job path rows: small enough to
    keep in the repository beside the figure (the full one stays in bench/results/)."""

    def run_of(run: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in run.items() if k not in ("timeline", "jobs", "hylo")}
        hylo = run.get("hylo") or {}
        out["hylo"] = {k: v for k, v in hylo.items() if k not in ("path_rows", "env", "services")}
        out["jobs"] = [
            {**{k: j.get(k) for k in COMPACT_JOB}, "time_to_priority_s": j.get("time_to_priority_s")}
            for j in run["jobs"]
        ]
        return out

    out = {k: v for k, v in report.items() if k not in ("runs", "superseded_runs", "workloads")}
    out["runs"] = [run_of(r) for r in report["runs"]]
    if report.get("superseded_runs"):
        out["superseded_runs"] = [
            {k: r.get(k) for k in ("arm", "repeat", "seed", "metrics", "replaced_by")}
            for r in report["superseded_runs"]
        ]
    out["full_report"] = "bench/results/ (not kept in git): rerun the command"
    return out


def recompute(args: argparse.Namespace) -> int:
    """``--from-json``: the metrics of every run again, from its per-job records, then ``finish``."""
    try:
        report = json.loads(args.from_json.read_text(encoding="utf-8"))
        runs = report["runs"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"--from-json {args.from_json}: not a report of this bench ({err})") from None
    if args.replace_arm_from is not None:
        replace_arm(report, args.replace_arm_from)
        runs = report["runs"]
    for run in runs:
        if str((run.get("hylo") or {}).get("mode", "")).startswith("observing"):
            for j in run["jobs"]:
                j["hylo_priority_seen"] = j["time_to_priority_s"] = None
        run["metrics"] = metrics(run, int(report["setup"].get("capacity_gpus", 13)))
    report["recomputed"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    finish(args, report)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        return recompute(args)
    if os.geteuid() != 0:
        raise SystemExit("must run as root (deploy/slurm-dev/up starts slurmd)")
    from shared.config import get_settings

    trace = get_settings().traces_dir / TRACE_FILE
    if not trace.is_file():
        raise SystemExit(f"{trace} not found: set HYLO_TRACES_DIR to the traces folder (docs/traces.md)")
    workloads = [
        build_workload(
            trace, args.rows, args.jobs, seed, args.seconds_per_epoch, args.time_limits, args.partitions
        )
        for seed in args.seed_list
    ]
    jobs = workloads[0]
    weights, tuning = (None, None)
    if "slurm-tuned" in args.arm_list:
        weights, tuning = tuned_weights(args, trace)
        print(f"tuned multifactor: {weights.label()}", flush=True)
    capacity = 13  # the testbed layout: 2 x 4 P100 + 2 x 2 K80 + 1 x 1 M40
    demand = sum(j.gpus * j.runtime_s for j in jobs)
    print(
        f"{len(jobs)} jobs from {TRACE_FILE} rows {jobs[0].index}-{jobs[-1].index}; {args.repeats} "
        f"repetition(s), seeds {args.seed_list}; arms {args.arm_list}; runtimes "
        f"{min(j.runtime_s for j in jobs)}-{max(j.runtime_s for j in jobs)} s; {demand:,} GPU-s of work "
        f"on {capacity} GPUs",
        flush=True,
    )
    command = " ".join(
        shlex.quote(a) for a in [".venv/bin/python", "bench/slurm_experiment.py", *(argv or sys.argv[1:])]
    )
    try:
        slurm_version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        slurm_version = "unknown (installed by the first up)"
    store = ExperimentStore(args.store, args.pg_admin_url, args.workdir)
    report: dict[str, Any] = {
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "setup": {
            "trace": TRACE_FILE,
            "rows": args.rows,
            "jobs": len(jobs),
            "repeats": args.repeats,
            "seeds": args.seed_list,
            "arms": args.arm_list,
            "seconds_per_epoch": args.seconds_per_epoch,
            "time_limits": args.time_limits,
            "partitions": args.partitions,
            "arrival_span_s": [w[-1].arrival_s for w in workloads],
            "capacity_gpus": capacity,
            "demand_gpu_s": demand,
            "layout": "testbed (2 x 4 P100, 2 x 2 K80, 1 x 1 M40)",
            "poll_interval_s": args.poll_interval,
            "monitor_interval_s": args.monitor_interval,
            "priority_interval_s": args.priority_interval,
            "push_events": args.push_events,
            "base_policy": args.base_policy,
            "model": None if args.model is None else str(args.model),
            "placement": args.placement,
            "apply_nodes": args.apply_nodes,
            "deadline_ms": args.deadline_ms,
            "priority_band": [BAND_BOTTOM, BAND_TOP],
            "store": args.store,
            "observe_multifactor_arms": args.observe,
            "tuned_weights": None if weights is None else {**asdict(weights), "label": weights.label()},
            "slurm": slurm_version,
        },
        "tuning": tuning,
        "workloads": {
            str(seed): [asdict(j) for j in w] for seed, w in zip(args.seed_list, workloads, strict=True)
        },
        "runs": [],
    }
    try:
        store.create(ROOT)
    except StoreError as err:
        raise SystemExit(str(err)) from None
    report["setup"]["database"] = store.describe()
    print(f"decisions database: {store.describe()} (migrated in {store.migrate_s:.1f} s)", flush=True)
    runs: list[dict[str, Any]] = report["runs"]
    cluster = Cluster(args.state_dir.resolve(), args.ctld_port, args.slurmd_port_base)
    try:
        for repeat, (seed, jobs) in enumerate(zip(args.seed_list, workloads, strict=True), start=1):
            for arm in args.arm_list:
                stamp = time.strftime("%H:%M:%S")
                print(
                    f"[{stamp}] repetition {repeat}/{args.repeats} (seed {seed}), arm {arm}: "
                    "fresh cluster ...",
                    flush=True,
                )
                result = run_arm(args, arm, repeat, jobs, store, weights)
                result["seed"] = seed
                runs.append(result)
                m = result["metrics"]
                print(
                    f"  {arm}: makespan {m['makespan_s']:.0f} s (bound {m['makespan_lower_bound_s']:.0f} s, "
                    f"gap {m['makespan_gap_to_bound_pct']:+.1f}%), mean wait {m['mean_wait_s']:.1f} s, "
                    f"utilization {m['gpu_utilization']:.3f} ({result['wall_s']:.0f} s wall; per-job "
                    f"figures: {result['per_job_source']})",
                    flush=True,
                )
                if "time_to_priority_p50_s" in m:
                    print(
                        f"  time to Hylo priority: p50 {m['time_to_priority_p50_s']:.2f} s, "
                        f"p99 {m['time_to_priority_p99_s']:.2f} s; where it went:",
                        flush=True,
                    )
                    print(profile_table(result["hylo"]["path_profile"] or {}), flush=True)
                write_report(args.json, report)  # progress: a stopped experiment keeps its runs
    finally:
        if not args.keep_cluster:
            cluster.down()
        if not args.keep_database:
            store.drop()
        else:
            print(f"kept {store.describe()}")
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report["database_kept"] = args.keep_database
    finish(args, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
