"""One scenario, two external systems: what the contract tests need from each cluster adapter's world.

The contract (``shared.service.cluster_adapter.ClusterAdapter``) is what the tests call; a harness
only sets the scene in its system's own terms and lets time pass:

- ``queue_behind_blocker``: one job holds the resources four others need, and those four wait
  behind it (submitted in order);
- ``release_blocker``: that job ends (Slurm: ``scancel``; the simulator: it ends by itself);
- ``advance``: the external system moves on (Slurm: half a second of real time; the simulator:
  to its next event); False once nothing more will happen;
- ``changes``: what of the system a decision changes (Slurm: the waiting jobs' priorities as squeue
  shows them; the simulator: the jobs started at this event).

``SlurmHarness`` runs on the real local Slurm (``tests/adapter_slurm/conftest.py``), on node
``p100-1`` alone, held with a file lock so that contract tests on several pytest-xdist workers do
not share it (the adapter tests there keep to other nodes, or to jobs that never start).
``SimHarness`` runs the simulated cluster in a thread, stopped at each event until the test
advances it, as the lockstep bus round trip stops it in production.
"""

from __future__ import annotations

import contextlib
import fcntl
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from services.adapter_sim.cluster import SimApplied, SimObservation, SimulatedCluster, as_cluster_adapter
from services.adapter_sim.errors import RunStopped
from shared.domain.jobs import build_table
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.state import Alloc
from shared.schemas import JobPlacement, PlacementDecision, Placements, QueueSnapshot
from shared.service.cluster_adapter import ClusterAdapter
from shared.sim.applied import ClusterView, run_applied
from shared.sim.config import SimConfig
from tests.adapter_slurm.conftest import SlurmCluster, wait_for
from tests.sim.sim_helpers import one_group_spec

QUEUED = 4


class Harness(Protocol):
    adapter: ClusterAdapter[Any, Any]

    def queue_behind_blocker(self) -> tuple[str, list[str]]: ...

    def release_blocker(self) -> None: ...

    def advance(self) -> bool: ...

    def changes(self) -> object: ...

    def close(self) -> None: ...


def decision_for(
    snapshot: QueueSnapshot, order: Sequence[str], *, place: bool = True, force: bool = False
) -> PlacementDecision:
    """The placer's answer to ``snapshot``, written by the test: ``order`` ranked first to last, and
    (``place``) the first of them placed on a node with room for it, as the placer would; ``force``
    places it on the first node whether it fits or not."""
    gpus = {p.job_id: p.gpus for p in snapshot.pending}
    rows: list[JobPlacement] = []
    for rank, job_id in enumerate(order):
        nodes: tuple[str, ...] = ()
        if rank == 0 and (place or force):
            room = [n.name for n in snapshot.nodes if force or n.free_gpus >= gpus.get(job_id, 0)]
            nodes = tuple(room[:1])
        rows.append(JobPlacement(job_id=job_id, rank=rank, priority=float(len(order) - rank), nodes=nodes))
    return PlacementDecision(
        cluster=snapshot.cluster,
        correlation_id=snapshot.correlation_id,
        snapshot_time=snapshot.time,
        sequence=snapshot.sequence,
        policy="contract-test",
        placements=Placements.of(rows),
    )


