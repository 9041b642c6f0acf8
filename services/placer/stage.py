"""The placer's processing logic, free of the bus: PriorityVector -> PlacementDecision.

Every featurized job gets a ``JobPlacement``: its rank (0 = highest priority; ties by submit time,
then matrix order), its priority, its feature row (column -> value), and, when the vector and the
matrix carry them (schema version 7), the model's raw score and the raw values behind its features,
passed through for the store. Jobs that start now also get ``nodes`` (names from the snapshot) and
``mode``; jobs that wait with an EASY reservation get ``reserved_s``, the time they are planned to
start.

**The decision is one cycle of the simulator** (``shared.sim.cycle_on``): the snapshot's cluster is
described as the simulator keeps it (``shared.schemas.snapshot_cluster``: running jobs with their
allocations and estimated ends, exact when the adapter reports allocations; whatever else holds
resources, never released by a plan; per cluster a ``ClusterDescriber`` builds anew only the
running jobs that changed since the last snapshot) and the simulator's own loop runs one scheduling
cycle on it with the jobs in rank order: the same EASY reservations, backfill, shortcuts and
placement calls (best-fit, or CP-SAT on the top K startable jobs) as ``hylo simulate``, under the
same ``SimConfig``. A replay through the services therefore gets the simulator's schedule
(``tests/sim/test_applied.py``, ``tests/adapter_sim/test_pipeline_e2e.py``).

Jobs the binding excludes (no node group could ever hold them) wait, without a reservation.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement import CpSatPlacer, PlacerSettings
from shared.scheduling.state import Alloc
from shared.schemas.columns import pick
from shared.schemas.limits import Limits, limits_or_configured
from shared.schemas.messages import PlacementDecision, Placements, PriorityVector
from shared.schemas.numbers import column_array
from shared.schemas.packed import FloatRows, empty_table
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.schemas.snapshot_cluster import ClusterDescriber, DescribedCluster, describe_cluster
from shared.schemas.stage_error import StageError
from shared.schemas.views import PendingBinding, bind_pending
from shared.sim.config import SimConfig
from shared.sim.cycle_on import PendingColumns, cycle_on

__all__ = ["SERVICE_SETTINGS", "Decided", "PlacerStage", "PreparedSnapshot", "Reservation", "rank_order"]

log = logging.getLogger("hylo.placer")

Placement = Literal["first-fit", "best-fit", "cp-sat"]
#: the placer service's CP-SAT settings: no solve when best-fit starts the whole batch on its fewest
#: nodes (status ALL_FIT; ``PlacerSettings.solve_when_all_fit``). Why: on a burst (hundreds of
#: pending jobs that fit) that solve alone costs 12-16 ms of a 50 ms budget and can then only change
#: fragmentation and look-ahead; measured in ``docs/results/placement.md`` (latency section)
SERVICE_SETTINGS = PlacerSettings(solve_when_all_fit=False)


def rank_order(priorities: npt.ArrayLike, submit: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Rows in rank order: priority descending, ties by submit time, then row (matrix) order."""
    p = np.asarray(priorities, dtype=np.float64)
    s = np.asarray(submit, dtype=np.float64)
    return np.lexsort((np.arange(len(p)), s, -p)).astype(np.int64)


@dataclass
class Reservation:
    """An EASY reservation: matrix row ``row`` is planned to start at ``when``."""

    row: int
    when: float


@dataclass
class Decided:
    """What the cycle decided: allocations and reservations by matrix row, and how."""

    allocs: dict[int, Alloc]
    spread: dict[int, bool]
    reservations: list[Reservation]
    status: str | None


@dataclass(eq=False)
class PreparedSnapshot:
    """A snapshot's described cluster and pending binding, built before its priorities arrive."""

    snapshot: QueueSnapshot
    #: the binding of every pending job of the snapshot, and the ids of those it kept
    binding: PendingBinding
    kept_ids: tuple[str, ...]
    cluster: DescribedCluster

    def binding_of(self, jobs: PendingJobs) -> PendingBinding | None:
        """``bind_pending(jobs)`` when ``jobs`` are exactly the snapshot's kept jobs (as the
        featurizer sends them), derived from the snapshot's binding; else None."""
        if jobs.job_id != self.kept_ids:
            return None
        b = self.binding
        return PendingBinding(
            kept=tuple(range(len(b.kept))),
            cpus_milli=b.cpus_milli,
            mem_mib=b.mem_mib,
            groups=b.groups,
            excluded=(),
            eligible=b.eligible,
        )


