"""The placer's processing logic, free of the bus: PriorityVector -> PlacementDecision.

Every featurized job gets a ``JobPlacement``: its rank (0 = highest priority; ties by submit time,
then matrix order), its priority, and its feature row (column -> value). Jobs that can start now
also get ``nodes`` (names from the snapshot) and ``mode``.

**How jobs are placed.** The snapshot's free resources become the simulator's ``ClusterState``
(``shared.schemas.snapshot_state``); the jobs are then walked in rank order, as one scheduling
cycle of the simulator under EASY backfill (``shared.sim.simulator``), on that state:

- a job that fits starts: best-fit's nodes (``shared.scheduling.placement.BestFit``'s choice, made on the
  walk's own copy of the free resources, ``shared.placement.walk.WalkState``), or, with
  ``placement="cp-sat"``, the nodes ``CpSatPlacer.place_batch`` chose for the top K startable jobs
  (plus ``lookahead`` next ones) when they still fit (with the service's settings no solve when
  best-fit starts that batch whole: status ALL_FIT, ``SERVICE_SETTINGS``); a job of that batch
  CP-SAT chose not to start is held back although it fits (CP-SAT keeps the priority order among
  its batch, see ``docs/placement.md``). The batch is solved before the walk and knows nothing of
  reservations: once one of its allocations is ruled out (a reservation's nodes, or no longer
  room), its choices not to start jobs no longer hold and best-fit decides the rest. If the solve
  fails, best-fit decides and ``placer_status`` says so;
- the highest-ranked job of a pool of node groups that cannot start (resources only) gets an EASY
  **reservation** (one per disjoint pool, as the simulator's default): the estimated time ``T`` it
  could start and the nodes it would take then (``JobPlacement.reserved_s`` records ``T``). A
  lower-ranked job estimated to run past ``T`` may not use those nodes at all, so it cannot delay
  the reserved job; one that ends by ``T`` may start anywhere.

**The reservation is a conservative simplification** of the simulator's (a snapshot does not say how
a running job's resources split over its nodes):

- ``T`` comes from replaying the running jobs' ends (``est_end_s``, clamped to now) on the nodes of
  the job's groups: whole GPUs return exactly for single-node jobs, evenly split for gangs; a node's
  used CPUs and memory return in proportion to the GPUs released, and completely with the node's
  last known job (as do GPUs held by shares). Jobs started by this decision return exactly their
  allocation at ``now + est_runtime_s``. Drained, down and unreported nodes never count.
- If the replay never makes room (resources the snapshot attributes to no running job), the pool
  is assumed empty after its last known end; if even that cannot hold the job, it gets no
  reservation (it cannot start on the reported nodes at all).
- The reserved nodes are blocked completely for jobs running past ``T``, where the simulator only
  caps them to what the reserved job leaves over: fewer backfills, never more.

``can_schedule_now`` from the matrix (resources only, the same rules) skips jobs that cannot start
without calling the placer; a request that failed also retires every later one of the same shape
asking for at least as many CPUs and as much memory (resources only shrink during the walk).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement import CpSatPlacer, JobRequest, PlacerSettings
from shared.placement.kernels import replay_free, warm_up
from shared.placement.walk import NeedsFallback, WalkState
from shared.scheduling.placement import BIG, BestFit
from shared.scheduling.state import Alloc, ClusterState, GroupState
from shared.schemas.columns import pick
from shared.schemas.limits import DEFAULT_LIMITS, Limits
from shared.schemas.messages import PlacementDecision, Placements, PriorityVector
from shared.schemas.packed import FloatRows
from shared.schemas.snapshot import PendingJobs, QueueSnapshot
from shared.schemas.snapshot_state import SnapshotState, fill_group, snapshot_state
from shared.schemas.stage_error import StageError
from shared.schemas.views import PendingBinding, bind_pending

__all__ = ["SERVICE_SETTINGS", "Decided", "PlacerStage", "Reservation", "rank_order"]

log = logging.getLogger("hylo.placer")

Placement = Literal["best-fit", "cp-sat"]
#: the placer service's CP-SAT settings: no solve when best-fit starts the whole batch on its fewest
#: nodes (status ALL_FIT; ``PlacerSettings.solve_when_all_fit``). Why: on a burst (hundreds of
#: pending jobs that fit) that solve alone costs 12-16 ms of a 50 ms budget and can then only change
#: fragmentation and look-ahead; measured in ``docs/results/placement.md`` (latency section)
SERVICE_SETTINGS = PlacerSettings(solve_when_all_fit=False)
INF = math.inf


def rank_order(priorities: npt.ArrayLike, submit: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Rows in rank order: priority descending, ties by submit time, then row (matrix) order."""
    p = np.asarray(priorities, dtype=np.float64)
    s = np.asarray(submit, dtype=np.float64)
    return np.lexsort((np.arange(len(p)), s, -p)).astype(np.int64)