class SlurmHarness:
    """The Slurm adapter on the real local Slurm; the scene lives on node p100-1 (4 GPUs)."""

    NODE = "p100-1"

    def __init__(self, slurm: SlurmCluster) -> None:
        self.slurm = slurm
        self.adapter = slurm.adapter(slurm_partitions=("gpu",))
        self.jobs: list[str] = []
        self.blocker: str | None = None
        self.queued: list[str] = []
        self._lock = Path(f"{slurm.state_dir}.{self.NODE}.lock").open("a")  # noqa: SIM115
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    def _submit(self, command: str) -> str:
        job = self.slurm.submit("-p", "gpu", "-w", self.NODE, "--gres=gpu:p100:4", "-t", "5", command=command)
        self.jobs.append(job)
        return job

    def queue_behind_blocker(self) -> tuple[str, list[str]]:
        self.blocker = self._submit("sleep 300")
        blocker = self.blocker
        wait_for(
            lambda: "RUNNING" in self.slurm.run("squeue", "-h", "-j", blocker, "-o", "%T"),
            60,
            f"the blocker {blocker} to run on {self.NODE}",
        )
        self.queued = [self._submit("sleep 1") for _ in range(QUEUED)]
        return blocker, list(self.queued)

    def release_blocker(self) -> None:
        if self.blocker is not None:
            self.slurm.cancel(self.blocker)

    def advance(self) -> bool:
        time.sleep(0.5)
        return True

    def changes(self) -> object:
        """The queued jobs' priorities and states (the running blocker's priority is Slurm's)."""
        out = self.slurm.run("squeue", "-h", "-t", "all", "-j", ",".join(self.queued), "-o", "%i %Q %T")
        return sorted(tuple(line.split()) for line in out.splitlines() if line.strip())

    def close(self) -> None:
        try:
            self.slurm.cancel(*self.jobs)
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


class _Stepper:
    """``run_applied``'s decider: shows each event to the cluster, then waits for the test."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.cluster = cluster
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.go = threading.Semaphore(0)
        self.closing = False

    def decide(self, view: ClusterView) -> dict[int, Alloc]:
        self.cluster.at(view)
        if self.cluster.handed_back:
            return self.cluster.own_cycle()
        self.events.put(("event", view.now))
        self.go.acquire()
        if self.closing:
            raise RunStopped("the test ended")
        return dict(self.cluster.event_starts)


class SimHarness:
    """The simulated cluster: one node of 4 GPUs; the blocker runs 100 s, each queued job 10 s."""

    def __init__(self) -> None:
        ids = ["blocker", *(f"q{k}" for k in range(QUEUED))]
        runtime = [100.0] + [10.0] * QUEUED
        jobs = build_table(
            ids=ids,
            submit=[float(k) for k in range(len(ids))],
            runtime=runtime,
            estimate=runtime,
            gpus=[4] * len(ids),
        )
        self.bound = bind_jobs(jobs, one_group_spec(1, 4))
        self.estimate = np.asarray(runtime)
        self.base = make_policy("fcfs")
        self.cluster = SimulatedCluster(self.bound, self.estimate, self.base, SimConfig(), "contract-sim")
        self.adapter: ClusterAdapter[SimObservation, SimApplied] = as_cluster_adapter(self.cluster)
        self.stepper = _Stepper(self.cluster)
        self.thread = threading.Thread(target=self._run, name="contract-sim", daemon=True)
        self.now = -1.0

    def _run(self) -> None:
        try:
            applied = run_applied(self.bound, self.stepper, self.estimate, policy=self.base)
        except Exception as err:
            self.stepper.events.put(("error", err))
        else:
            self.stepper.events.put(("end", applied.tail))

    def _next(self) -> bool:
        kind, value = self.stepper.events.get(timeout=30)
        if kind == "error":
            raise value
        if kind == "end":
            self.cluster.note_end(value)
            return False
        self.now = value
        return True

    def queue_behind_blocker(self) -> tuple[str, list[str]]:
        self.thread.start()
        assert self._next() and self.now == 0.0
        self.cluster.own_cycle()  # the cluster's own scheduler starts the blocker at t = 0
        while self.now < QUEUED:  # the queued jobs arrive at t = 1 ... 4
            assert self.advance()
        return "blocker", [f"q{k}" for k in range(QUEUED)]

    def release_blocker(self) -> None:
        """Nothing to do: the blocker ends at t = 100 by itself."""

    def advance(self) -> bool:
        self.stepper.go.release()
        return self._next()

    def changes(self) -> object:
        return sorted(self.cluster.builder.job_ids[j] for j in self.cluster.event_starts)

    def close(self) -> None:
        self.stepper.closing = True
        self.stepper.go.release()
        if self.thread.ident is not None:
            self.thread.join(timeout=30)
        with contextlib.suppress(queue.Empty):
            while True:
                self.stepper.events.get_nowait()
