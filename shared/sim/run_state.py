"""What one run of the Python event loop changes: the cluster, the running jobs, the queue.

Why one object: the cycle (``shared.sim.cycle``), the class-heads visit
(``shared.sim.class_heads``), the reservation strategy (``shared.sim.reservations``) and the event
loop (``Simulator.run``) all read and change the same run; each keeps its own logic and reads the
state here. The per-job columns are Python lists, because the hot loop reads jobs one at a time,
where list indexing is several times cheaper than numpy scalar indexing.

Three views of the queue are kept in step, each for the readers that need it:
- ``qbuf``/``in_queue``: every queued job in arrival order (the cycle's vectorized filters);
- ``shape_count``/``shape_rep``: how many queued jobs ask for each shape (the shape pre-check);
- order classes (``bucket_jobs``, ``head_np``, ``heads``): for policies that order some classes
  of jobs by arrival (``Policy.order_classes``), only the first queued job of each class can be
  next (``shared.sim.class_heads``).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.policies.capabilities import hooks
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.partition import row_classes
from shared.scheduling.placement import Caps
from shared.scheduling.releases import NodeReleases
from shared.scheduling.state import I64, Alloc, ClusterState
from shared.scheduling.workload_memo import per_workload
from shared.sim.heads import Heads

if TYPE_CHECKING:
    from shared.sim.simulator import Simulator

INF = math.inf

#: a running job as reservations release it: (estimated end, start order, job), sorted by the
#: first two (``RunState.start_job``; ``shared.scheduling.releases.Point``)
Release = tuple[float, int, int]
#: job -> (group, nodes, whole GPUs per node, GPU ids per node or None, shared GPU or -1)
RecordedAlloc = tuple[int, tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...] | None, int]


@dataclass(frozen=True, eq=False)
class ResumedJobs:
    """The running jobs of a ``Resume`` as columns: ids, allocations, start times, estimated ends
    and node groups, aligned.

    Why columns: a described cluster of 68,294 running pods took about 190 ms a cycle to resume
    one by one (a sort with a key function, three dicts and two lists of tuples built per job);
    from columns the same orders come from numpy sorts and the lists from ``zip``
    (``RunState._resume``). ``of`` turns the ``Resume.running`` mapping into columns.
    """

    ids: I64
    allocs: Sequence[Alloc]
    start: FloatArray
    est_end: FloatArray
    #: each allocation's node group (``Alloc.group``)
    groups: I64

    def __post_init__(self) -> None:
        n = len(self.ids)
        if not len(self.allocs) == len(self.start) == len(self.est_end) == len(self.groups) == n:
            raise ValueError("ResumedJobs columns must have one entry per running job")

    def __len__(self) -> int:
        return len(self.ids)

    @staticmethod
    def of(running: Mapping[int, tuple[Alloc, float, float]]) -> ResumedJobs:
        """The mapping job id -> (allocation, start, estimated end) as columns, in its order."""
        values = list(running.values())
        return ResumedJobs(
            ids=np.fromiter(running, dtype=np.int64, count=len(running)),
            allocs=[v[0] for v in values],
            start=np.array([v[1] for v in values], dtype=np.float64),
            est_end=np.array([v[2] for v in values], dtype=np.float64),
            groups=np.array([v[0].group for v in values], dtype=np.int64),
        )


@dataclass(frozen=True)
class Resume:
    """A cluster that is already running, for ``Simulator.run(resume=...)``.

    ``running``: job id -> (its allocation, its start time, its estimated end, exactly as the
    cluster reported it), or the same as columns (``ResumedJobs``); its true end is unknown (it
    ends in no event of the run). An id may be a row of the workload or any id past its last row:
    a reservation's plan reads only the allocation and the estimated end, so a described cluster's
    running jobs need no rows. The order the jobs started is their start time, then the order they
    are listed in (jobs started in one cycle: in the order that cycle started them): reservations
    release ties in estimated end in that order, whatever the ids (``RunState.start_job``).
    ``blocked``: resources held by nothing a reservation can plan to release (drained or down
    nodes, use the cluster reports but attributes to no job). The jobs of ``job_range`` must all
    have arrived by the time of the run's first event, which is when the one cycle runs.
    """

    running: Mapping[int, tuple[Alloc, float, float]] | ResumedJobs
    blocked: tuple[Alloc, ...] = ()
    #: the cluster with ``running`` and ``blocked`` already taken (built at once from a description,
    #: ``shared.schemas.snapshot_cluster``), used as the run's state; None: taken one by one
    state: ClusterState | None = None


@dataclass(frozen=True, slots=True)
class Columns:
    """A bound workload's per-job columns as Python lists, and what the run derives from them
    that depends on no policy, estimate or setting.

    Why cached: converting the columns of the 82,247 Philly jobs cost about 40 ms per run, which
    a training episode over a short window paid every time. The lists are built once per
    workload (``columns``) and only read by the run.
    """

    submit: list[float]
    runtime: list[float]
    gpus: list[int]
    milli: list[int]
    cpu: list[int]
    mem: list[int]
    groups_of: list[tuple[int, ...]]
    shape: list[int]
    job_class: list[int]
    n_shapes: int
    shape_gclass: list[int]  # the class of eligible groups of each shape
    shape_min_cpu: list[int]  # per shape, the least CPUs and memory any of its jobs asks
    shape_min_mem: list[int]


def columns(w: BoundWorkload) -> Columns:
    """The ``Columns`` of ``w``, kept per workload (``per_workload``)."""
    return per_workload(w, "columns", lambda: _build_columns(w))


def _build_columns(w: BoundWorkload) -> Columns:
    jobs = w.jobs
    n = len(jobs)
    job_class = w.job_class.tolist()
    shape = w.shape.tolist()
    n_shapes = int(w.shape.max()) + 1 if n else 0
    shape_gclass = [0] * n_shapes
    for k_, c_ in zip(shape, job_class, strict=True):
        shape_gclass[k_] = c_
    smin = np.full(n_shapes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smin, w.shape, jobs.cpus_milli)
    shape_min_cpu = smin.tolist()
    smin[:] = np.iinfo(np.int64).max
    np.minimum.at(smin, w.shape, jobs.mem_mib)
    shape_min_mem = smin.tolist()
    return Columns(
        submit=jobs.submit.tolist(),
        runtime=jobs.runtime.tolist(),
        gpus=jobs.gpus.tolist(),
        milli=jobs.gpu_milli.tolist(),
        cpu=jobs.cpus_milli.tolist(),
        mem=jobs.mem_mib.tolist(),
        groups_of=[w.class_groups[c] for c in job_class],
        shape=shape,
        job_class=job_class,
        n_shapes=n_shapes,
        shape_gclass=shape_gclass,
        shape_min_cpu=shape_min_cpu,
        shape_min_mem=shape_min_mem,
    )


class RunState:
    """The state of one run of jobs ``lo..hi`` of the simulator's workload; see the module
    docstring. Built by ``Simulator.run``; ``start_job``, ``end_due`` and ``arrive`` are the only
    ways the running jobs and the queue change."""

    def __init__(
        self,
        sim: Simulator,
        st: ClusterState,
        lo: int,
        hi: int,
        resume: Resume | None,
        record_reservations: bool,
    ) -> None:
        """A run of ``sim`` on cluster ``st`` (idle, or the state ``resume`` describes)."""
        w, cfg, policy = sim.w, sim.cfg, sim.policy
        self.w, self.cfg, self.policy, self.placer = w, cfg, policy, sim.placer
        jobs = w.jobs
        n = self.n = len(jobs)
        self.lo, self.hi = lo, hi
        self.i = lo  # the next job to arrive
        self.bulk = sim.bulk_arrivals
        self.submit_np = w.jobs.submit
        self.st = st
        self._columns(sim)
        self.slack = cfg.node_slack
        self.record_allocs = sim.record_allocations
        self.allocations: dict[int, RecordedAlloc] = sim.allocations
        self.profiles = sim.node_release_profiles
        self.releases = NodeReleases()
        # the policy's hooks, resolved once (``key`` per job of a cycle, starts and ends per job)
        self.hooks = h = hooks(policy)
        self.key = h.key
        self.on_start, self.on_end = h.on_start, h.on_end
        self.static_keys = policy.keys(np.arange(n), 0.0) if not policy.dynamic else None
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.nodes_used = np.zeros(n, dtype=np.int64)
        # the node group each job ran in: placement studies score idle GPUs per GPU type with it
        self.job_group = np.full(n, -1, dtype=np.int64)
        self.allocs: dict[int, Alloc] = {}
        if h.attach is not None:
            h.attach(self.st, self.allocs)
        self.heap: list[tuple[float, int]] = []
        # running jobs in the order reservations release them: (estimated end, start order, job)
        self.run_sorted: list[Release] = []
        self.run_by_group: dict[int, list[Release]] = {}  # the same, per node group
        self.start_order: dict[int, int] = {}  # running job -> its start order (see ``start_job``)
        self.n_started = 0  # starts so far, resumed jobs included
        # jobs ended so far summed over each class of eligible groups (the pre-check's signature)
        self.released_for = [0] * len(w.class_groups)
        self.classes_with: list[list[int]] = [[] for _ in self.st.groups]
        for c_, gset_ in enumerate(w.class_groups):
            for g_ in gset_:
                self.classes_with[g_].append(c_)
        self.blocked_since: dict[int, int] = {}  # shape -> releases in its groups when it fit nowhere
        self._queue(n)
        self.first_res = np.full(n, np.nan) if record_reservations else None
        self._order_classes(n)
        self.tl_t: list[float] = []
        self.tl_busy: list[float] = []
        self.tl_q: list[int] = []
        # per group with a reservation known by its bound only (the cycle's ``bounds``): the jobs
        # started there since; ``materialize`` adds them back to see the free state the reservation
        # was made on, so that building the caps late pins what building them at once would
        self.since_bound: dict[int, list[Alloc]] = {}
        if resume is not None:
            self._resume(resume)

    def _columns(self, sim: Simulator) -> None:
        """The per-job columns (lists, cached per workload) and their numpy originals."""
        w = self.w
        cols = self.cols = columns(w)
        self.submit, self.runtime, self.gpus, self.milli = cols.submit, cols.runtime, cols.gpus, cols.milli
        self.cpu, self.mem, self.groups_of, self.shape = cols.cpu, cols.mem, cols.groups_of, cols.shape
        if sim._est_list is None:
            sim._est_list = sim.est.tolist()
        self.est: list[float] = sim._est_list
        self.shape_np, self.class_np = w.shape, w.job_class
        self.cpu_np, self.mem_np, self.est_np = w.jobs.cpus_milli, w.jobs.mem_mib, sim.est
        self.n_shapes = cols.n_shapes
        self.n_classes = len(w.class_groups)
        self.shape_gclass = cols.shape_gclass  # the class of eligible groups of each shape
        self.shape_gclass_np = np.array(cols.shape_gclass, dtype=np.int64)

    def _queue(self, n: int) -> None:
        """The queue in arrival order: jobs arrive in index order and are appended as ranges to
        ``qbuf``, which is compacted (started jobs dropped) when a cycle reads it (``queue``)."""
        self.in_queue = np.zeros(n, dtype=bool)
        self.qbuf = np.empty(max(n, 1), dtype=np.int64)
        self.qn = 0  # entries of qbuf in use
        self.q_upto = self.lo  # jobs below this index are in qbuf (or started)
        self.nq = 0
        self.shape_count: dict[int, int] = {}  # queued jobs per shape (GPU request + eligible groups)
        self.shape_rep: dict[int, int] = {}  # one job of each shape

    def _order_classes(self, n: int) -> None:
        """Order classes (``Policy.order_classes``) split by request: the jobs of one class share
        shape, CPUs, memory and estimate, and the policy orders them by arrival, so only the
        first queued job of a class can be next, and a failed request retires a class whole."""
        order_cls = self.hooks.order_classes() if self.hooks.order_classes is not None else None
        self.by_class = by_class = order_cls is not None and n > 0
        self.job_bucket: list[int] = []
        self.bucket_np = np.zeros(0, dtype=np.int64)  # ``job_bucket`` as an array
        self.bucket_jobs: list[list[int]] = []  # per class, its jobs that arrived, in arrival order
        self.bucket_head: list[int] = []  # per class, the position of its first queued job
        self.head_pos = np.zeros(0, dtype=np.int64)  # the same as an array
        self.head_np = np.zeros(0, dtype=np.int64)  # per class, its first queued job (-1: none)
        self.queued = [False] * n  # in_queue as a list, for quick scalar reads
        self.shape_min_cpu: list[int] = []  # per shape, the least CPUs and memory any of its jobs asks
        self.shape_min_mem: list[int] = []
        if by_class:
            assert order_cls is not None
            bucket_np = row_classes(self.shape_np, self.cpu_np, self.mem_np, self.est_np, order_cls)
            self.job_bucket = bucket_np.tolist()
            self.bucket_np = bucket_np
            n_buckets = int(bucket_np.max()) + 1  # ids 0..n_buckets - 1, every one used
            self.bucket_jobs = [[] for _ in range(n_buckets)]
            self.bucket_head = [0] * n_buckets
            self.head_pos = np.zeros(n_buckets, dtype=np.int64)
            self.head_np = np.full(n_buckets, -1, dtype=np.int64)
            self.shape_min_cpu, self.shape_min_mem = self.cols.shape_min_cpu, self.cols.shape_min_mem
        static_keys = self.static_keys
        self.static_keys_l: list[float] | None = static_keys.tolist() if static_keys is not None else None
        # the heads of the order classes, sorted between cycles when keys do not move (and are
        # not NaN, which no sort orders consistently)
        self.heads = Heads(static_keys is not None and not bool(np.isnan(static_keys).any()))
        self.head_key: list[float] = (
            self.static_keys_l if self.heads.sorted and self.static_keys_l is not None else [0.0] * n
        )

    def _resume(self, resume: Resume) -> None:
        """Take a running cluster's jobs: held until after the cycle (``end`` is unknown), released
        in no event of this run, planned by reservations at their estimated ends like any job.

        Start orders go by start time, then as listed (a stable sort): what a run that had started
        them itself would have given them. Built from columns (``ResumedJobs``): the same dicts and
        sorted lists as taking the jobs one by one, at numpy speed."""
        st, allocs, n = self.st, self.allocs, self.n
        jobs = resume.running if isinstance(resume.running, ResumedJobs) else ResumedJobs.of(resume.running)
        taken = resume.state is not None  # a state described with these allocations taken
        for held in resume.blocked if not taken else ():
            st.take(held)
        if not len(jobs):
            return
        if np.isnan(jobs.start).any() or np.isnan(jobs.est_end).any():
            raise ValueError("a resumed job has no start time or estimated end (NaN)")
        by_start = np.argsort(jobs.start, kind="stable")
        ids = jobs.ids[by_start]
        ids_l = ids.tolist()
        on = [jobs.allocs[k] for k in by_start.tolist()]
        first = self.n_started
        order = np.arange(first, first + len(ids), dtype=np.int64)
        self.n_started = first + len(ids)
        if not taken:
            for a_ in on:
                st.take(a_)
        allocs.update(zip(ids_l, on, strict=True))
        self.start_order.update(zip(ids_l, order.tolist(), strict=True))
        ends = jobs.est_end[by_start]
        rows = np.flatnonzero(ids < n).tolist()  # rows of the workload (else ids past it)
        for k in rows:
            j_, on_ = ids_l[k], on[k]
            self.start[j_] = jobs.start[by_start[k]]
            self.job_group[j_] = on_.group
            self.nodes_used[j_] = len(on_.nodes)
            self.heap.append((INF, j_))
        if self.profiles:
            gfree_none = [gs.gfree is None for gs in st.groups]
            for s_, e_, a_ in zip(order.tolist(), ends.tolist(), on, strict=True):
                if gfree_none[a_.group]:
                    self.releases.add(s_, e_, a_)
        # (estimated end, start order): start orders rise with ``by_start``, so a stable sort on
        # the ends alone orders the pairs
        by_end = np.argsort(ends, kind="stable")
        released = list(zip(ends[by_end].tolist(), order[by_end].tolist(), ids[by_end].tolist(), strict=True))
        groups = jobs.groups[by_start]
        present, first_at = np.unique(groups, return_index=True)
        groups = groups[by_end]
        by_group = self.run_by_group
        for g_ in present[np.argsort(first_at)].tolist():  # groups as the jobs first name them
            at_ = np.flatnonzero(groups == g_).tolist()
            lst_ = by_group.setdefault(g_, [])
            lst_ += [released[k] for k in at_]
            if len(lst_) > len(at_):
                lst_.sort()
        self.run_sorted += released
        if len(self.run_sorted) > len(released):
            self.run_sorted.sort()
        heapq.heapify(self.heap)

    # ------------------------------------------------------------------------------------------
    def start_job(self, j: int, a: Alloc, now: float) -> None:
        """Start queued job ``j`` on ``a`` at ``now``.

        Its start order (the number of starts before it) breaks ties in estimated end: running
        jobs are released, in reservations, by (estimated end, start order). Not by job id: a
        described cluster (``shared.sim.cycle_on``) numbers its jobs otherwise, and its cycle must
        release them in the simulator's order to pin the same nodes."""
        self.st.take(a)
        since_bound = self.since_bound
        if since_bound:
            started_here = since_bound.get(a.group)
            if started_here is not None:
                started_here.append(a)
        self.allocs[j] = a
        self.in_queue[j] = False
        self.nq -= 1
        self.start[j] = now
        e = now + self.runtime[j]
        self.end[j] = e
        self.nodes_used[j] = len(a.nodes)
        self.job_group[j] = a.group
        if self.record_allocs:
            self.allocations[j] = (
                a.group,
                tuple(a.nodes),
                tuple(a.whole),
                None if a.gpu_ids is None else tuple(tuple(x) for x in a.gpu_ids),
                a.frac_gpu,
            )
        heapq.heappush(self.heap, (e, j))
        e_est = now + self.est[j]
        s = self.start_order[j] = self.n_started
        self.n_started = s + 1
        insort(self.run_sorted, (e_est, s, j))
        insort(self.run_by_group.setdefault(a.group, []), (e_est, s, j))
        if self.profiles and self.st.groups[a.group].gfree is None:
            self.releases.add(s, e_est, a)
        k = self.shape[j]
        c = self.shape_count[k] - 1
        if c:
            self.shape_count[k] = c
        else:
            del self.shape_count[k]
        if self.by_class:
            self._next_head(j, k)
        if self.on_start is not None:
            self.on_start(j, now)

    def _next_head(self, j: int, k: int) -> None:
        """Job ``j`` (of shape ``k``) left the queue: if it headed its order class, the class's
        next queued job becomes its head."""
        self.queued[j] = False
        b = self.job_bucket[j]
        head_np = self.head_np
        if head_np[b] == j:
            lst = self.bucket_jobs[b]
            queued = self.queued
            h = self.bucket_head[b] + 1
            while h < len(lst) and not queued[lst[h]]:
                h += 1
            self.bucket_head[b] = h
            self.head_pos[b] = h
            self.heads.remove(self.head_key[j], j, k)
            if h < len(lst):
                head_np[b] = nxt = lst[h]
                self.heads.add(self.head_key[nxt], nxt, b, h, k)
            else:
                head_np[b] = -1

    def end_due(self, now: float) -> bool:
        """Release every running job that ends by ``now``; True if any did."""
        heap, allocs, st, est, start = self.heap, self.allocs, self.st, self.est, self.start
        run_sorted, profiles, start_order = self.run_sorted, self.profiles, self.start_order
        released = False
        while heap and heap[0][0] <= now:
            _, r = heapq.heappop(heap)
            a = allocs.pop(r)
            st.give(a)
            for c_ in self.classes_with[a.group]:
                self.released_for[c_] += 1
            e_est = start[r] + est[r]
            s = start_order.pop(r)
            del run_sorted[bisect_left(run_sorted, (e_est, s))]
            rg = self.run_by_group[a.group]
            del rg[bisect_left(rg, (e_est, s))]
            if profiles and st.groups[a.group].gfree is None:
                self.releases.remove(s, e_est, a)
            released = True
            if self.on_end is not None:
                self.on_end(r, now)
        return released

    def arrive(self, now: float) -> int:
        """Queue every job submitted by ``now``; returns the first of them (``i`` is past the last).

        Past ``bulk`` jobs at once (a described cluster's queue: all of it arrives at ``now``) the
        rest are queued with array operations (``_arrive_bulk``): the same state, in the same
        order, without a Python step per job."""
        i, hi, submit, shape = self.i, self.hi, self.submit, self.shape
        first_new = i
        shape_count, by_class = self.shape_count, self.by_class
        stop = min(hi, i + self.bulk) if self.bulk else hi
        while i < stop and submit[i] <= now:
            self.in_queue[i] = True
            self.nq += 1
            k = shape[i]
            shape_count[k] = shape_count.get(k, 0) + 1
            self.shape_rep.setdefault(k, i)
            if by_class:
                self.queued[i] = True
                b = self.job_bucket[i]
                lst = self.bucket_jobs[b]
                lst.append(i)
                if self.head_np[b] < 0:
                    self.head_np[b] = i
                    self.bucket_head[b] = len(lst) - 1
                    self.head_pos[b] = len(lst) - 1
                    self.heads.add(self.head_key[i], i, b, len(lst) - 1, k)
            i += 1
        self.i = i
        if i == stop < hi and submit[i] <= now:
            self._arrive_bulk(now)
        return first_new

    def _arrive_bulk(self, now: float) -> None:
        """``arrive``'s loop for jobs ``i..`` submitted by ``now``, as array operations: every dict
        gets its new keys in the order the loop would add them, every list its jobs in job order,
        and ``heads`` its new heads in job order."""
        i, hi = self.i, self.hi
        end, chunk = i, 256
        while end < hi:  # the first job past ``now``, looking at as many jobs as arrive (and a chunk)
            late = np.flatnonzero(~(self.submit_np[end : min(end + chunk, hi)] <= now))
            if len(late):
                end += int(late[0])
                break
            end = min(end + chunk, hi)
            chunk *= 2
        self.in_queue[i:end] = True
        self.nq += end - i
        shapes = self.shape_np[i:end]
        present, first_at, counts = np.unique(shapes, return_index=True, return_counts=True)
        shape_count, shape_rep = self.shape_count, self.shape_rep
        for f_, k_, c_ in sorted(zip(first_at.tolist(), present.tolist(), counts.tolist(), strict=True)):
            shape_count[k_] = shape_count.get(k_, 0) + c_
            shape_rep.setdefault(k_, i + f_)
        if self.by_class:
            self.queued[i:end] = [True] * (end - i)
            buckets = self.bucket_np[i:end]
            by_bucket = np.argsort(buckets, kind="stable")  # jobs grouped by class, in job order
            sorted_b = buckets[by_bucket]
            cuts = np.flatnonzero(np.diff(sorted_b)) + 1
            starts = np.concatenate([[0], cuts]).tolist()
            stops = [*cuts.tolist(), len(sorted_b)]
            jobs = (by_bucket + i).tolist()
            head_np, heads, head_key, shape = self.head_np, self.heads, self.head_key, self.shape
            new_heads: list[tuple[int, int, int]] = []  # (job, class, position) of classes headed anew
            for lo_, hi_ in zip(starts, stops, strict=True):
                b = int(sorted_b[lo_])
                lst = self.bucket_jobs[b]
                if head_np[b] < 0:
                    new_heads.append((jobs[lo_], b, len(lst)))
                lst += jobs[lo_:hi_]
            for j, b, pos in sorted(new_heads):
                head_np[b] = j
                self.bucket_head[b] = pos
                self.head_pos[b] = pos
                heads.add(head_key[j], j, b, pos, shape[j])
        self.i = end

    def queue(self) -> I64:
        """The queued jobs in arrival order (a copy), compacting ``qbuf`` on the way."""
        i, qbuf = self.i, self.qbuf
        if self.q_upto < i:
            qbuf[self.qn : self.qn + i - self.q_upto] = np.arange(self.q_upto, i)
            self.qn += i - self.q_upto
            self.q_upto = i
        q = qbuf[: self.qn]
        if self.qn != self.nq:
            q = q[self.in_queue[q]]
            self.qn = len(q)
            qbuf[: self.qn] = q
        else:
            q = q.copy()
        return q

    def place(self, j: int, gset: tuple[int, ...], caps: dict[int, Caps] | None = None) -> Alloc | None:
        """The placer's allocation for job ``j`` now, on ``gset``, under node ``caps``."""
        return self.placer.place(
            self.st, self.gpus[j], self.milli[j], self.cpu[j], self.mem[j], gset, caps, self.slack
        )

    def note_time(self, now: float) -> None:
        """One point of the timeline: busy GPUs and queued jobs after the event at ``now``."""
        self.tl_t.append(now)
        self.tl_busy.append(self.st.busy_milli / WHOLE_GPU_MILLI)
        self.tl_q.append(self.nq)

    def timeline(self) -> tuple[FloatArray, FloatArray, I64]:
        return np.asarray(self.tl_t), np.asarray(self.tl_busy), np.asarray(self.tl_q, dtype=np.int64)