class _Job(NamedTuple):
    """One pending job as the walk sees it (a tuple: 1,024 of them are built per decision)."""

    row: int
    gpus: int
    milli: int
    cpu: int
    mem: int
    groups: tuple[int, ...]
    est: float

    @property
    def zero(self) -> bool:
        """Asks for nothing at all: fits even a node with nothing free (kept off unusable nodes)."""
        return self.gpus == 0 and self.cpu == 0 and self.mem == 0


@dataclass
class Reservation:
    """An EASY reservation: ``row`` may start at ``when`` on ``nodes`` (group -> node indices).

    ``blocked``: the same nodes as sets, which a job running past ``when`` may not touch at all.
    """

    row: int
    when: float
    nodes: dict[int, list[int]]
    blocked: dict[int, frozenset[int]] = field(default_factory=dict)


@dataclass
class Decided:
    """What the walk decided: allocations and reservations by matrix row, and how."""

    allocs: dict[int, Alloc]
    spread: dict[int, bool]
    reservations: list[Reservation]
    status: str | None
    held_back: list[int] = field(default_factory=list)


@dataclass(eq=False)
class PreparedSnapshot:
    """A snapshot's cluster state and release profile, built before its priorities arrive.

    ``track`` are the groups ``state`` keeps per-GPU shares for (those of the snapshot's fractional
    pending jobs); a decision uses it only when its own jobs need the same, and only once (the walk
    changes ``state``).
    """

    snapshot: QueueSnapshot
    #: the binding of every pending job of the snapshot, and the ids of those it kept
    binding: PendingBinding
    kept_ids: tuple[str, ...]
    track: frozenset[int]
    state: SnapshotState
    base: _ReplayBase
    used: bool = False
    #: the walk's copy of ``state``'s free resources (built ahead: 0.3-0.5 ms on openb)
    walk: WalkState | None = None
    #: the kept jobs as the walk reads them, in kept order (row = position), and the columns they
    #: were read from (a decision uses them only when its matrix's jobs carry the same values)
    jobs: list[_Job] | None = None
    columns: tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]] | None = None

    def jobs_of(self, jobs: PendingJobs) -> list[_Job] | None:
        """The walk's jobs for ``jobs`` when they are the snapshot's kept jobs with the same GPUs,
        shares and runtime estimates (``binding_of`` checks the ids): what ``decide`` would build
        from them (the CPUs, memory and groups are the binding's own); else None."""
        if self.jobs is None or self.columns is None or jobs.job_id != self.kept_ids:
            return None
        if (jobs.gpus, jobs.gpu_milli, jobs.est_runtime_s) != self.columns:
            return None
        return self.jobs

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


class _Scratch:
    """The minimal ClusterState stand-in ``BestFit.place`` needs: ``groups`` indexable by group."""

    def __init__(self, n_groups: int) -> None:
        self.groups: list[GroupState | None] = [None] * n_groups


@dataclass(frozen=True, eq=False)
class _Free:
    """Free resources per node slot (``NodeLayout``'s order) at one moment of a replay."""

    whole: npt.NDArray[np.int64]
    cpu: npt.NDArray[np.int64]
    mem: npt.NDArray[np.int64]
    share: npt.NDArray[np.int64]


class _ReplayBase:
    """What every reservation of one decision reads: the running jobs per node, capacities, usage."""

    def __init__(self, ss: SnapshotState) -> None:
        lay = ss.layout
        ent = ss.running
        self.ss = ss
        self.n = len(lay.free_gpus)
        self.entries = ent
        self.weight = ent.weight
        cap = ss.capacity_slots
        self.cap = cap
        self.cap_share = np.where(cap[0] > 0, WHOLE_GPU_MILLI, 0)
        # what the snapshot shows in use on each node
        self.used = np.stack(
            (cap[0] - lay.free_gpus, cap[1] - lay.free_cpus_milli, cap[2] - lay.free_mem_mib)
        )
        self.usable = ss.usable_slots


