"""The EASY reservation strategy of the Python event loop: when a blocked job could start at the
earliest, and the caps that keep that start free for it.

Why a module of its own: a reservation is the one part of a cycle that looks into the future
(running jobs released in order of estimated end, ties in the order the jobs started: a
``Point``, (estimated end, start order), names each release), and it has a plain reference
(``replay``: the releases replayed on a scratch copy of the cluster) plus exact shortcuts that
must give the same time and the same caps (``bound`` from cached per-node release profiles and
drain points, ``replay_light`` on the touched nodes only, ``whole_node_plan`` read off the
arrays). Keeping them together, apart from the cycle that asks for reservations
(``shared.sim.cycle``), lets the shortcuts be read against the reference. See ``SimConfig`` for
what a reservation protects (``reservation="nodes"``: pinned nodes; ``"count"``: textbook EASY's
extra GPUs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.scheduling.binding import nodes_needed
from shared.scheduling.pinning import repin
from shared.scheduling.placement import BestFit, Caps, count_demand
from shared.scheduling.releases import Point
from shared.scheduling.state import I64, Alloc, GroupState, top_from_hist

if TYPE_CHECKING:
    from shared.sim.run_state import RunState
    from shared.sim.simulator import Simulator

INF = math.inf

#: group -> (the reservation's time, the caps that protect it)
Reserved = dict[int, tuple[float, Caps]]


@dataclass
class _Scratch:
    """A partial copy of the cluster used to find when a blocked job could start."""

    groups: list[GroupState | None]


@dataclass(slots=True)
class Bound:
    """An EASY reservation known by its earliest possible time, its caps not yet built.

    ``when`` is exact unless CPUs or memory bind at ``point`` (the release, (estimated end,
    start order), after which the job fits GPU-wise); it never exceeds the exact time.
    ``group`` is the group of a gang fit (-1 for a single-node fit, then ``node_pick`` holds the
    release, the group and the node).
    """

    job: int
    when: float
    point: Point
    group: int
    node_pick: tuple[Point, int, int] | None


class Reservations:
    """The reservations of one run: reads the run's cluster and running jobs (``RunState``),
    changes nothing of them; each reservation is written to the ``caps_out`` it is given."""

    def __init__(self, sim: Simulator, rs: RunState) -> None:
        self.st, self.allocs, self.releases = rs.st, rs.allocs, rs.releases
        self.run_sorted, self.run_by_group = rs.run_sorted, rs.run_by_group
        self.gpus, self.milli, self.cpu, self.mem = rs.gpus, rs.milli, rs.cpu, rs.mem
        self.groups_of = rs.groups_of
        self.placer = sim.placer
        self.slack = sim.cfg.node_slack
        self.count_mode = sim.cfg.reservation == "count"
        self.overlay, self.profiles = sim.overlay_reservations, sim.node_release_profiles
        self.light_replay = sim.light_replay
        self.direct_gangs = sim.direct_gang_plans and type(sim.placer) is BestFit

    # ------------------------------------------------------------------------------------------
    # the entry points
    def reserve(self, j: int, now: float, caps_out: Reserved) -> float:
        """Earliest estimated start of blocked job j and the caps that protect it."""
        b = self.bound(j, now)
        return self.replay(j, now, caps_out, []) if b is None else self.materialize(b, now, caps_out, [])

    def bound(self, j: int, now: float) -> Bound | None:
        """When blocked job j could start at the earliest, as a lower bound that is exact
        unless CPUs or memory bind at that point, or None where only ``replay`` answers
        (GPU shares, CPU-only jobs, shortcuts switched off).

        Nothing fits before the first release, so a fit appears right after some release:
        per node group, single-node requests read the first such release from cached per-node
        release profiles (exact, CPUs and memory included), gangs the first at which the
        free-GPU histogram holds them; the earliest of these is the bound.
        """
        st, slack = self.st, self.slack
        gset = self.groups_of[j]
        need = self.gpus[j]
        if not (self.overlay and self.profiles and need and self.milli[j] == WHOLE_GPU_MILLI):
            return None
        if any(st.groups[g].gfree is not None for g in gset):
            return None
        c_, mm = self.cpu[j], self.mem[j]
        single = [g for g in gset if slack == 0 and need <= st.groups[g].G]
        node_pick = self.first_node_fit(single, need, c_, mm) if single else None
        best: Point = node_pick[0] if node_pick is not None else (INF, -1)
        hit = -1
        for g in gset:
            if g not in single:
                point = self.gang_point(g, need, best)
                if point is not None:
                    best, hit = point, g
        if best[0] == INF:
            return Bound(j, INF, best, -1, None)
        return Bound(j, max(best[0], now), best, hit, node_pick if hit < 0 else None)

    def materialize(self, b: Bound, now: float, caps_out: Reserved, started: list[Alloc]) -> float:
        """Turn a bound into the reservation (time and caps) that ``replay`` would find."""
        st, slack = self.st, self.slack
        j = b.job
        need, c_, mm = self.gpus[j], self.cpu[j], self.mem[j]
        if b.when == INF:
            return INF
        if b.node_pick is not None:
            _, g, i = b.node_pick
            at = self.at_time(g, b.when)
            (i,) = self.pinned(g, [i], ([need], [c_], [mm]), at, started)
            cap = Caps.unlimited(st.groups[g].n)
            cap.whole[i] = at[0][i] - need
            cap.cpu[i] = at[1][i] - c_
            cap.mem[i] = at[2][i] - mm
            cap.block_shares(i)
            caps_out[g] = (b.when, self.counted(cap, g, b.when, need))
            return b.when
        # a gang in group b.group: its nodes' free resources right after the bound's release;
        # another group cannot hold j there (it would have given an earlier bound)
        g = b.group
        gs0 = st.groups[g]
        changes = self.changes_until(g, b.point)
        G = gs0.G
        if self.direct_gangs and need > G > 0 and need % G == 0 and slack == 0 and gs0.gfree is None:
            return self.whole_node_plan(b, g, changes, now, caps_out, started)
        scratch = _Scratch([None] * len(st.groups))
        scratch.groups[g] = gs0.overlaid(changes)
        plan = self.placer.place(scratch, need, WHOLE_GPU_MILLI, c_, mm, (g,), None, slack)  # type: ignore[arg-type]
        if plan is None:
            # CPUs or memory bind: rare, replay from the start
            return self.replay(j, now, caps_out, started)
        return self.cap_plan(plan, scratch, b.when, caps_out, started)

    # ------------------------------------------------------------------------------------------
    # bounds
    def first_node_fit(
        self, node_groups: list[int], need: int, c_: int, mm: int
    ) -> tuple[Point, int, int] | None:
        """The first release (in release order) after which a node of these groups holds
        the request, and the node the placer would pick then: with nothing fitting before, only
        the released job's nodes can newly fit, and among them best-fit takes the fullest
        (then lowest id), first-fit the lowest id."""
        st, releases = self.st, self.releases
        first: Point | None = None
        picks: list[tuple[int, int, int, int, int]] = []  # (free GPUs, node, group, cpu, mem)
        for g in node_groups:
            for i, f in releases.group_fits(st.groups[g], need, c_, mm).items():
                if f is None:
                    continue
                if first is None or f[0] < first:
                    first, picks = f[0], [(f[1], i, g, f[2], f[3])]
                elif f[0] == first:
                    picks.append((f[1], i, g, f[2], f[3]))
        if first is None:
            return None
        _, i, g, _, _ = min(picks) if self.placer.best else min(picks, key=lambda p: p[1])
        return first, g, i

    def gang_point(self, g: int, need: int, stop: Point) -> Point | None:
        """The first release in group g, before ``stop``, after which the free-GPU histogram
        of g could hold a gang of ``need`` GPUs (CPUs and memory not yet considered): the
        earliest time a reservation in g is possible. Whole-node gangs read it from the
        nodes' drain points; other gangs replay g's releases on the histogram alone."""
        gs0 = self.st.groups[g]
        slack, allocs = self.slack, self.allocs
        runs = self.run_by_group.get(g)
        if not runs:
            return None
        if slack == 0 and need % gs0.G == 0:
            point = self.releases.kth_drain(gs0, need // gs0.G)
            if point is None:  # enough free nodes now: the first release is the first test
                point = (runs[0][0], runs[0][1])
            return point if point < stop else None
        hist = [len(b) for b in gs0.bucket]
        free = gs0.free_whole
        span = nodes_needed(need, gs0.G) + slack
        whole: dict[int, int] = {}
        for e, s, r in runs:
            if (e, s) >= stop:
                return None
            a = allocs[r]
            for t, i in enumerate(a.nodes):
                dw = a.whole[t]
                if dw:
                    w0 = whole.get(i)
                    if w0 is None:
                        w0 = int(gs0.whole[i])
                    hist[w0] -= 1
                    hist[w0 + dw] += 1
                    whole[i] = w0 + dw
                    free += dw
            if free >= need and top_from_hist(hist, span) >= need:
                return (e, s)
        return None

    # ------------------------------------------------------------------------------------------
    # the free state at a reservation's time
    def changes_until(self, g: int, point: Point) -> dict[int, list[int]]:
        """The free [whole GPUs, CPUs, memory] of group g's nodes that running jobs released up
        to ``point`` (in release order) release, per node they touch."""
        gs0 = self.st.groups[g]
        allocs = self.allocs
        changes: dict[int, list[int]] = {}
        for e, s, r in self.run_by_group[g]:
            if (e, s) > point:
                break
            a = allocs[r]
            for t, i in enumerate(a.nodes):
                v = changes.get(i)
                if v is None:
                    v = changes[i] = [int(gs0.whole[i]), int(gs0.cpu[i]), int(gs0.mem[i])]
                v[0] += a.whole[t]
                v[1] += a.cpu[t]
                v[2] += a.mem[t]
        return changes

    def at_time(self, g: int, when: float) -> tuple[I64, I64, I64]:
        """Group g's free whole GPUs, CPUs and memory per node at ``when``: every running job
        whose estimated end is up to then released (ties at ``when`` included, as are jobs
        past their estimate when ``when`` is now). A reservation's pins and caps read this
        state: what is free at its time, not only after the release that made the job fit."""
        return self.st.groups[g].free_with(self.changes_until(g, (when, 1 << 62)))

    def pinned(
        self,
        g: int,
        nodes: list[int],
        takes: tuple[list[int], list[int], list[int]],
        at: tuple[I64, I64, I64],
        started: list[Alloc],
    ) -> list[int]:
        """A plan's nodes in group g re-pinned (``shared.scheduling.pinning``) against the free state
        the reservation is made on: now, plus what ``started`` (jobs started in the group since
        its bound) took."""
        gs0 = self.st.groups[g]
        if gs0.gfree is not None:
            return nodes  # groups that track GPU shares keep the placer's nodes
        now_w, now_c = gs0.whole, gs0.cpu
        if started:
            now_w, now_c = now_w.copy(), now_c.copy()
            for a in started:
                if a.group == g:
                    for t, i in enumerate(a.nodes):
                        now_w[i] += a.whole[t]
                        now_c[i] += a.cpu[t]
        return repin(nodes, takes[0], takes[1], takes[2], now_w, now_c, at[0], at[1], at[2])

    # ------------------------------------------------------------------------------------------
    # plans and caps
    def whole_node_plan(
        self,
        b: Bound,
        g: int,
        changes: dict[int, list[int]],
        now: float,
        caps_out: Reserved,
        started: list[Alloc],
    ) -> float:
        """``materialize`` of a gang of k whole nodes under best-fit, without the scratch copy
        and the placer's gang walk: what that walk returns, read off the arrays.

        Best-fit's gang walk (``Placer._gang``) ranks nodes by usable GPUs (free GPUs, and what
        the CPUs and memory allow at the job's ratio), never above G per node; k x G GPUs on
        at most k nodes need k nodes at G, and the walk then takes, by its stable ranking and
        its tightest-node rule for the last piece, the k lowest-id nodes at G, each with G
        GPUs and its share of CPUs and memory. With fewer such nodes it finds nothing."""
        j = b.job
        need, c_, mm = self.gpus[j], self.cpu[j], self.mem[j]
        gs0 = self.st.groups[g]
        G = gs0.G
        k = need // G
        whole, cpus, mems = gs0.free_with(changes)
        usable = whole
        if c_:
            usable = np.minimum(usable, cpus * need // c_)
        if mm:
            usable = np.minimum(usable, mems * need // mm)
        full = np.flatnonzero(usable >= G)[:k].tolist()
        if len(full) < k:
            # CPUs or memory bind: rare, replay from the start
            return self.replay(j, now, caps_out, started)
        c_part = -(-c_ * G // need)
        m_part = -(-mm * G // need)
        whole, cpus, mems = at = self.at_time(g, b.when)
        full = self.pinned(g, full, ([G] * k, [c_part] * k, [m_part] * k), at, started)
        cap = Caps.unlimited(gs0.n)
        for i in full:
            cap.whole[i] = whole[i] - G
            cap.cpu[i] = cpus[i] - c_part
            cap.mem[i] = mems[i] - m_part
            cap.block_shares(i)
        caps_out[g] = (b.when, self.counted(cap, g, b.when, need))
        return b.when

    def cap_plan(
        self, plan: Alloc, scratch: _Scratch, when: float, caps_out: Reserved, started: list[Alloc]
    ) -> float:
        """Record a reservation: later jobs may take on the plan's nodes (re-pinned where the
        placer chose nodes free now: ``pinned``) only what leaves the plan room at ``when``
        (free there on the scratch minus the plan)."""
        gs = scratch.groups[plan.group]
        assert gs is not None
        nodes = plan.nodes
        free_w, free_c, free_m = gs.whole, gs.cpu, gs.mem
        if gs.gfree is None:  # groups that track GPU shares keep the scratch's state
            free_w, free_c, free_m = at = self.at_time(plan.group, when)
            nodes = self.pinned(plan.group, nodes, (plan.whole, plan.cpu, plan.mem), at, started)
        cap = Caps.unlimited(gs.n)
        for k, i in enumerate(nodes):
            extra = 0
            if plan.frac_gpu >= 0 and gs.gfree is not None and gs.gfree[i, plan.frac_gpu] == WHOLE_GPU_MILLI:
                extra = 1
            cap.whole[i] = free_w[i] - plan.whole[k] - extra
            cap.cpu[i] = free_c[i] - plan.cpu[k]
            cap.mem[i] = free_m[i] - plan.mem[k]
            cap.block_shares(i)
        caps_out[plan.group] = (when, self.counted(cap, plan.group, when, count_demand(plan)))
        return when

    def counted(self, cap: Caps, g: int, when: float, need: int) -> Caps:
        """``cap`` with, in count mode, textbook EASY's extra GPUs of a reservation in group g
        at ``when`` for a job taking ``need`` GPUs: free now, plus what running jobs with
        estimated ends up to ``when`` release, minus ``need``."""
        if self.count_mode:
            allocs = self.allocs
            free = self.st.groups[g].free_whole
            for e, _, r in self.run_by_group.get(g, ()):
                if e > when:
                    break
                free += count_demand(allocs[r])
            cap.count = free - need
        return cap

    # ------------------------------------------------------------------------------------------
    # the reference: replaying the releases
    def replay(self, j: int, now: float, caps_out: Reserved, started: list[Alloc]) -> float:
        """``reserve`` the plain way: running jobs are released, in order of estimated end (ties
        in the order they started), on a scratch copy of j's groups until j fits (the reference
        for every shortcut)."""
        st, slack, allocs, placer = self.st, self.slack, self.allocs, self.placer
        gset = self.groups_of[j]
        need, m, c_, mm = self.gpus[j], self.milli[j], self.cpu[j], self.mem[j]
        single = need > 0 and (m < WHOLE_GPU_MILLI or need <= min(st.groups[g].G for g in gset))
        node_test = single and m == WHOLE_GPU_MILLI and slack == 0
        share_test = need > 0 and m < WHOLE_GPU_MILLI
        when = INF
        plan: Alloc | None = None
        scratch = _Scratch([None] * len(st.groups))
        if self.light_replay:
            found = self.replay_light(gset, need, m, c_, mm, node_test, share_test)
            if found is None:
                return INF
            e_fit, plan, scratch, rest = found
            if plan is not None:
                return self.cap_plan(plan, scratch, max(e_fit, now), caps_out, started)
            runs = self.run_sorted[rest:]  # the fit test passed but j did not fit: go on the plain way
        else:
            for g in gset:
                scratch.groups[g] = st.groups[g].copy()
            runs = self.run_sorted
        for e, _, r in runs:
            a = allocs[r]
            gs = scratch.groups[a.group]
            if gs is None:
                continue
            gs.give(a)
            if node_test:
                ok = any(gs.whole[i] >= need and gs.cpu[i] >= c_ and gs.mem[i] >= mm for i in a.nodes)
                if not ok:
                    continue
            elif share_test:
                # a share fits only where a release left room on one GPU (nothing fit before)
                mf = gs.maxfrac
                if mf is None or not any(mf[i] >= m and gs.cpu[i] >= c_ and gs.mem[i] >= mm for i in a.nodes):
                    continue
            elif need and m == WHOLE_GPU_MILLI and gs.top_whole(nodes_needed(need, gs.G) + slack) < need:
                continue
            plan = placer.place(scratch, need, m, c_, mm, gset, None, slack)  # type: ignore[arg-type]
            if plan is not None:
                when = max(e, now)
                break
        if plan is None:
            return INF
        return self.cap_plan(plan, scratch, when, caps_out, started)

    def replay_light(
        self, gset: tuple[int, ...], need: int, m: int, c_: int, mm: int, node_test: bool, share_test: bool
    ) -> tuple[float, Alloc | None, _Scratch, int] | None:
        """The start of ``replay`` without scratch copies: releases, in order of estimated end,
        update only the free resources of the nodes they touch (and, for a gang, the free-GPU
        histogram), which is all the fit tests read; the scratch copies are built, once, when
        a test passes (each touched node set to its state after its releases, the state that
        ``give`` after ``give`` reaches). Returns None when no test passes, else (the estimated
        end of the release after which the test passed, the plan or None if j does not fit
        there after all, the scratch, the position in ``run_sorted`` after that release).

        Why: in groups that track GPU shares (every group of the embedded workload) release
        profiles do not apply and every reservation is a replay; a ``give`` on a full copy
        (numpy row updates, the partly used GPU lists) cost ten times this bookkeeping."""
        st, slack, allocs = self.st, self.slack, self.allocs
        want = [False] * len(st.groups)
        for g in gset:
            want[g] = True
        touched: dict[int, dict[int, list[int]]] = {g: {} for g in gset}
        rows: dict[tuple[int, int], list[int]] = {}  # per-GPU free milli-GPUs of touched nodes
        gang = not node_test and not share_test and need > 0 and m == WHOLE_GPU_MILLI
        hists = {g: [len(b) for b in st.groups[g].bucket] for g in gset} if gang else {}
        pos = 0
        for e, _, r in self.run_sorted:
            pos += 1
            a = allocs[r]
            g = a.group
            if not want[g]:
                continue
            gs0 = st.groups[g]
            gfree = gs0.gfree
            nodes_g = touched[g]
            for t, i in enumerate(a.nodes):
                v = nodes_g.get(i)
                if v is None:
                    # [free whole GPUs, milli-CPUs, MiB, the largest free share on one GPU]
                    v = nodes_g[i] = [
                        int(gs0.whole[i]),
                        int(gs0.cpu[i]),
                        int(gs0.mem[i]),
                        int(gs0.maxfrac[i]) if gs0.maxfrac is not None else 0,
                    ]
                    if gfree is not None:
                        rows[g, i] = gfree[i].tolist()
                w0 = v[0]
                v[1] += a.cpu[t]
                v[2] += a.mem[t]
                if gfree is None:
                    v[0] = w0 + a.whole[t]
                else:
                    row = rows[g, i]
                    if a.gpu_ids is not None and a.gpu_ids[t]:
                        for gpu in a.gpu_ids[t]:
                            row[gpu] = WHOLE_GPU_MILLI
                    if a.frac_gpu >= 0:
                        row[a.frac_gpu] += a.milli
                    v[0] = row.count(WHOLE_GPU_MILLI)
                    v[3] = max(row) if gs0.G else 0
                if gang and v[0] != w0:
                    hist = hists[g]
                    hist[w0] -= 1
                    hist[v[0]] += 1
            if node_test:
                if not any(v[0] >= need and v[1] >= c_ and v[2] >= mm for v in (nodes_g[i] for i in a.nodes)):
                    continue
            elif share_test:
                if gfree is None or not any(
                    v[3] >= m and v[1] >= c_ and v[2] >= mm for v in (nodes_g[i] for i in a.nodes)
                ):
                    continue
            elif gang and top_from_hist(hists[g], nodes_needed(need, gs0.G) + slack) < need:
                continue
            tested = node_test or share_test or gang
            plan, scratch = self._place_touched(g, gset, need, m, c_, mm, tested, touched, rows)
            return e, plan, scratch, pos
        return None

    def _place_touched(
        self,
        g: int,
        gset: tuple[int, ...],
        need: int,
        m: int,
        c_: int,
        mm: int,
        tested: bool,
        touched: dict[int, dict[int, list[int]]],
        rows: dict[tuple[int, int], list[int]],
    ) -> tuple[Alloc | None, _Scratch]:
        """``replay_light`` once a fit test passed after a release in group g: the scratch copies
        and the placer's plan on them.

        With a fit test (``tested``), j can fit only in g: every other group of gset either did
        not change since now, when j fitted nowhere, or failed the test (a necessary condition)
        after its last release; placed over g alone, j gets what the placer would give it over
        all of gset, and only g needs a scratch copy."""
        scratch = _Scratch([None] * len(self.st.groups))
        for g2 in (g,) if tested else gset:
            self._build(scratch, g2, touched, rows)
        plan = self.placer.place(scratch, need, m, c_, mm, (g,) if tested else gset, None, self.slack)  # type: ignore[arg-type]
        if plan is None and tested:
            for g2 in gset:  # the replay goes on the plain way, over every group of gset
                if g2 != g:
                    self._build(scratch, g2, touched, rows)
        return plan, scratch

    def _build(
        self,
        scratch: _Scratch,
        g2: int,
        touched: dict[int, dict[int, list[int]]],
        rows: dict[tuple[int, int], list[int]],
    ) -> None:
        """Group g2's scratch copy: each touched node set to its state after its releases."""
        gs = scratch.groups[g2] = self.st.groups[g2].copy()
        for i, v in touched[g2].items():
            row2 = rows.get((g2, i))
            if row2 is None:
                gs.set_free(i, v[0], v[1], v[2])
            else:
                gs.set_shares(i, row2, v[1], v[2])
