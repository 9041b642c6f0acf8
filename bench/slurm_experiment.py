"""The end-to-end Slurm experiment of issue 6: the RLTune paper's section 5.6 at small scale.

    .venv/bin/python bench/slurm_experiment.py --base-policy unicep  # the documented run (~12 min)
    .venv/bin/python bench/slurm_experiment.py --model /tmp/slurmexp/train/checkpoint
    .venv/bin/python bench/slurm_experiment.py --partitions per-type   # a partition per GPU type
    .venv/bin/python bench/slurm_experiment.py --jobs 6 --rows 250: --seconds-per-epoch 1 --quick

What it does, in order (root is needed, as for ``deploy/slurm-dev/up``):

1. **Workload.** Rows of ``rltune/slurm_workloads_256.csv`` (``HYLO_TRACES_DIR``; default the last
   100 rows, 156-255, which ``hylo train --train-fraction 0.6`` never sees), each turned into a sleep
   job: ``sbatch -p gpu --gres=gpu:<type>:<n> -n 1 -c <4 n> --time=<limit> --wrap 'sleep <runtime>'``.
   Runtime = epochs (1 for inference rows) x ``--seconds-per-epoch`` (default 4 s: the trace loader's
   60 s per epoch compressed 15 x). Arrivals: uniform over ``[0, span]``, drawn with ``--seed``,
   sorted and given to the rows in file order (as the trace loader does); the span keeps the
   loader's arrival rate (256 jobs in 900 s) compressed by the same factor, so the jobs arrive as a
   burst and a queue builds, as in the paper. Time limit: ``epochs`` minutes (``--time-limits
   epochs``, the job's length at the trace's uncompressed scale, so a user's request that orders jobs
   by length, with Slurm's whole-minute granularity) or 1 minute for all (``flat``: no length
   information, like the paper's 2 h for every job). Partition: ``gpu`` for every job (the one
   partition of ``deploy/slurm-dev``), or with ``--partitions per-type`` one partition per GPU type
   (``p100``, ``k80``, ``m40``), added to the scratch cluster's ``slurm.conf`` after ``up``.
2. **Run 1, Slurm alone.** ``deploy/slurm-dev/up`` (testbed layout: 2 x 4 P100, 2 x 2 K80, 1 x 1 M40;
   multifactor priority with equal weights, EASY backfill) on a fresh state dir, submit the jobs at
   their arrival times, wait until all have finished.
3. **Run 2, Hylo managing priorities.** ``down`` then ``up`` again (a fresh cluster, job ids from 1),
   then a private nats-server (JetStream, free loopback port), a migrated SQLite file and
   ``featurizer``, ``prioritizer``, ``placer`` and ``adapter_slurm`` as their own processes
   (``python -m services.<name>``, configured by ``HYLO_*`` only; the adapter polls every
   ``--poll-interval`` s, manages partition ``gpu`` and writes priorities 10,000-1,000,000, above
   multifactor's 1,000-4,000). The same jobs at the same offsets.
4. **Metrics from Slurm's own records**: the job completion file (``JobCompType=jobcomp/filetxt``,
   what ``sacct -c`` reads): submit, start, end of every job, in Slurm's whole seconds. Makespan =
   last end - first submit; wait = start - submit; GPU utilization = sum(GPUs x (end - start)) /
   (13 GPUs x makespan). While a run goes, a monitor thread runs ``squeue`` every
   ``--monitor-interval`` s (0.25) for the queue-length timeline, and a second one reads the pending
   jobs' priorities every ``--priority-interval`` s (0.02; ``squeue -t PD -o %i|%Q``, a few ms):
   in the Hylo run, the first moment each job shows a priority in Hylo's band; time to priority =
   that moment (the answer of the first read that shows it, an upper bound) - the moment ``sbatch``
   returned. Its resolution is the time between two reads (interval + one ``squeue``, reported as
   ``priority_sample_gap_p50_s``/``_p99_s``): fine enough for a 300 ms target, which the 0.25 s
   timeline was not. ``--push-events`` (default) runs the adapter with slurmctld's push events
   (``up`` installs the hooks; ``HYLO_SLURM_EVENTS_LISTEN``); ``--no-push-events`` polls only.

Writes ``bench/results/slurm_experiment.json`` (setup, commands, per-job records, metrics) and
``docs/results/slurm-experiment.png`` (queue length over time and the per-job wait CDF of both runs),
and prints a table. Discussion: ``docs/results/slurm-experiment.md``.
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

from services.adapter_sim.stack import PIPELINE, LocalStack  # noqa: E402

TRACE_FILE = "rltune/slurm_workloads_256.csv"
#: the trace loader's arrival model (shared.traces.slurm_workload): 256 jobs uniform over 900 s
LOADER_SPAN_S = 900.0
LOADER_JOBS = 256
LOADER_SECONDS_PER_EPOCH = 60.0
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
            CLUSTER,
            *(() if self.push_events else ("--no-push-events",)),
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
) -> dict[str, Any]:
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
    records = []
    for job_id, (job, returned) in submitted.items():
        rec = comp.get(job_id)
        if rec is None:
            raise SystemExit(f"job {job_id} ({job.name}) has no job completion record")
        submit, start, end = (slurm_epoch(rec[k]) for k in ("SubmitTime", "StartTime", "EndTime"))
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
                "state": rec.get("JobState"),
                "node": rec.get("NodeList"),
                "partition": rec.get("Partition"),
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
    lat = [j["time_to_priority_s"] for j in jobs if j["time_to_priority_s"] is not None]
    if any(j["hylo_priority_seen"] is not None for j in jobs) or run.get("hylo"):
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


def hylo_env(args: argparse.Namespace, cluster: Cluster, nats_url: str, db_url: str) -> dict[str, str]:
    env = {
        "HYLO_NATS_URL": nats_url,
        "HYLO_DATABASE_URL": db_url,
        "HYLO_SUBJECT_ROOT": f"slurmexp{uuid.uuid4().hex[:6]}",
        "HYLO_CLUSTERS": json.dumps({CLUSTER: "slurm-testbed"}),
        "HYLO_BASE_POLICY": args.base_policy,
        "HYLO_DEADLINE_MS": str(args.deadline_ms),
        "HYLO_PLACEMENT": args.placement,
        "HYLO_SLURM_CLUSTER": CLUSTER,
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


def run_hylo(args: argparse.Namespace, cluster: Cluster, jobs: list[Job], workdir: Path) -> dict[str, Any]:
    from shared.store.migrate import upgrade_url

    workdir.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(workdir)
    try:
        nats_url = stack.start_nats()
        db_url = f"sqlite+aiosqlite:///{workdir / 'hylo.db'}"
        upgrade_url(db_url)
        env = hylo_env(args, cluster, nats_url, db_url)
        t0 = time.monotonic()
        stack.start_services(env, names=(*PIPELINE, "adapter_slurm"))
        stack.wait_ready(180.0)
        print(f"  Hylo ready in {time.monotonic() - t0:.1f} s (logs in {workdir})", flush=True)
        t_run = time.monotonic()
        result = run_workload(cluster, jobs, args.monitor_interval, args.timeout, args.priority_interval)
        stack.check_alive()
        result["hylo"] = {
            "env": {k: v for k, v in env.items() if k not in ("HYLO_NATS_URL",)},
            "workdir": str(workdir),
            "services": service_stats(stack),
            "adapter": adapter_summary(workdir / "adapter_slurm.log", time.monotonic() - t_run),
        }
        return result
    finally:
        stack.stop()


# -- report --------------------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", default="156:", help="trace rows (START:STOP, 0-based) to draw jobs from [156:]")
    p.add_argument("--jobs", type=int, default=None, help="at most this many of those rows (in order)")
    p.add_argument("--seed", type=int, default=7, help="seed of the arrival times [7]")
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
    p.add_argument("--runs", default="slurm,hylo", help="which runs: slurm, hylo or both [slurm,hylo]")
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
    p.add_argument("--timeout", type=float, default=1800.0, help="longest wait for a run's jobs [1800]")
    p.add_argument("--state-dir", type=Path, default=Path("/tmp/slurmexp/slurm"))
    p.add_argument("--workdir", type=Path, default=Path("/tmp/slurmexp/work"))
    p.add_argument("--ctld-port", type=int, default=7017)
    p.add_argument("--slurmd-port-base", type=int, default=7030)
    p.add_argument("--keep-cluster", action="store_true", help="leave the last cluster running")
    p.add_argument("--json", type=Path, default=ROOT / "bench/results/slurm_experiment.json")
    p.add_argument("--plot", type=Path, default=ROOT / "docs/results/slurm-experiment.png")
    p.add_argument("--quick", action="store_true", help="no plot (tests)")
    args = p.parse_args(argv)

    if os.geteuid() != 0:
        raise SystemExit("must run as root (deploy/slurm-dev/up starts slurmd)")
    from shared.config import get_settings

    trace = get_settings().traces_dir / TRACE_FILE
    if not trace.is_file():
        raise SystemExit(f"{trace} not found: set HYLO_TRACES_DIR to the traces folder (docs/traces.md)")
    jobs = build_workload(
        trace, args.rows, args.jobs, args.seed, args.seconds_per_epoch, args.time_limits, args.partitions
    )
    wanted = [r.strip() for r in args.runs.split(",") if r.strip()]
    cluster = Cluster(args.state_dir.resolve(), args.ctld_port, args.slurmd_port_base, args.push_events)
    capacity = 13  # the testbed layout: 2 x 4 P100 + 2 x 2 K80 + 1 x 1 M40
    demand = sum(j.gpus * j.runtime_s for j in jobs)
    print(
        f"{len(jobs)} jobs from {TRACE_FILE} rows {jobs[0].index}-{jobs[-1].index}; arrivals over "
        f"{jobs[-1].arrival_s:.1f} s (seed {args.seed}); runtimes {min(j.runtime_s for j in jobs)}-"
        f"{max(j.runtime_s for j in jobs)} s; {demand:,} GPU-s of work on {capacity} GPUs",
        flush=True,
    )
    command = " ".join(
        shlex.quote(a) for a in [".venv/bin/python", "bench/slurm_experiment.py", *(argv or sys.argv[1:])]
    )
    report: dict[str, Any] = {
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "setup": {
            "trace": TRACE_FILE,
            "rows": args.rows,
            "jobs": len(jobs),
            "seed": args.seed,
            "seconds_per_epoch": args.seconds_per_epoch,
            "time_limits": args.time_limits,
            "partitions": args.partitions,
            "arrival_span_s": jobs[-1].arrival_s,
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
        },
        "workload": [asdict(j) for j in jobs],
        "runs": {},
    }
    try:
        slurm_version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        slurm_version = "unknown"
    report["setup"]["slurm"] = slurm_version
    runs: dict[str, dict[str, Any]] = {}
    try:
        for name in wanted:
            print(f"run {name}: fresh cluster ...", flush=True)
            up_s = cluster.fresh(args.partitions == "per-type")
            t0 = time.monotonic()
            if name == "slurm":
                result = run_workload(
                    cluster, jobs, args.monitor_interval, args.timeout, args.priority_interval
                )
            elif name == "hylo":
                result = run_hylo(args, cluster, jobs, args.workdir / f"hylo-{uuid.uuid4().hex[:6]}")
            else:
                raise SystemExit(f"--runs: unknown run {name!r} (slurm, hylo)")
            result["cluster_up_s"] = round(up_s, 2)
            result["wall_s"] = round(time.monotonic() - t0, 1)
            result["metrics"] = metrics(result, capacity)
            runs[name] = result
            m = result["metrics"]
            print(
                f"  {name}: makespan {m['makespan_s']:.0f} s, mean wait {m['mean_wait_s']:.1f} s, "
                f"utilization {m['gpu_utilization']:.3f} ({result['wall_s']:.0f} s wall)",
                flush=True,
            )
    finally:
        if not args.keep_cluster:
            cluster.down()
    report["runs"] = runs
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if "slurm" in runs and "hylo" in runs:
        m1, m2 = runs["slurm"]["metrics"], runs["hylo"]["metrics"]
        report["comparison"] = {
            "makespan_pct": rel(m2["makespan_s"], m1["makespan_s"]),
            "mean_wait_pct": rel(m2["mean_wait_s"], m1["mean_wait_s"]),
            "utilization_pct": rel(m2["gpu_utilization"], m1["gpu_utilization"]),
            "paper_pct": PAPER,
        }
        print(table(m1, m2))
        adapter = runs["hylo"].get("hylo", {}).get("adapter")
        if adapter:
            a = adapter
            print(
                f"adapter: {a['decisions_applied']} decisions applied ({a['decisions_per_s']}/s), "
                f"{a['scontrol_updates']} scontrol updates, {a['gone']} gone, {a['failed']} failed"
            )
        if not args.quick:
            who = f"Hylo ({'model' if args.model else args.base_policy + ' base policy'})"
            plot(
                {"Slurm multifactor": runs["slurm"], who: runs["hylo"]},
                args.plot,
                f"{len(jobs)} sleep jobs from slurm_workloads_256 on the local testbed Slurm",
            )
            print(f"wrote {args.plot}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=float) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