class _Replay:
    """The free resources of some node groups as their running jobs end (estimated), at any time.

    Snapshot jobs: on a node, the whole GPUs of the jobs ended so far return (at most what the
    snapshot shows in use), its used CPUs and memory in proportion to their GPUs (by count when the
    node's jobs hold none), and everything in use with its last known job. Jobs started by this
    decision return exactly their allocation at ``now + est_runtime_s``. A share ended frees at least
    its own milli-GPUs on its node. Drained, down and unreported nodes stay at nothing free.
    """

    def __init__(
        self,
        base: _ReplayBase,
        groups: tuple[int, ...],
        started: list[tuple[_Job, Alloc]],
        now: float,
        free_now: tuple[npt.NDArray[np.int64], ...] | None = None,
    ) -> None:
        ss = base.ss
        lay = ss.layout
        n = base.n
        in_groups = np.zeros(len(ss.spec.node_groups), dtype=bool)
        in_groups[list(groups)] = True
        ent = base.entries
        sel = np.flatnonzero(in_groups[ent.group] & base.usable[ent.slot])
        self.slot = ent.slot[sel]
        self.time = np.maximum(ent.end[sel], now)
        self.whole = ent.whole[sel]
        self.weight = base.weight[sel]
        self.milli = ent.milli[sel]
        self.total_w = np.asarray(np.bincount(self.slot, weights=self.weight, minlength=n), dtype=np.float64)
        self.total_n = np.bincount(self.slot, minlength=n).astype(np.int64)
        # the entries are sorted by end (``RunningEntries``), so the jobs ended by t are a prefix;
        # the shares among them, apart, for the largest-share bookkeeping
        shares = np.flatnonzero(self.milli > 0)
        self.m_time, self.m_slot, self.m_milli = self.time[shares], self.slot[shares], self.milli[shares]
        self.cap = base.cap
        self.cap_share = base.cap_share
        self.used = base.used
        self.usable = base.usable
        # the free state now (after this decision's starts): ``free_now`` (the walk's
        # ``WalkState.free_arrays``) or ``ss.state``'s groups
        if free_now is None:
            st = ss.state.groups
            free_now = (
                np.concatenate([gs.whole for gs in st]),
                np.concatenate([gs.cpu for gs in st]),
                np.concatenate([gs.mem for gs in st]),
                np.concatenate(
                    [
                        gs.maxfrac if gs.maxfrac is not None else np.where(gs.whole > 0, WHOLE_GPU_MILLI, 0)
                        for gs in st
                    ]
                ),
            )
        # int64 and contiguous, as the compiled replay (``free_at``) reads them
        self.now_whole, self.now_cpu, self.now_mem, self.now_share = (
            np.ascontiguousarray(a, dtype=np.int64) for a in free_now
        )
        # this decision's starts in these groups: one row per (job, node)
        rows = [
            (
                int(lay.offsets[a.group]) + i,
                now + j.est,
                a.whole[k],
                a.cpu[k],
                a.mem[k],
                a.milli if a.frac_gpu >= 0 else 0,
            )
            for j, a in started
            if in_groups[a.group] and math.isfinite(j.est)
            for k, i in enumerate(a.nodes)
        ]
        arr = np.array(rows, dtype=np.float64).reshape(len(rows), 6)
        self.s_slot = arr[:, 0].astype(np.int64)
        self.s_time = np.ascontiguousarray(arr[:, 1])
        self.s_res = arr[:, 2:5].astype(np.int64)
        self.s_milli = arr[:, 5].astype(np.int64)
        self.n = n
        t = self.time
        if len(self.s_time) or not len(t) or np.isnan(t[-1]):
            self.times = np.unique(np.concatenate((t, self.s_time)))
        else:  # already sorted (``RunningEntries``): the distinct values without a sort
            self.times = t[np.concatenate(([True], t[1:] != t[:-1]))]

    def free_at(self, t: float) -> _Free:
        """The free resources at ``t``: one compiled pass (``shared.placement.kernels.replay_free``)."""
        k = int(np.searchsorted(self.time, t, side="right"))  # entries ended by t: a prefix
        km = int(np.searchsorted(self.m_time, t, side="right"))
        return _Free(
            *replay_free(
                t,
                k,
                self.slot,
                self.weight,
                self.whole,
                self.total_w,
                self.total_n,
                km,
                self.m_slot,
                self.m_milli,
                self.s_time,
                self.s_slot,
                self.s_res,
                self.s_milli,
                self.used,
                self.now_whole,
                self.now_cpu,
                self.now_mem,
                self.now_share,
                self.usable,
                self.cap,
                self.cap_share,
            )
        )

    def drained(self) -> _Free:
        ok = self.usable
        return _Free(
            np.where(ok, self.cap[0], 0),
            np.where(ok, self.cap[1], 0),
            np.where(ok, self.cap[2], 0),
            np.where(ok, self.cap_share, 0),
        )