class PlacerStage:
    """Places the jobs of priority vectors on the clusters in ``specs`` (cluster name -> spec).

    ``placement``: ``"cp-sat"`` (the batch placer on the top ``settings.k`` startable jobs, best-fit
    for the rest), ``"best-fit"`` or ``"first-fit"``. ``settings.node_slack`` applies to all and
    must match the featurizer's. ``config``: the scheduler's backfill and reservation rules (the simulator's
    ``SimConfig``; its placement and CP-SAT fields are set from ``placement`` and ``settings``).
    ``limits`` are the service's message limits (the decision is validated under them).
    """

    def __init__(
        self,
        specs: Mapping[str, ClusterSpec],
        placement: Placement = "cp-sat",
        settings: PlacerSettings | None = None,
        limits: Limits | None = None,
        config: SimConfig | None = None,
    ) -> None:
        if placement not in ("first-fit", "best-fit", "cp-sat"):
            raise ValueError(f"unknown placement {placement!r}; choose first-fit, best-fit or cp-sat")
        self.specs = dict(specs)
        self.placement: Placement = placement
        self.settings = settings or SERVICE_SETTINGS
        self.cpsat = CpSatPlacer(self.settings) if placement == "cp-sat" else None
        self.config = (config or SimConfig()).model_copy(
            update={
                "placement": placement,
                "cpsat_k": self.settings.k,
                "node_slack": self.settings.node_slack,
            }
        )
        self.limits = limits_or_configured(limits)
        self._context = self.limits.context()
        #: per cluster, the describer that reuses the last snapshot's running jobs, and its lock
        self._describers: dict[str, tuple[ClusterDescriber, threading.Lock]] = {}

    def spec_of(self, cluster: str) -> ClusterSpec:
        spec = self.specs.get(cluster)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            raise StageError(f"unknown cluster {cluster!r}: no cluster spec configured (known: {known})")
        return spec

    def describe(self, snap: QueueSnapshot, spec: ClusterSpec) -> DescribedCluster:
        """``describe_cluster(snap, spec)``, through the cluster's ``ClusterDescriber``: only the
        running jobs that changed since the last snapshot described are built anew (the result is
        the same). While another thread describes for the same cluster (``handle`` runs in a
        worker thread, ``prepare`` on the event loop) this one describes from scratch instead of
        waiting."""
        describer, lock = self._describers.setdefault(snap.cluster, (ClusterDescriber(), threading.Lock()))
        if not lock.acquire(blocking=False):
            return describe_cluster(snap, spec)
        try:
            return describer.describe(snap, spec)
        finally:
            lock.release()

    # -- the message ----------------------------------------------------------------------------

    def prepare(self, snap: QueueSnapshot) -> PreparedSnapshot:
        """What a decision on ``snap`` will need whatever the priorities (``PreparedSnapshot``).

        Raises ``StageError`` if the snapshot contradicts the spec (``handle`` says so again).
        """
        spec = self.spec_of(snap.cluster)
        try:
            binding = bind_pending(snap.pending, spec, self.settings.node_slack)
            cluster = self.describe(snap, spec)
        except (KeyError, ValueError) as err:
            raise StageError(
                f"snapshot {snap.correlation_id} does not fit cluster spec {spec.name!r}: {err}"
            ) from None
        kept_ids = pick(snap.pending.job_id, binding.kept)
        return PreparedSnapshot(snap, binding, kept_ids, cluster)

    def handle(
        self,
        vector: PriorityVector,
        snap: QueueSnapshot,
        sequence: int | None = None,
        prepared: PreparedSnapshot | None = None,
    ) -> PlacementDecision:
        """The decision for ``vector`` against its snapshot ``snap``; ``sequence`` defaults to the
        snapshot's. ``prepared``: ``prepare(snap)``, if it was made ahead (used when it applies).
        ``StageError`` if ``snap`` is not the vector's snapshot or contradicts the spec.
        """
        t0 = time.perf_counter()
        matrix = vector.matrix
        if (snap.cluster, snap.correlation_id) != (vector.cluster, vector.correlation_id):
            raise StageError(
                f"vector {vector.cluster}/{vector.correlation_id} placed against snapshot "
                f"{snap.cluster}/{snap.correlation_id}"
            )
        spec = self.spec_of(snap.cluster)
        jobs = matrix.jobs
        submit = np.array(jobs.submit_s, dtype=np.float64).reshape(len(jobs))
        order = rank_order(vector.priorities, submit)
        ready = prepared if prepared is not None and prepared.snapshot is snap else None
        try:
            binding = (ready.binding_of(jobs) if ready else None) or bind_pending(
                jobs, spec, self.settings.node_slack
            )
            cluster = ready.cluster if ready else self.describe(snap, spec)
        except (KeyError, ValueError) as err:
            raise StageError(
                f"snapshot {snap.correlation_id} does not fit cluster spec {spec.name!r}: {err}"
            ) from None
        try:
            decided = self.decide(spec, cluster, jobs, binding, order, snap.time)
        except ValueError as err:  # a snapshot whose running jobs contradict its nodes
            raise StageError(f"snapshot {snap.correlation_id}: {err}") from None
        placements = self._placements(cluster, decided, order, vector)
        latencies = dict(vector.latencies_ms)
        fields: dict[str, Any] = {
            "cluster": vector.cluster,
            "correlation_id": vector.correlation_id,
            "snapshot_time": snap.time,
            "sequence": snap.sequence if sequence is None else sequence,
            "policy": vector.policy,
            "model_version": vector.model_version,
            "fallback": vector.fallback,
            "placements": placements,
            "placer": self.placement,
            "placer_status": decided.status,
            "latencies_ms": latencies,
        }
        try:
            decision = PlacementDecision.model_validate(fields, context=self._context)
        except ValidationError as err:
            raise StageError(
                f"vector {vector.correlation_id}: placement decision is invalid: {err}"
            ) from None
        latencies["place"] = (time.perf_counter() - t0) * 1e3
        return decision.model_copy(update={"latencies_ms": latencies})

    @staticmethod
    def _placements(
        cluster: DescribedCluster, decided: Decided, order: npt.NDArray[np.int64], vector: PriorityVector
    ) -> Placements:
        """The decision's columns, in rank order.

        Every part was validated already (job ids, node names, features, priorities), so the columns
        are built without a second validation: as 1,024 row objects they cost milliseconds.
        """
        matrix = vector.matrix
        rows = order.tolist()
        reserved = {r.row: r.when for r in decided.reservations if math.isfinite(r.when)}
        allocs, spread = decided.allocs, decided.spread
        n = len(rows)
        # most rows of a long queue wait: their columns are filled at once, and only the rows
        # that start (a few hundred) and those with a reservation are visited
        counts: list[int] = [0] * n
        modes: list[Literal["pack", "spread"] | None] = [None] * n
        share: list[int] = [-1] * n
        reserved_s: list[float | None] = [None] * n
        rank_of = np.empty(n, dtype=np.int64)
        rank_of[order] = np.arange(n, dtype=np.int64)
        for row, when in reserved.items():
            reserved_s[int(rank_of[row])] = when
        nodes: list[str] = []
        # the exact allocations (schema version 6), so that a cluster that starts jobs where it is
        # told applies the simulator's decision as it is
        whole: list[int] = []
        cpu: list[int] = []
        mem: list[int] = []
        mask: list[int] = []
        placed = sorted((int(rank_of[row]), row) for row in allocs)
        for k, row in placed:
            a = allocs[row]
            names = cluster.names_of(a)
            counts[k] = len(names)
            nodes.extend(names)
            modes[k] = "spread" if spread.get(row, False) else "pack"
            whole += a.whole
            cpu += a.cpu
            mem += a.mem
            mask += a.gpu_masks()
            share[k] = a.frac_gpu if a.milli else -1
        given = bool(nodes)
        # ``pick`` gathers at C speed: generators over the 1,024 rows cost 0.3 ms per decision
        return Placements.model_construct(
            job_id=pick(matrix.jobs.job_id, rows),
            rank=tuple(range(len(rows))),
            priority=pick(vector.priorities, rows),
            node_count=tuple(counts),
            nodes=tuple(nodes),
            mode=tuple(modes),
            reserved_s=tuple(reserved_s),
            node_gpus=tuple(whole),
            node_cpus_milli=tuple(cpu),
            node_mem_mib=tuple(mem),
            node_gpu_mask=tuple(mask),
            share_gpu=tuple(share) if given else (),
            feature_columns=matrix.columns,
            # one numpy gather: the rows stay float64 bits, packed again on the wire
            features=FloatRows(matrix.values.array[order]),
            # what the store records beside the order (schema version 7): the model's scores, the
            # raw values behind the features
            score=pick(vector.scores, rows) if vector.scores else (),
            raw_feature_columns=matrix.raw_columns if matrix.raw_values else (),
            raw_features=FloatRows(matrix.raw_values.array[order]) if matrix.raw_values else empty_table(),
        )

    # -- the cycle ------------------------------------------------------------------------------

    def decide(
        self,
        spec: ClusterSpec,
        cluster: DescribedCluster,
        jobs: PendingJobs,
        binding: PendingBinding,
        order: npt.NDArray[np.int64],
        now: float,
    ) -> Decided:
        """One simulator cycle at ``now`` on ``cluster`` with the kept jobs in rank ``order``.

        The requests go to the cycle as columns (``PendingColumns``): numpy gathers in rank order,
        not one object per job (50,000 of them cost about 80 ms)."""
        kept = np.asarray(binding.kept, dtype=np.int64)
        position = np.full(len(jobs), -1, dtype=np.int64)
        position[kept] = np.arange(len(kept), dtype=np.int64)
        ranked_np = order[position[order] >= 0]
        at = position[ranked_np]
        ranked = ranked_np.tolist()
        gpus = column_array(jobs.gpus, np.int64)
        milli = column_array(jobs.gpu_milli, np.int64)
        est = column_array(jobs.est_runtime_s, np.float64)
        cpus = np.asarray(binding.cpus_milli, dtype=np.int64).reshape(-1)[at]
        mem = np.asarray(binding.mem_mib, dtype=np.int64).reshape(-1)[at]
        g_ranked = gpus[ranked_np]
        # a job asking for nothing fits a node with nothing free: where some nodes are drained,
        # down or unreported it asks for one milli-CPU, so that it never lands on one of those
        least = 0 if cluster.all_up else 1
        cpus = np.where((cpus == 0) & (g_ranked == 0) & (mem == 0), least, cpus)
        pending = PendingColumns(
            gpus=g_ranked,
            milli=milli[ranked_np],
            cpus_milli=cpus,
            mem_mib=mem,
            groups=pick(binding.groups, at.tolist()),
            est_runtime_s=est[ranked_np],
        )
        try:
            out = cycle_on(
                spec,
                now,
                cluster.running,
                pending,
                self.config,
                blocked=cluster.blocked,
                batch_placer=self.cpsat,
                state_of=lambda track: cluster.state(spec, track),
            )
        except ValueError:
            raise
        except Exception:  # a bug in the batch placer must not lose the decision: best-fit decides
            if self.cpsat is None:
                raise
            log.exception("CP-SAT placement failed; best-fit decides")
            fallback = self.config.model_copy(update={"placement": "best-fit"})
            out = cycle_on(
                spec,
                now,
                cluster.running,
                pending,
                fallback,
                blocked=cluster.blocked,
                state_of=lambda track: cluster.state(spec, track),
            )
            out.status = "ERROR_FALLBACK"
        allocs = {ranked[k]: a for k, a in out.starts.items()}
        spread = {row: _spread(spec, int(gpus[row]), int(milli[row]), a) for row, a in allocs.items()}
        reservations = [Reservation(ranked[k], when) for k, when in sorted(out.reserved.items())]
        return Decided(allocs, spread, reservations, out.status)


def _spread(spec: ClusterSpec, gpus: int, milli: int, a: Alloc) -> bool:
    """On more nodes than the fewest that can hold it (only with ``node_slack`` > 0)."""
    if gpus <= 1 or milli < WHOLE_GPU_MILLI:
        return len(a.nodes) > 1
    g = spec.node_groups[a.group].gpus
    return len(a.nodes) > max(1, -(-gpus // max(g, 1)))
