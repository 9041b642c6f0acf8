"""One scheduling cycle of the Python event loop: order the queue, start what fits, reserve for
what does not (``SimConfig.backfill``), in the policy's (key, arrival) order.

Why a module of its own: this is the decision the simulator measures and the placer service
deploys (``shared.sim.cycle_on`` runs exactly this on a described cluster), so it is kept apart
from the event bookkeeping (``shared.sim.run_state``) and from how a reservation is computed
(``shared.sim.reservations``). A cycle has three parts:
- the shape pre-check (``Cycle.precheck``): with a long queue each distinct GPU request is tested
  once, and the shapes that fit nowhere are passed over but for one job per class of eligible
  groups (``Cycle.candidates``);
- the visit: over every candidate, a chunk of the smallest keys at a time (``Cycle.walk``), or
  over the heads of order classes (``shared.sim.class_heads``);
- the cycle's reservations (``CycleReservations``): made when a job cannot start, computed only
  when a later job wants their groups, first as a bound and made exact (caps built) only when a
  job that may run past the bound wants those groups.
Resources (and reservation caps) only shrink within a cycle, so a request that failed keeps
failing, and so does any queued request of the same shape asking for at least as many CPUs and
as much memory and running at least as long: one vectorized filter retires all of those.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray
from shared.scheduling.placement import BestFit, Caps, FirstFit, share_fits, whole_gpus_fit
from shared.scheduling.state import I64, Alloc
from shared.sim.batch_placement import BatchDecisions, BatchPlacement
from shared.sim.class_heads import ClassHeads
from shared.sim.reservations import Bound, Reservations, Reserved

if TYPE_CHECKING:
    from shared.sim.run_state import RunState
    from shared.sim.simulator import Simulator

INF = math.inf


class CycleReservations:
    """The EASY reservations of one cycle: at most ``max_reservations`` (0: one per disjoint pool
    of node groups), each covering the groups of its job.

    A reservation is computed only when a later job wants nodes of its groups (``pending``):
    until then nothing has changed there, so computing it later gives the same result, and a
    cycle in which no job behind the head can use those groups never pays for it. A due
    reservation is first only bounded (``bounds``, ``Reservations.bound``): a job that ends
    before the bound cannot be capped by it, and starting such a job changes neither the time
    nor the plan (it is released before the fit in the replay), so the caps are built
    (``Reservations.materialize``) only when a job that may run past the bound wants its groups.
    """

    __slots__ = ("bounds", "covered", "cycle", "n_res", "now", "pending", "reserved", "rs", "strategy")

    def __init__(self, cycle: Cycle, now: float) -> None:
        self.cycle = cycle
        self.rs = cycle.rs
        self.strategy = cycle.strategy
        self.now = now
        self.reserved: Reserved = {}
        self.covered: set[int] = set()
        self.n_res = 0
        self.pending: dict[int, int] = {}  # group -> blocked head whose reservation is due
        self.bounds: dict[int, Bound] = {}  # group -> its reservation, known by a bound only

    def try_reserve(self, j: int) -> None:
        """Blocked job j takes a reservation if the cycle has one left and none covers its groups
        (made at once when reservations are recorded, else when due: ``settle``)."""
        groups_of = self.rs.groups_of
        if self.n_res < self.cycle.max_res and self.covered.isdisjoint(groups_of[j]):
            self.n_res += 1
            self.covered.update(groups_of[j])
            first_res = self.rs.first_res
            if first_res is None:
                for g in groups_of[j]:
                    self.pending[g] = j
                return
            t_res = self.strategy.reserve(j, self.now, self.reserved)
            if t_res < INF and np.isnan(first_res[j]):
                first_res[j] = t_res

    def settle(self, gset: tuple[int, ...], finish: float) -> None:
        """Make the reservations on ``gset`` exact where a job running until ``finish``
        may be capped by them."""
        pending, bounds = self.pending, self.bounds
        if not pending and not bounds:
            return
        groups_of, since_bound = self.rs.groups_of, self.rs.since_bound
        strategy, now = self.strategy, self.now
        for g in gset:
            h = pending.get(g)
            if h is not None:
                for g2 in groups_of[h]:
                    pending.pop(g2, None)
                b = strategy.bound(h, now) if self.cycle.lazy else None
                if b is None:
                    strategy.reserve(h, now, self.reserved)
                else:
                    for g2 in groups_of[h]:
                        bounds[g2] = b
                        since_bound[g2] = []
            b = bounds.get(g)
            if b is not None and finish >= b.when:
                started: list[Alloc] = []
                for g2 in groups_of[b.job]:
                    bounds.pop(g2, None)
                    started += since_bound.pop(g2, [])
                strategy.materialize(b, now, self.reserved, started)


class Cycle:
    """The scheduling cycles of one run (``run``); see the module docstring."""

    def __init__(self, sim: Simulator, rs: RunState, batch: BatchPlacement | None) -> None:
        cfg, placer = sim.cfg, sim.placer
        self.rs = rs
        self.strategy = Reservations(sim, rs)
        self.batch = batch
        self.mode = cfg.backfill
        self.max_res = cfg.max_reservations or 1 << 30
        self.precheck_queue, self.visit_chunk = sim.precheck_queue, sim.visit_chunk
        self.retire = sim.retire_dominated
        self.lazy = sim.lazy_reservations and batch is None
        self.int_keys = sim.policy.integer_keys
        self.hist_precheck = type(placer) in (FirstFit, BestFit)  # ``whole_gpus_fit`` answers for these
        self.placer, self.slack = placer, cfg.node_slack
        self.count_mode = cfg.reservation == "count"
        # in count mode a reservation's caps are counted GPUs, not node caps
        self.place_under = self._place_counted if self.count_mode else rs.place
        self.class_heads_queue = sim.class_heads_queue
        self.heads = (
            ClassHeads(rs, self.place_under, self.mode, sim.head_chunk)
            if rs.by_class and batch is None and self.retire
            else None
        )

    def run(self, now: float) -> bool:
        """One scheduling pass; True when every job left queued failed on the raw free state."""
        rs = self.rs
        shape_blocked: set[int] = set()  # shapes whose GPUs fit nowhere now
        if rs.nq > self.precheck_queue and self.precheck(shape_blocked) >= rs.nq:
            return self.mode != "none"
        book = CycleReservations(self, now)
        rs.since_bound.clear()
        if self.heads is not None and rs.nq > self.class_heads_queue:
            return self.heads.visit(now, shape_blocked, book)
        return self.walk(now, shape_blocked, book)

    def precheck(self, shape_blocked: set[int]) -> int:
        """A long queue holds few distinct shapes: test each GPU request once, before ordering.
        Adds the shapes that fit nowhere to ``shape_blocked``; returns their queued jobs."""
        rs = self.rs
        st, gpus, milli, groups_of = rs.st, rs.gpus, rs.milli, rs.groups_of
        slack, placer = self.slack, self.placer
        released_for, job_class_of, blocked_since = rs.released_for, rs.cols.job_class, rs.blocked_since
        hist_precheck, shape_rep = self.hist_precheck, rs.shape_rep
        blocked = 0
        for k, count in rs.shape_count.items():
            r = shape_rep[k]
            # a request that fit nowhere stays so until a job ends in one of its groups
            sig = released_for[job_class_of[r]]
            if blocked_since.get(k) == sig:
                shape_blocked.add(k)
                blocked += count
            elif (
                (
                    not whole_gpus_fit(st, gpus[r], groups_of[r], slack)
                    if milli[r] >= WHOLE_GPU_MILLI
                    else not share_fits(st, milli[r], groups_of[r])
                )
                if hist_precheck and gpus[r] and milli[r] > 0
                else placer.place(st, gpus[r], milli[r], 0, 0, groups_of[r], None, slack) is None
            ):
                shape_blocked.add(k)
                blocked += count
                blocked_since[k] = sig
            else:
                blocked_since.pop(k, None)
        return blocked

    def candidates(self, now: float, shape_blocked: set[int]) -> tuple[I64, FloatArray, int]:
        """The queued jobs a cycle must visit, with their sort keys (arrival order), and how many
        of them come first, of shapes that fit somewhere.

        Jobs of a shape that fits nowhere can neither start nor change anything, except the
        first of them (by key, then arrival) per class of eligible groups: it may take an EASY
        reservation (a later job of the same class finds its groups already covered) or,
        without backfill, stop the queue. Only those and the jobs of fitting shapes remain.
        """
        rs = self.rs
        q = rs.queue()
        keys = rs.static_keys[q] if rs.static_keys is not None else rs.policy.keys(q, now)
        if not shape_blocked:
            return q, keys, len(q)
        blocked_shape = np.zeros(rs.n_shapes, dtype=bool)
        blocked_shape[list(shape_blocked)] = True
        bmask = blocked_shape[rs.shape_np[q]]
        free = ~bmask
        if self.mode == "greedy":
            return q[free], keys[free], int(free.sum())
        qb, kb = q[bmask], keys[bmask]
        cb = rs.class_np[qb]
        present = np.flatnonzero(np.bincount(cb, minlength=rs.n_classes))
        if len(present) == 1:
            heads = [int(np.argmin(kb))]  # first minimum: ties go to the earliest arrival
        else:
            heads = []
            for c in present.tolist():
                sub = np.flatnonzero(cb == c)
                heads.append(int(sub[np.argmin(kb[sub])]))
        qf = q[free]
        return np.concatenate((qf, qb[heads])), np.concatenate((keys[free], kb[heads])), len(qf)

    def walk(self, now: float, shape_blocked: set[int], book: CycleReservations) -> bool:
        """The visit over every candidate, in (key, arrival) order, a chunk of the smallest keys
        at a time (most cycles end within the first chunk); returns what ``run`` returns."""
        rs = self.rs
        cq, ck, n_free = self.candidates(now, shape_blocked)
        alive = np.ones(len(cq), dtype=bool)
        batch: BatchDecisions | None = None
        if self.batch is not None:
            batch = self.batch.solve(cq, ck, n_free, now)
        preset = batch.preset if batch is not None else {}
        retire_cols: tuple[I64, I64, I64, FloatArray] | None = None
        pending = np.arange(len(cq))
        visit_chunk = self.visit_chunk
        if len(cq) > visit_chunk and self.int_keys:
            ck = _unique_integer_keys(cq, ck, rs.n)
        shape, est, cpu, mem, groups_of = rs.shape, rs.est, rs.cpu, rs.mem, rs.groups_of
        start_job, place_under = rs.start_job, self.place_under
        try_reserve, settle = book.try_reserve, book.settle
        reserved, pending_res, bounds = book.reserved, book.pending, book.bounds
        mode, retire = self.mode, self.retire
        soft = False  # a job failed only because of a reservation's caps
        while len(pending):
            chunk, pending = _next_chunk(pending, cq, ck, n_free, visit_chunk)
            for p, j in zip(chunk.tolist(), cq[chunk].tolist(), strict=True):
                if not alive[p]:
                    continue
                k = shape[j]
                if k in shape_blocked:
                    if mode == "none":
                        return False  # committed head: nothing behind it may start
                    if mode == "easy":
                        try_reserve(j)
                    continue
                e_j, c_j, m_j = est[j], cpu[j], mem[j]
                gset = groups_of[j]
                if pending_res or bounds:
                    settle(gset, now + e_j)
                capped: tuple[int, ...] = ()
                caps: dict[int, Caps] | None = None
                if reserved:
                    finish = now + e_j
                    capped = tuple(g for g in gset if g in reserved and finish > reserved[g][0])
                    if capped:
                        caps = {g: reserved[g][1] for g in capped}
                a: Alloc | None = None
                if j in preset:
                    assert batch is not None
                    a, held_back = batch.decide(j, alive, caps, reserved)
                    if held_back:
                        alive[p] = False
                        soft = True  # held back by the batch placer, not by lack of room
                        continue
                if a is None:
                    a = place_under(j, gset, caps)
                alive[p] = False
                if a is not None:
                    start_job(j, a, now)
                    if capped and a.group in capped:
                        reserved[a.group][1].consume(a)
                    continue
                if mode == "none":
                    return False
                # jobs running past the latest of these reservations are capped on a superset
                # of these groups: with at least these requests they cannot start either
                if capped:
                    soft = True
                    thr = max(reserved[g][0] for g in capped) - now
                else:
                    thr = -INF
                    if mode == "easy":
                        try_reserve(j)
                if not retire:
                    continue
                if retire_cols is None:
                    retire_cols = (rs.shape_np[cq], rs.cpu_np[cq], rs.mem_np[cq], rs.est_np[cq])
                s_, c_, m_, e_ = retire_cols
                alive &= ~((s_ == k) & (c_ >= c_j) & (m_ >= m_j) & (e_ > thr))
            if len(pending):
                pending = pending[alive[pending]]
        return rs.nq == 0 or (mode != "none" and not soft)

    def _place_counted(self, j: int, gset: tuple[int, ...], caps: dict[int, Caps] | None) -> Alloc | None:
        """Place job j now under the reservations it would run past (``caps``), in count mode:
        only on the groups whose extra GPUs hold it (node placement is not capped)."""
        rs = self.rs
        if caps:
            need = rs.gpus[j] if rs.milli[j] >= WHOLE_GPU_MILLI else 1
            gset = tuple(g for g in gset if g not in caps or (caps[g].count or 0) >= need)
            if not gset:
                return None
            caps = None
        return rs.place(j, gset, caps)


def _unique_integer_keys(cq: I64, ck: FloatArray, n: int) -> FloatArray:
    """Integer keys (Slurm priorities) tie a lot, and selection over many equal values is slow:
    key x (n + 1) + job index is unique and sorts the same way (where it is exact)."""
    lo_k, hi_k = float(ck.min()), float(ck.max())
    if max(abs(lo_k), abs(hi_k)) * (n + 1) < 2**52 and bool(np.all(ck == np.floor(ck))):
        out: FloatArray = ck * float(n + 1) + cq
        return out
    return ck


def _next_chunk(pending: I64, cq: I64, ck: FloatArray, n_free: int, visit_chunk: int) -> tuple[I64, I64]:
    """The next ``visit_chunk`` candidates by (key, arrival), sorted, and those left after them."""
    if len(pending) > visit_chunk:
        pk = ck[pending]
        edge = np.partition(pk, visit_chunk - 1)[visit_chunk - 1]
        below = pk < edge
        tied = np.flatnonzero(pk == edge)
        room = visit_chunk - int(np.count_nonzero(below))
        if len(tied) > room:
            # many jobs share the edge key (integer priorities): take the earliest
            # arrivals among them, the rest wait for the next chunk
            if pending[tied[-1]] >= n_free:  # blocked heads sit after the arrival-ordered part
                tied = tied[np.argsort(cq[pending[tied]], kind="stable")]
            below[tied[:room]] = True
        else:
            below[tied] = True
        chunk, pending = pending[below], pending[~below]
    else:
        chunk, pending = pending, pending[:0]
    out: I64 = chunk[np.lexsort((cq[chunk], ck[chunk]))]
    return out, pending