class PlacerStage:
    """Places the jobs of priority vectors on the clusters in ``specs`` (cluster name -> spec).

    ``placement``: ``"cp-sat"`` (the batch placer on the top ``settings.k`` startable jobs, best-fit
    for the rest) or ``"best-fit"``. ``settings.node_slack`` applies to both and must match the
    featurizer's. ``limits`` are the service's message limits (the decision is validated under them).
    """

    def __init__(
        self,
        specs: Mapping[str, ClusterSpec],
        placement: Placement = "cp-sat",
        settings: PlacerSettings | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if placement not in ("best-fit", "cp-sat"):
            raise ValueError(f"unknown placement {placement!r}; choose best-fit or cp-sat")
        self.specs = dict(specs)
        self.placement: Placement = placement
        self.settings = settings or SERVICE_SETTINGS
        self.cpsat = CpSatPlacer(self.settings) if placement == "cp-sat" else None
        # the same settings, solving even when best-fit starts the whole batch: used once the
        # walk has found that best-fit does not (``_all_fit``), so the test is not made twice
        self._solver = (
            CpSatPlacer(self.settings.model_copy(update={"solve_when_all_fit": True}))
            if placement == "cp-sat" and not self.settings.solve_when_all_fit
            else None
        )
        self.best = BestFit()
        self.limits = limits
        self._context = limits.context()
        warm_up()  # the walk's compiled scan, compiled or loaded here rather than in a decision

    def spec_of(self, cluster: str) -> ClusterSpec:
        spec = self.specs.get(cluster)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            raise StageError(f"unknown cluster {cluster!r}: no cluster spec configured (known: {known})")
        return spec

    # -- the message ----------------------------------------------------------------------------

    def _track(self, jobs: PendingJobs, binding: PendingBinding) -> frozenset[int]:
        """The groups where a fractional job among ``jobs`` may be placed."""
        milli = jobs.gpu_milli
        return frozenset(
            g
            for pos, gs in zip(binding.kept, binding.groups, strict=True)
            if milli[pos] < WHOLE_GPU_MILLI
            for g in gs
        )

    def prepare(self, snap: QueueSnapshot) -> PreparedSnapshot:
        """What a decision on ``snap`` will need whatever the priorities (``PreparedSnapshot``).

        Raises ``StageError`` if the snapshot contradicts the spec (``handle`` says so again).
        """
        spec = self.spec_of(snap.cluster)
        try:
            binding = bind_pending(snap.pending, spec, self.settings.node_slack)
            track = self._track(snap.pending, binding)
            ss = snapshot_state(snap, spec, track)
            base = _ReplayBase(ss)
        except (KeyError, ValueError) as err:
            raise StageError(
                f"snapshot {snap.correlation_id} does not fit cluster spec {spec.name!r}: {err}"
            ) from None
        pending = snap.pending
        kept = binding.kept
        kept_ids = pick(pending.job_id, kept)
        # what the decision's walk starts from, built here, off the decision's path: its copy of the
        # free resources and the jobs' tuples (as ``decide`` builds them for the matrix's rows,
        # which are the kept jobs in order when the featurizer sent the snapshot's jobs)
        columns = (pick(pending.gpus, kept), pick(pending.gpu_milli, kept), pick(pending.est_runtime_s, kept))
        jobs = self._walk_jobs(pending, binding)
        walk = WalkState(ss.state)
        return PreparedSnapshot(
            snap, binding, kept_ids, track, ss, base, walk=walk, jobs=jobs, columns=columns
        )

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
        try:
            ready = None if prepared is None or prepared.snapshot is not snap else prepared.binding_of(jobs)
            binding = ready or bind_pending(jobs, spec, self.settings.node_slack)
            # the snapshot's own jobs (as the featurizer sends them): the prepared groups to track
            track = prepared.track if ready is not None and prepared else self._track(jobs, binding)
            if (
                prepared is not None
                and prepared.snapshot is snap
                and prepared.track == track
                and not prepared.used
            ):
                prepared.used = True
                ss, base, walk = prepared.state, prepared.base, prepared.walk
                walk_jobs = prepared.jobs_of(jobs) if ready is not None else None
            else:
                ss = snapshot_state(snap, spec, track)
                base, walk, walk_jobs = None, None, None
        except (KeyError, ValueError) as err:
            raise StageError(
                f"snapshot {snap.correlation_id} does not fit cluster spec {spec.name!r}: {err}"
            ) from None
        can_now = None
        if "can_schedule_now" in matrix.columns:
            col = matrix.columns.index("can_schedule_now")
            can_now = matrix.values.array[:, col] > 0.5
        decided = self.decide(ss, jobs, binding, order, snap.time, can_now, base, walk, walk_jobs)

        placements = self._placements(ss, decided, order, vector)
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
        ss: SnapshotState, decided: Decided, order: npt.NDArray[np.int64], vector: PriorityVector
    ) -> Placements:
        """The decision's columns, in rank order.

        Every part was validated already (job ids, node names, features, priorities), so the columns
        are built without a second validation: as 1,024 row objects they cost milliseconds.
        """
        matrix = vector.matrix
        rows = order.tolist()
        reserved = {r.row: r.when for r in decided.reservations if math.isfinite(r.when)}
        allocs, spread = decided.allocs, decided.spread
        counts: list[int] = []
        nodes: list[str] = []
        modes: list[Literal["pack", "spread"] | None] = []
        for row in rows:
            a = allocs.get(row)
            if a is None:
                counts.append(0)
                modes.append(None)
                continue
            names = ss.names_of(a)
            counts.append(len(names))
            nodes.extend(names)
            modes.append("spread" if spread.get(row, False) else "pack")
        # ``pick`` gathers at C speed: generators over the 1,024 rows cost 0.3 ms per decision
        return Placements.model_construct(
            job_id=pick(matrix.jobs.job_id, rows),
            rank=tuple(range(len(rows))),
            priority=pick(vector.priorities, rows),
            node_count=tuple(counts),
            nodes=tuple(nodes),
            mode=tuple(modes),
            reserved_s=tuple(map(reserved.get, rows)),
            feature_columns=matrix.columns,
            # one numpy gather: the rows stay float64 bits, packed again on the wire
            features=FloatRows(matrix.values.array[order]),
        )

    # -- the walk ---------------------------------------------------------------------------------

    def decide(
        self,
        ss: SnapshotState,
        jobs: PendingJobs,
        binding: PendingBinding,
        order: npt.NDArray[np.int64],
        now: float,
        can_now: npt.NDArray[np.bool_] | None = None,
        base: _ReplayBase | None = None,
        walk: WalkState | None = None,
        walk_jobs: list[_Job] | None = None,
    ) -> Decided:
        """Allocations and reservations of one decision.

        ``ss.state`` is used up: the walk works on its own copy (``WalkState``) and brings the
        state up to date only where ``BestFit`` itself must answer, so afterwards it holds an
        unspecified prefix of the starts (``PreparedSnapshot.used`` keeps it from a second use).

        ``base``: ``ss``'s release profile if it was built ahead (else built on the first reservation).
        ``walk``: a fresh ``WalkState(ss.state)`` built ahead (nothing taken yet), and ``walk_jobs``
        the jobs of every row in row order (``PreparedSnapshot.jobs_of``), when built ahead.
        """
        st = ss.state
        slack = self.settings.node_slack
        kept = binding.kept
        if walk_jobs is not None and len(walk_jobs) == len(jobs) == len(kept):
            # every row kept, in order (``binding_of``): ``order`` is a permutation of the rows
            ranked = list(map(walk_jobs.__getitem__, order.tolist()))
        else:
            ranked = self._ranked(jobs, binding, order)
        maybe: list[bool] = [True] * len(jobs) if can_now is None else can_now.tolist()

        preset: dict[int, tuple[Alloc | None, bool]] = {}
        status: str | None = None
        # the walk's own copy of the free resources: best-fit's choices at a fraction of the cost
        if walk is None or walk.st is not st or walk.pending:
            walk = WalkState(st)
        if self.cpsat is not None:
            startable = [j for j in ranked if maybe[j.row] and not j.zero]
            preset, status = self._batch(st, startable, walk)
        unusable: dict[int, frozenset[int]] = {
            g: frozenset(np.flatnonzero(~u).tolist()) for g, u in enumerate(ss.usable) if not u.all()
        }

        allocs: dict[int, Alloc] = {}
        spread: dict[int, bool] = {}
        started: list[tuple[_Job, Alloc]] = []
        reservations: list[Reservation] = []
        res_of_group: dict[int, Reservation] = {}
        # blocked nodes by (groups, which reservations the job runs past): a few dozen distinct
        blocked_of: dict[tuple[tuple[int, ...], tuple[bool, ...]], dict[int, frozenset[int]] | None] = {}
        covered: set[int] = set()  # groups of a pool that has had its reservation (found or not)
        # failed requests per shape: (CPUs, memory, threshold); a later request of the same shape
        # asking for no less, running longer than the threshold (-inf: failed on the raw free
        # resources; else capped by the same reservations), fails too: resources only shrink
        failed: dict[tuple[int, int, tuple[int, ...]], list[tuple[int, int, float]]] = {}
        held: list[int] = []
        intact = True  # no batch allocation overridden yet: CP-SAT's choices not to start still hold
        for job in ranked:
            key = (job.gpus, job.milli, job.groups)
            fits = maybe[job.row]
            if fits and key in failed:
                fits = not any(job.cpu >= c and job.mem >= m and job.est > t for c, m, t in failed[key])
                if not fits and preset.get(job.row, (None, False))[0] is not None:
                    intact = False  # a batch allocation that no longer fits
            if fits:
                # the reserved nodes this job may not touch: a reservation's, if it runs past it
                blocked: dict[int, frozenset[int]] | None = None
                if res_of_group:
                    finish = now + job.est
                    ck = (job.groups, tuple(finish > r.when for r in reservations))
                    if ck in blocked_of:
                        blocked = blocked_of[ck]
                    else:
                        blocked = blocked_of[ck] = {
                            g: res.blocked[g]
                            for g in job.groups
                            if (res := res_of_group.get(g)) is not None
                            and g in res.blocked
                            and finish > res.when
                        } or None
                capped = blocked is not None
                if job.zero and unusable:
                    blocked = dict(blocked or {})
                    for g in job.groups:
                        if g in unusable:
                            blocked[g] = blocked[g] | unusable[g] if g in blocked else unusable[g]
                a: Alloc | None = None
                if job.row in preset:
                    a, wide = preset[job.row]
                    if a is not None and not walk.fits(a, blocked, job.milli):
                        a = None
                        intact = False
                    if a is None:
                        if intact and walk.place(
                            job.gpus, job.milli, job.cpu, job.mem, job.groups, blocked, slack
                        ):
                            held.append(job.row)  # CP-SAT chose not to start it: held back
                            continue
                    else:
                        spread[job.row] = wide
                if a is None:
                    a = walk.place(job.gpus, job.milli, job.cpu, job.mem, job.groups, blocked, slack)
                    if a is not None:
                        spread[job.row] = self._spread(st, job, a)
                if a is not None:
                    walk.take(a)
                    allocs[job.row] = a
                    started.append((job, a))
                    continue
                if capped:
                    assert blocked is not None
                    thr = max(res_of_group[g].when for g in blocked if g in res_of_group) - now
                    failed.setdefault(key, []).append((job.cpu, job.mem, thr))
                    continue  # held back by a reservation (its groups are covered already)
                failed.setdefault(key, []).append((job.cpu, job.mem, -INF))
            if covered.isdisjoint(job.groups):
                covered.update(job.groups)
                if base is None:
                    base = _ReplayBase(ss)
                res = self._reserve(ss, job, started, now, base, walk.free_arrays())
                if res is not None:
                    reservations.append(res)
                    for g in job.groups:
                        res_of_group[g] = res
        return Decided(allocs, spread, reservations, status, held)

    @classmethod
    def _ranked(cls, jobs: PendingJobs, binding: PendingBinding, order: npt.NDArray[np.int64]) -> list[_Job]:
        """The kept jobs as the walk reads them, in rank order."""
        by_row = {job.row: job for job in cls._walk_jobs(jobs, binding)}
        return [by_row[r] for r in order.tolist() if r in by_row]

    @staticmethod
    def _walk_jobs(jobs: PendingJobs, binding: PendingBinding) -> list[_Job]:
        """The kept jobs as the walk reads them, in kept order (``_Job.row``: the job's row)."""
        kept = binding.kept
        if len(kept) == len(jobs):  # every job kept (the usual case): no per-row gathering
            cols = zip(
                kept,
                jobs.gpus,
                jobs.gpu_milli,
                binding.cpus_milli,
                binding.mem_mib,
                binding.groups,
                jobs.est_runtime_s,
                strict=True,
            )
        else:
            gpus, milli, est = jobs.gpus, jobs.gpu_milli, jobs.est_runtime_s
            cols = zip(
                kept,
                [gpus[r] for r in kept],
                [milli[r] for r in kept],
                binding.cpus_milli,
                binding.mem_mib,
                binding.groups,
                [est[r] for r in kept],
                strict=True,
            )
        return list(map(_Job._make, cols))

    def _spread(self, st: ClusterState, job: _Job, a: Alloc) -> bool:
        """On more nodes than the fewest that can hold it (only with ``node_slack`` > 0)."""
        if job.gpus <= 1 or job.milli < WHOLE_GPU_MILLI:
            return len(a.nodes) > 1
        g = st.groups[a.group].G
        return len(a.nodes) > max(1, -(-job.gpus // max(g, 1)))

    def _batch(
        self, st: ClusterState, startable: list[_Job], walk: WalkState | None = None
    ) -> tuple[dict[int, tuple[Alloc | None, bool]], str]:
        """CP-SAT's joint placement of the top K startable jobs (plus the look-ahead ones)."""
        assert self.cpsat is not None
        cfg = self.cpsat.settings
        k = cfg.k
        cands = startable[: k + cfg.lookahead]
        if not cands:
            return {}, "NOTHING_FITS"
        placer = self.cpsat
        if walk is not None and not cfg.solve_when_all_fit:
            fit, sure = self._all_fit(walk, cands[:k])
            if fit is not None:  # single-node allocations: none spread
                return {j.row: (a, False) for j, a in zip(cands[:k], fit, strict=True)}, "ALL_FIT"
            if sure and self._solver is not None:  # best-fit leaves one waiting: the placer solves
                placer = self._solver
        reqs = [
            JobRequest(
                j.gpus,
                j.milli if j.gpus else WHOLE_GPU_MILLI,
                j.cpu,
                j.mem,
                j.groups,
                weight=(k - min(r, k - 1)) / k,  # tier (b): higher rank, more weight
                est_runtime=j.est if math.isfinite(j.est) else 1.0,
                job_id=j.row,
            )
            for r, j in enumerate(cands)
        ]
        try:
            res = placer.place_batch(st, reqs[:k], reqs[k:])
        except Exception:  # a bug in the batch placer must not lose the decision: best-fit decides
            log.exception("CP-SAT placement failed; best-fit decides")
            return {}, "ERROR_FALLBACK"
        preset = {j.row: (d.alloc, d.spread) for j, d in zip(cands[:k], res.decisions, strict=True)}
        return preset, res.status.value

    def _all_fit(self, walk: WalkState, batch: list[_Job]) -> tuple[list[Alloc] | None, bool]:
        """Best-fit's allocations of ``batch`` in order if they start it whole (else None), and
        whether that answer is sure.

        ``CpSatPlacer.place_batch``'s own ALL_FIT test (``solve_when_all_fit=False`` and no group
        costs: best-fit starts every job on its fewest nodes), made on the walk's copy of the free
        resources and each start taken back afterwards: the same best-fit (``WalkState``) without
        copying the cluster again. Not sure when a request only ``BestFit`` itself answers (a
        gang, unsorted groups): the placer then makes the test.
        """
        slack = self.settings.node_slack
        taken: list[Alloc] = []
        sure = True
        try:
            for j in batch:
                a = walk.place(j.gpus, j.milli, j.cpu, j.mem, j.groups, None, slack, fallback=False)
                if a is None:
                    break
                walk.take(a)
                taken.append(a)
        except NeedsFallback:
            sure = False
        finally:
            for a in reversed(taken):
                walk.give(a)
        return (taken if sure and len(taken) == len(batch) else None), sure

    # -- EASY reservations ------------------------------------------------------------------------

    def _reserve(
        self,
        ss: SnapshotState,
        job: _Job,
        started: list[tuple[_Job, Alloc]],
        now: float,
        base: _ReplayBase | None = None,
        free_now: tuple[npt.NDArray[np.int64], ...] | None = None,
    ) -> Reservation | None:
        """The estimated earliest start of ``job`` and the nodes it would take (module docstring).

        Free resources in the replay only grow with time (jobs end, none start), so whether the job
        fits is monotone in time: a binary search over the release times, each probe one vectorized
        pass over the releases of the job's node groups. ``free_now``: the free resources after
        ``started`` (``WalkState.free_arrays``), when ``ss.state`` does not hold them.
        """
        replay = _Replay(base or _ReplayBase(ss), job.groups, started, now, free_now)
        mask = self._single_mask(ss, job)
        times = replay.times
        lo, hi = 0, len(times)  # the first time index where the job fits, in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._fit(ss, job, replay.free_at(times[mid]), mask) is not None:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(times):
            when = float(times[lo])
            free = replay.free_at(when)
        else:  # no room from known releases: assume the pool empty after its last known end
            when = float(times[-1]) if len(times) else now
            free = replay.drained()
        plan = self._fit(ss, job, free, mask)
        if plan is None:
            return None
        g, nodes = plan
        return Reservation(job.row, max(when, now), {g: nodes}, {g: frozenset(nodes)})

    def _fit(
        self, ss: SnapshotState, job: _Job, free: _Free, mask: npt.NDArray[np.bool_] | None = None
    ) -> tuple[int, list[int]] | None:
        """(group, nodes) where ``job`` fits on the free resources ``free`` (best-fit's choice).

        ``mask``: ``_single_mask``'s slots of the job's groups, when it is a single-node job in all
        of them and they are in ascending order: one vectorized pass over the cluster's slots then
        gives the same node as the walk over its groups (least left, earliest group, lowest node).
        """
        slack = self.settings.node_slack
        groups = ss.spec.node_groups
        offsets = ss.layout.offsets
        if mask is not None:
            ok = (free.cpu >= job.cpu) & (free.mem >= job.mem) & mask
            if job.gpus == 0:
                score = free.cpu
            elif job.milli < WHOLE_GPU_MILLI:
                ok &= (free.whole >= 1) | (free.share >= job.milli)
                score = np.minimum(free.share, WHOLE_GPU_MILLI)
            else:
                ok &= free.whole >= job.gpus
                score = free.whole
            vals = np.where(ok, score, BIG)
            p = int(vals.argmin())
            if vals[p] == BIG:
                return None
            g = int(np.searchsorted(offsets, p, side="right")) - 1
            return g, [p - int(offsets[g])]
        picks: list[tuple[int, int, int]] = []  # single-node fits: (free GPUs left, group position, node)
        gangs: list[int] = []
        for pos, g in enumerate(job.groups):
            lo, hi = int(offsets[g]), int(offsets[g + 1])
            w, c, m, s = free.whole[lo:hi], free.cpu[lo:hi], free.mem[lo:hi], free.share[lo:hi]
            gg = groups[g].gpus
            if (
                job.gpus > 0
                and job.milli == WHOLE_GPU_MILLI
                and (job.gpus > gg or (slack > 0 and job.gpus >= 2))
            ):
                gangs.append(g)
                if job.gpus > gg:
                    continue
            ok = (c >= job.cpu) & (m >= job.mem)
            if job.gpus == 0:
                score = c
            elif job.milli < WHOLE_GPU_MILLI:
                ok &= (w >= 1) | (s >= job.milli)
                score = np.where(s < WHOLE_GPU_MILLI, s, WHOLE_GPU_MILLI)
            else:
                ok &= w >= job.gpus
                score = w
            hit = np.flatnonzero(ok)
            if len(hit):
                i = int(hit[np.argmin(score[hit])])
                picks.append((int(score[i]), pos, i))
        if picks:
            _, pos, i = min(picks)
            return job.groups[pos], [i]
        for g in gangs:
            lo, hi = int(offsets[g]), int(offsets[g + 1])
            plan = self._fit_gang(ss, job, g, free.whole[lo:hi], free.cpu[lo:hi], free.mem[lo:hi])
            if plan is not None:
                return g, plan
        return None

    def _single_mask(self, ss: SnapshotState, job: _Job) -> npt.NDArray[np.bool_] | None:
        """The slots of ``job``'s groups, if it is a single-node job in each of them (no gang
        candidates) and they are in ascending order (slot order is then the walk's order)."""
        if job.gpus > 0 and job.milli == WHOLE_GPU_MILLI:
            slack = self.settings.node_slack
            for g in job.groups:
                gg = ss.spec.node_groups[g].gpus
                if job.gpus > gg or (slack > 0 and job.gpus >= 2):
                    return None
        if any(a >= b for a, b in pairwise(job.groups)):
            return None
        offsets = ss.layout.offsets
        mask = np.zeros(int(offsets[-1]), dtype=bool)
        for g in job.groups:
            mask[int(offsets[g]) : int(offsets[g + 1])] = True
        return mask

    def _fit_gang(
        self,
        ss: SnapshotState,
        job: _Job,
        g: int,
        whole: npt.NDArray[np.int64],
        cpu: npt.NDArray[np.int64],
        mem: npt.NDArray[np.int64],
    ) -> list[int] | None:
        """Best-fit's gang of ``job`` in group ``g`` on these free resources (the top-M test first)."""
        if int(whole.sum()) < job.gpus:
            return None
        usable = whole
        if job.cpu:
            usable = np.minimum(usable, cpu * job.gpus // job.cpu)
        if job.mem:
            usable = np.minimum(usable, mem * job.gpus // job.mem)
        spec_g = ss.spec.node_groups[g]
        slack = self.settings.node_slack
        m = min(-(-job.gpus // max(spec_g.gpus, 1)) + slack, spec_g.count)
        top = np.partition(usable, len(usable) - m)[len(usable) - m :] if m < len(usable) else usable
        if int(top.sum()) < job.gpus:
            return None
        gs = GroupState(g, spec_g.count, spec_g.gpus, spec_g.cpus_milli, spec_g.mem_mib, False)
        fill_group(gs, whole, cpu, mem)
        scratch = _Scratch(len(ss.spec.node_groups))
        scratch.groups[g] = gs
        a = self.best.place(scratch, job.gpus, job.milli, job.cpu, job.mem, (g,), None, slack)  # type: ignore[arg-type]
        return None if a is None else list(a.nodes)
