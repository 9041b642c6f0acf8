"""The simulator's live state -> a ``QueueSnapshot``, as a cluster adapter would report it.

Why a class with caches: a pending job's description (submit time, request, estimate, user) never
changes while it waits, and a running job's (nodes, allocation, start, estimated end) never changes
while it runs, so each is validated once, when first needed, and reused in every later snapshot.
Only the node states are rebuilt each cycle. Building every pending job up front also means a job
that cannot be described on the bus (an id with whitespace, say) stops the run before it starts,
with the job named, instead of in the middle of it.

A running job carries its exact allocation (schema version 6: whole GPUs, CPUs and memory per node,
which physical GPUs, a fractional job's GPU), so that the placer can rebuild the simulator's cluster
state from a snapshot instead of guessing it from the free resources.

Node names are ``<group name>-<index>`` in the cluster spec's order (``v100m32-0``,
``v100m32-1``, ...), the names the placer answers with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from shared.domain.jobs import FloatArray, IntArray
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc, ClusterState
from shared.schemas import NodeStates, PendingJob, PendingJobs, QueueSnapshot, RunningJob, RunningJobs
from shared.schemas.snapshot import NODE_COLUMNS, WHOLE
from shared.schemas.snapshot_cluster import allocation_fields

#: pending jobs per snapshot unless configured otherwise (oldest first; see ``SnapshotBuilder``)
DEFAULT_MAX_PENDING = 1024


class SnapshotError(ValueError):
    """A job or node of the workload cannot be described in a snapshot (names the culprit)."""


def node_names(workload: BoundWorkload) -> list[list[str]]:
    """``names[group][index]``: ``<group name>-<index>`` in the cluster spec's order."""
    return [[f"{g.name}-{i}" for i in range(g.count)] for g in workload.spec.node_groups]


class SnapshotBuilder:
    """Describes the simulated cluster of one bound workload at one moment.

    ``max_pending`` caps the pending jobs of a snapshot: the oldest ``max_pending`` queued jobs (by
    arrival), which is what a Slurm adapter sees first in ``squeue``. Jobs beyond the cap are not
    seen by the placer: they wait until they are among the oldest ``max_pending``.
    """

    def __init__(
        self,
        workload: BoundWorkload,
        estimate: FloatArray,
        cluster: str,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        job_id_prefix: str = "",
    ) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.workload = workload
        self.cluster = cluster
        self.max_pending = max_pending
        self.est = estimate
        self.names = node_names(workload)
        self.groups = [g.name for g in workload.spec.node_groups]
        jobs = workload.jobs
        self.job_ids: list[str] = [f"{job_id_prefix}{j}" for j in jobs.ids.tolist()]
        self.pending_jobs = self._describe_pending()
        self._running: dict[int, RunningJob] = {}

    def _describe_pending(self) -> list[PendingJob]:
        jobs = self.workload.jobs
        submit, est = jobs.submit.tolist(), self.est.tolist()
        gpus, milli = jobs.gpus.tolist(), jobs.gpu_milli.tolist()
        cpus, mem = jobs.cpus_milli.tolist(), jobs.mem_mib.tolist()
        users, vcs, qoses = jobs.user.tolist(), jobs.vc.tolist(), jobs.qos.tolist()
        types = jobs.type_set.tolist()
        out: list[PendingJob] = []
        for j, job_id in enumerate(self.job_ids):
            try:
                out.append(
                    PendingJob(
                        job_id=job_id,
                        submit_s=submit[j],
                        gpus=gpus[j],
                        gpu_milli=milli[j] if gpus[j] else WHOLE,
                        gpu_types=jobs.type_sets[types[j]],
                        cpus_milli=cpus[j],
                        mem_mib=mem[j],
                        est_runtime_s=est[j],
                        user=jobs.users[users[j]],
                        partition=jobs.vcs[vcs[j]],
                        qos=jobs.qoses[qoses[j]],
                    )
                )
            except ValidationError as err:
                first = err.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise SnapshotError(
                    f"job {job_id!r} (row {j}) cannot be sent in a snapshot: {where}: {first['msg']}"
                ) from None
        return out

    def started(self, j: int, alloc: Alloc, now: float) -> None:
        """Record job ``j``'s nodes, exact allocation and estimated end (called once, when it starts).

        The allocation is ``alloc``'s: whole GPUs, milli-CPUs and MiB per node, the physical GPUs
        as a bitmask per node (0 where the group does not track GPUs: not known) and, for a
        fractional job, the GPU holding its share (its ``whole`` entries are 0).
        """
        names = self.names[alloc.group]
        jobs = self.workload.jobs
        gpus = int(jobs.gpus[j])
        milli = int(jobs.gpu_milli[j]) if gpus else WHOLE
        self._running[j] = RunningJob(
            job_id=self.job_ids[j],
            nodes=tuple(names[i] for i in alloc.nodes),
            gpus=gpus,
            gpu_milli=milli,
            start_s=now,
            est_end_s=now + float(self.est[j]),
            **allocation_fields(alloc),
        )

    def ended(self, j: int) -> None:
        self._running.pop(j, None)

    def nodes(self, state: ClusterState) -> NodeStates:
        """Free resources of every node now (every node is ``up``: the simulator has no failures)."""
        cols: dict[str, list[Any]] = {c: [] for c in NODE_COLUMNS}
        for gs, group, names in zip(state.groups, self.groups, self.names, strict=True):
            whole = gs.whole.tolist()
            # largest free share on one GPU: tracked per GPU where shares exist, else whole or none
            share = gs.maxfrac.tolist() if gs.maxfrac is not None else [WHOLE if w > 0 else 0 for w in whole]
            cols["name"] += names
            cols["group"] += [group] * len(names)
            cols["free_gpus"] += whole
            cols["free_share_milli"] += share
            cols["free_cpus_milli"] += gs.cpu.tolist()
            cols["free_mem_mib"] += gs.mem.tolist()
            cols["state"] += ["up"] * len(names)
        return NodeStates(**{c: tuple(v) for c, v in cols.items()})

    def build(
        self,
        state: ClusterState,
        running: Mapping[int, Alloc],
        queued: IntArray,
        now: float,
        sequence: int,
        correlation_id: str,
    ) -> tuple[QueueSnapshot, int]:
        """The snapshot at ``now`` of jobs ``queued`` (arrival order) and every running job.

        Returns the snapshot and how many queued jobs were left out by ``max_pending``.
        """
        shown = queued[: self.max_pending].tolist()
        snapshot = QueueSnapshot(
            cluster=self.cluster,
            correlation_id=correlation_id,
            time=now,
            sequence=sequence,
            pending=PendingJobs.of(self.pending_jobs[j] for j in shown),
            running=RunningJobs.of(self._running[j] for j in running),
            nodes=self.nodes(state),
        )
        return snapshot, len(queued) - len(shown)
