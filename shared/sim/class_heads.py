"""A scheduling cycle's visit over order classes instead of over every queued job.

Why: for policies that order some classes of jobs by arrival (``Policy.order_classes``: every
base policy), jobs with the same class, shape, CPUs, memory and estimate form one class whose
first queued job alone can be next, and a failed request retires the class whole. With a long
queue a cycle then orders a few hundred class heads (kept between cycles by
``shared.sim.heads``) instead of every queued job. The visit makes the same decisions, in the
same (key, arrival) order, as the cycle's walk over all candidates (``shared.sim.cycle``); the
property tests hold the two equal.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import FloatArray
from shared.scheduling.placement import Caps
from shared.scheduling.state import I64, Alloc

if TYPE_CHECKING:
    from shared.sim.cycle import CycleReservations
    from shared.sim.run_state import RunState

INF = math.inf

#: (key, job, class, position of the job in its class's arrival list)
Entry = tuple[float, int, int, int]
#: an entry of the visit's merge: (key, job, class, position, source, index in the source)
Merged = tuple[float, int, int, int, int, int]
#: heads not yet listed: (classes, jobs, keys)
Rest = tuple[I64, I64, FloatArray]


def first_in_order(at: I64, hk: FloatArray, hj: I64) -> int:
    """The entry of ``at`` that ``np.lexsort((hj, hk))`` puts first: the smallest key
    (NaN after every number), then the smallest job."""
    k_at = hk[at]
    num = ~np.isnan(k_at)
    if num.any():
        at = at[k_at == k_at[num].min()]
    return int(at[np.argmin(hj[at])])


def list_heads(src: list[Entry], rest: Rest | None, want: int, head_pos: I64) -> Rest | None:
    """Append to ``src`` the next heads of ``rest`` (classes, jobs, keys, not yet listed)
    in (key, job) order, at least ``want`` of them unless fewer are left, and return
    those left. The entries appended are the ones ``np.lexsort((jobs, keys))`` of all
    of ``rest`` puts first, in its order: every key up to the ``want``-th smallest
    comes before every larger key and every NaN (which sorts last), and of the heads
    with the ``want``-th smallest key, those of the smallest jobs come first."""
    if rest is None:
        return None
    act, hj, hk = rest
    if len(hk) > want:
        edge = np.partition(hk, want - 1)[want - 1]
        if not np.isnan(edge):
            take = hk < edge
            tied = np.flatnonzero(hk == edge)
            room = want - int(np.count_nonzero(take))  # at least 1
            if len(tied) > room:
                # integer keys (Slurm priorities) tie by the thousand: of the tied
                # heads only the ``room`` smallest jobs, which come first
                cut = np.partition(hj[tied], room - 1)[room - 1]
                tied = tied[hj[tied] <= cut]
            take[tied] = True
            sel = np.flatnonzero(take)
            left = ~take
            rest = (act[left], hj[left], hk[left])
            act, hj, hk = act[sel], hj[sel], hk[sel]
        else:
            rest = None
    else:
        rest = None
    srt = np.lexsort((hj, hk))
    src.extend(
        zip(hk[srt].tolist(), hj[srt].tolist(), act[srt].tolist(), head_pos[act[srt]].tolist(), strict=True)
    )
    return rest if rest is not None and len(rest[0]) else None


class ClassHeads:
    """The class-heads visit of one run's cycles (``visit``)."""

    def __init__(
        self,
        rs: RunState,
        place_under: Callable[[int, tuple[int, ...], dict[int, Caps] | None], Alloc | None],
        mode: str,
        head_chunk: int,
    ) -> None:
        self.rs = rs
        self.place_under = place_under
        self.mode = mode
        self.head_chunk = head_chunk

    def visit(self, now: float, shape_blocked: set[int], book: CycleReservations) -> bool:
        """The visit of the cycle over order classes: the same jobs in the same (key, arrival)
        order, but only the first queued job of each class is ordered at a time (the next one
        when it has been visited), and a failed request retires the classes it dominates (same
        shape, at least its CPUs and memory, estimate beyond the threshold), as the cycle's
        array filter retires the jobs. Returns what the cycle returns.

        The order is a k-way merge: a heap of (key, job, class, position, source, index)
        holds the next entry of each source (a sorted list of heads), plus the entries
        pushed during the visit (source -1): the next job of a class whose head was
        visited, and the first job per class of eligible groups of the shapes that fit
        nowhere (class -1: it may take a reservation, or stop the queue without backfill;
        the other heads of those shapes are passed over)."""
        srcs: list[list[Entry]] = []
        order: list[Merged] = []
        firsts: dict[int, Entry] = {}
        lazy_rest: Rest | None = None  # heads not yet listed in source ``lazy_src`` (moving keys)
        lazy_src = -1
        if self.rs.heads.sorted:
            # entries of the order whose shape is not retired whole: the visit ends at 0
            in_order = self._sorted_sources(shape_blocked, srcs, order, firsts)
        else:
            in_order, lazy_rest = self._keyed_sources(now, shape_blocked, srcs, order, firsts)
            lazy_src = 0 if lazy_rest is not None else -1
        live = sum(in_order.values())
        if self.mode != "greedy":
            for e0 in firsts.values():
                order.append((e0[0], e0[1], -1, -1, -1, 0))
            live += len(firsts)
        heapq.heapify(order)
        return self._merge(now, book, srcs, order, in_order, live, lazy_rest, lazy_src)

    def _sorted_sources(
        self, shape_blocked: set[int], srcs: list[list[Entry]], order: list[Merged], firsts: dict[int, Entry]
    ) -> dict[int, int]:
        """Static keys: one source per shape, its heads already sorted (``Heads``); of the shapes
        that fit nowhere only the first head per class of eligible groups (into ``firsts``)."""
        shape_gclass = self.rs.shape_gclass
        in_order: dict[int, int] = {}
        for k, lst in self.rs.heads.by_shape.items():
            if k in shape_blocked:
                gc = shape_gclass[k]
                f = firsts.get(gc)
                if f is None or lst[0] < f:
                    firsts[gc] = lst[0]
                continue
            e0 = lst[0]
            order.append((e0[0], e0[1], e0[2], e0[3], len(srcs), 0))
            srcs.append(lst.copy())  # starts in this cycle change the list
            in_order[k] = len(lst)
        return in_order

    def _keyed_sources(
        self,
        now: float,
        shape_blocked: set[int],
        srcs: list[list[Entry]],
        order: list[Merged],
        firsts: dict[int, Entry],
    ) -> tuple[dict[int, int], Rest | None]:
        """Keys that move with the clock: the heads keyed now, in one source (listed lazily when
        there are many), and the first head per class of eligible groups of the shapes that fit
        nowhere (into ``firsts``). Returns the entries per shape and the heads not yet listed."""
        rs = self.rs
        head_pos, shape_np, shape_gclass = rs.head_pos, rs.shape_np, rs.shape_gclass
        act = np.flatnonzero(rs.head_np >= 0)
        hj = rs.head_np[act]
        hk = rs.policy.keys(hj, now)
        if shape_blocked:
            # heads of blocked shapes only give the first head (by key, then job) per
            # class of eligible groups, in that order; only the others are listed
            blocked_shape = np.zeros(rs.n_shapes, dtype=bool)
            blocked_shape[list(shape_blocked)] = True
            bm = blocked_shape[shape_np[hj]]
            b_at = np.flatnonzero(bm)
            if len(b_at):
                gcs = rs.shape_gclass_np[shape_np[hj[b_at]]]
                fb_l = []
                for gc in np.flatnonzero(np.bincount(gcs)).tolist():
                    fb_l.append(first_in_order(b_at[gcs == gc], hk, hj))
                fb = np.array(fb_l, dtype=np.int64)
                fb = fb[np.lexsort((hj[fb], hk[fb]))]
                for e0 in zip(
                    hk[fb].tolist(),
                    hj[fb].tolist(),
                    act[fb].tolist(),
                    head_pos[act[fb]].tolist(),
                    strict=True,
                ):
                    firsts[shape_gclass[rs.shape[e0[1]]]] = e0
                keep = ~bm
                act, hj, hk = act[keep], hj[keep], hk[keep]
        src: list[Entry] = []
        lazy_rest: Rest | None = None
        head_chunk = self.head_chunk
        if head_chunk and len(act) > 2 * head_chunk:
            # listed lazily: the visit often ends after a few heads (a committed head
            # that does not fit, or a queue whose jobs all start), so only the
            # smallest keys are sorted; the list grows when the visit reaches its end
            lazy_rest = list_heads(src, (act, hj, hk), head_chunk, head_pos)
        else:
            list_heads(src, (act, hj, hk), len(act), head_pos)  # every head, one full sort
        if src:
            e0 = src[0]
            order.append((e0[0], e0[1], e0[2], e0[3], 0, 0))
            srcs.append(src)
        in_order = {k: c for k, c in rs.heads.per_shape.items() if k not in shape_blocked}
        return in_order, lazy_rest

    def _merge(
        self,
        now: float,
        book: CycleReservations,
        srcs: list[list[Entry]],
        order: list[Merged],
        in_order: dict[int, int],
        live: int,
        lazy_rest: Rest | None,
        lazy_src: int,
    ) -> bool:
        """The visit proper: pop the merge in order, start what fits, reserve for and retire
        what does not (see ``visit``)."""
        rs = self.rs
        shape, est, cpu, mem, groups_of = rs.shape, rs.est, rs.cpu, rs.mem, rs.groups_of
        shape_min_cpu, shape_min_mem, head_pos = rs.shape_min_cpu, rs.shape_min_mem, rs.head_pos
        start_job, place_under, push_next = rs.start_job, self.place_under, self._push_next
        try_reserve, settle, reserved = book.try_reserve, book.settle, book.reserved
        mode = self.mode
        lazy_want = self.head_chunk
        soft = False
        retired: dict[int, list[tuple[int, int, float]]] = {}  # shape -> (CPUs, memory, threshold)
        dead: set[int] = set()  # shapes retired whole (a failure with their least CPUs and memory)
        while live > 0:
            _, j, b, h, si, ix = heapq.heappop(order)
            if si >= 0:  # the source's next entry takes its place
                lst = srcs[si]
                if si == lazy_src and ix + 1 == len(lst):
                    lazy_want *= 2  # a long visit: list more heads at a time
                    lazy_rest = list_heads(lst, lazy_rest, lazy_want, head_pos)
                    if lazy_rest is None:
                        lazy_src = -1
                if ix + 1 < len(lst):
                    e1 = lst[ix + 1]
                    heapq.heappush(order, (e1[0], e1[1], e1[2], e1[3], si, ix + 1))
            if b < 0:  # the first job of a group class whose shape fits nowhere
                live -= 1
                if mode == "none":
                    return False
                try_reserve(j)
                continue
            k = shape[j]
            in_order[k] -= 1
            if k in dead:
                continue
            live -= 1
            e_j, c_j, m_j = est[j], cpu[j], mem[j]
            recs = retired.get(k)
            if recs is not None and any(c_j >= cf and m_j >= mf and e_j > tf for cf, mf, tf in recs):
                continue  # retired, and with it the rest of its class
            gset = groups_of[j]
            settle(gset, now + e_j)
            capped: tuple[int, ...] = ()
            caps: dict[int, Caps] | None = None
            if reserved:
                finish = now + e_j
                capped = tuple(g for g in gset if g in reserved and finish > reserved[g][0])
                if capped:
                    caps = {g: reserved[g][1] for g in capped}
            a = place_under(j, gset, caps)
            if a is not None:
                start_job(j, a, now)
                if capped and a.group in capped:
                    reserved[a.group][1].consume(a)
                live += push_next(b, h, now, order, in_order)
                continue
            if mode == "none":
                return False
            if capped:
                soft = True
                thr = max(reserved[g][0] for g in capped) - now
            else:
                thr = -INF
                if mode == "easy":
                    try_reserve(j)
                if c_j <= shape_min_cpu[k] and m_j <= shape_min_mem[k]:
                    dead.add(k)
                    live -= in_order[k]
                    continue
            retired.setdefault(k, []).append((c_j, m_j, thr))
            if not e_j > thr:  # else the record retires the rest of j's class as well
                live += push_next(b, h, now, order, in_order)
        return rs.nq == 0 or (mode != "none" and not soft)

    def _push_next(self, b: int, h: int, now: float, order: list[Merged], in_order: dict[int, int]) -> int:
        """Class b's next queued job after position h joins the merge; 1 if there is one."""
        rs = self.rs
        lst = rs.bucket_jobs[b]
        queued = rs.queued
        h += 1
        while h < len(lst) and not queued[lst[h]]:
            h += 1
        if h < len(lst):
            j2 = lst[h]
            keys = rs.static_keys_l
            k2 = keys[j2] if keys is not None else rs.key(j2, now)
            heapq.heappush(order, (k2, j2, b, h, -1, 0))
            in_order[rs.shape[j2]] += 1
            return 1
        return 0
