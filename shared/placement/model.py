"""The CP-SAT model of one batch: slots, job-slot pairs, capacity, gangs and the priority tier.

(see ``docs/placement.md`` for the full statement)

- **Candidates.** Each job may use a few node classes: the best-fit order's first ones, the
  loosest one, and the class of its warm-start node(s). Each class offers as many slots as the
  warm start uses plus ``slot_extra`` (at least a gang's node count).
- **Symmetry.** The n-th job (in rank order) that may use a class may only use the class's first
  ``sum(max nodes of those jobs up to n)`` slots, and the n-th share job on a slot only its first
  n + 1 fresh GPU bins; both are valid: relabel identical nodes (GPUs) in order of first use.
- **Pairs.** A Boolean ``y`` for a single-node job, an integer ``x`` (GPUs on the node) plus ``y``
  for a gang, one Boolean per usable GPU *bin* for a share (each partially used GPU is a bin; a
  fully free GPU becomes a *fresh* bin when a share opens it).
- **Capacity** per slot: whole GPUs (whole-GPU jobs plus opened fresh bins), CPUs, memory, and the
  milli-GPUs of each bin. A gang's CPUs (memory) on a node are ``ceil(request * x / gpus)``,
  written exactly as ``0 <= gpus * c - request * x <= gpus - 1``.
- **(a) priority, a hard constraint.** For each job j and slot s it may use: if j still fits on s
  after only the higher-ranked jobs' usage, j starts: ``not start_j => some resource of s is short
  after the higher-ranked usage``. A gang starts when it fits on slots no higher-ranked job can use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.aggregate import (
    NO_CAP,
    GroupTable,
    JobShape,
    NodeClass,
    cpu_share,
    job_shape,
    mem_share,
)
from shared.placement.builder import ModelBuilder, neg
from shared.placement.settings import PlacerSettings
from shared.placement.slots import BIG, Cond, JobVars, LinSum, Pair, Slot
from shared.placement.symmetry import first_use_labels, order_identical, request_key
from shared.placement.types import GroupCost, JobRequest
from shared.scheduling.state import Alloc, ClusterState


class PlacementModel:
    """Builds the model for one batch (the tiers and the hint are added by ``build_model``)."""

    def __init__(
        self,
        state: ClusterState,
        batch: Sequence[JobRequest],
        lookahead: Sequence[JobRequest],
        tables: dict[int, GroupTable],
        hint: Sequence[Alloc | None],
        settings: PlacerSettings,
        group_costs: Mapping[int, GroupCost] | None = None,
    ) -> None:
        self.state = state
        self.batch = list(batch)
        self.lookahead = list(lookahead)
        self.settings = settings
        self.b = ModelBuilder()
        self.tables = tables
        self.classes: list[NodeClass] = []  # the classes the model uses, by model index
        self._index: dict[tuple[int, int], int] = {}  # (group, class in its table) -> model index
        self.jobs = [JobVars() for _ in self.batch]
        self.slots: dict[tuple[int, int], Slot] = {}  # (class, label) -> slot
        self.aux: list[tuple[int, list[Cond]]] = []  # literal => all conds
        self.ors: list[tuple[int, list[int]]] = []  # literal => OR of literals
        # tier (a): per (job, slot), the resource shortages of which one must hold if the job waits
        self.checks: list[tuple[int, list[list[Cond]]]] = []
        self.obj: dict[str, list[tuple[int, int]]] = {"b": [], "c": [], "t": [], "d": [], "e": []}
        # tier (t): integer cost of job j in group g (empty without group costs)
        self.cost: dict[tuple[int, int], int] = (
            _integer_costs(self.batch, group_costs, settings.cost_levels)
            if group_costs and settings.weights.type_reserve
            else {}
        )
        self.hint_labels: dict[tuple[int, int], int] = {}  # (group, node) -> slot label
        self._shapes: dict[tuple[int, int], JobShape | None] = {}
        self._orderable: dict[int, bool] = {}
        cands = self._candidates(hint)
        self._make_slot_counts(cands, hint)
        for j in range(len(self.batch)):
            self._add_job(j, cands[j])
        self._capacity()
        order_identical(self)

    def class_index(self, group: int, c: int) -> int:
        """Model index of class ``c`` of ``group``'s table (materialized on first use)."""
        key = (group, c)
        ci = self._index.get(key)
        if ci is None:
            ci = self._index[key] = len(self.classes)
            self.classes.append(self.tables[group].get(c))
        return ci

    def node_class(self, group: int, node: int) -> int:
        """Model index of the class holding ``node``."""
        return self.class_index(group, self.tables[group].node_class[node])

    def shape(self, j: int, group: int) -> JobShape | None:
        key = (j, group)
        if key not in self._shapes:
            gs = self.state.groups[group]
            self._shapes[key] = job_shape(self.batch[j], gs.G, gs.n, self.settings.node_slack)
        return self._shapes[key]

    # -- candidates -------------------------------------------------------------------------------
    def _candidates(self, hint: Sequence[Alloc | None]) -> list[list[int]]:
        """Classes each job may use: best-fit order, the loosest one, and the warm start's.

        Jobs with identical requests get identical candidates (the union of their warm starts'
        classes), which the identical-job ordering (``symmetry.order_identical``) relies on.
        """
        base: dict[tuple[object, ...], set[int]] = {}
        for j, job in enumerate(self.batch):
            key = request_key(job)
            if key not in base:
                base[key] = set(self._job_candidates(j, job))
            a = hint[j]
            if a is not None:
                base[key].update(self.node_class(a.group, n) for n in a.nodes)
        return [sorted(base[request_key(job)]) for job in self.batch]

    def _job_candidates(self, j: int, job: JobRequest) -> list[int]:
        m = self.settings.classes_per_job
        single: list[tuple[tuple[float, ...], int, int]] = []
        chosen: list[int] = []
        for g in job.groups:
            table = self.tables.get(g)
            shape = self.shape(j, g) if table is not None else None
            if table is None or shape is None:
                continue
            if shape.gang:
                chosen.extend(self._gang_candidates(job, table, shape.max_nodes, m))
                continue
            mask = table.fit_mask(job)
            if mask.any():
                cost = float(self.cost.get((j, g), 0))
                single.extend(
                    ((cost, *score), g, c) for score, c in table.fit_order(job, mask, max(1, m - 1))
                )
        if single:
            # with group costs (tier t) the cheapest groups come first, best-fit order inside them
            single.sort()
            take = single[: max(1, m - 1)]
            loosest = max(single, key=lambda e: (e[0][1:], e[1], e[2]))
            if loosest not in take:
                take.append(loosest)  # the loosest class: lets the model spread or keep room
            chosen.extend(self.class_index(g, c) for _, g, c in take)
        return chosen

    def _gang_candidates(self, job: JobRequest, table: GroupTable, max_nodes: int, m: int) -> list[int]:
        """Fullest classes first (as best-fit's gang), until ``m`` classes and enough GPUs."""
        usable = table.usable(job)
        count = table.count
        out: list[int] = []
        cap = 0
        for c in np.lexsort((table.first, table.whole, -usable)):
            u = int(usable[c])
            if u <= 0 or (len(out) >= m and cap >= job.gpus):
                break
            out.append(self.class_index(table.gs.index, int(c)))
            cap += u * min(int(count[c]), max_nodes)
        return out

    def _make_slot_counts(self, cands: list[list[int]], hint: Sequence[Alloc | None]) -> None:
        self.hint_labels = first_use_labels(hint, self.node_class)
        hint_nodes: dict[int, int] = {}
        for (g, n), label in self.hint_labels.items():
            ci = self.node_class(g, n)
            hint_nodes[ci] = max(hint_nodes.get(ci, 0), label + 1)
        cum: dict[int, int] = {}
        gang_need: dict[int, int] = {}
        for j, cs in enumerate(cands):
            for ci in cs:
                shape = self.shape(j, self.classes[ci].group)
                assert shape is not None
                cum[ci] = cum.get(ci, 0) + shape.max_nodes
                if shape.gang:
                    gang_need[ci] = max(gang_need.get(ci, 0), shape.max_nodes)
        self.n_slots: dict[int, int] = {}
        for ci, total in cum.items():
            want = max(hint_nodes.get(ci, 0) + self.settings.slot_extra, gang_need.get(ci, 0), 1)
            self.n_slots[ci] = min(self.classes[ci].count, total, want)
        self._opened: dict[int, int] = {}  # class -> slots the jobs so far may use

    def _slot(self, ci: int, label: int) -> Slot:
        key = (ci, label)
        s = self.slots.get(key)
        if s is None:
            c = self.classes[ci]
            s = Slot(c, label, partial=[LinSum() for _ in c.partial])
            self.slots[key] = s
        return s

    # -- one job: priority checks (on the higher-ranked usage), then its pairs ----------------------
    def _add_job(self, j: int, cands: list[int]) -> None:
        job = self.batch[j]
        jv = self.jobs[j]
        slots: list[tuple[Slot, bool]] = []
        for ci in cands:
            cls = self.classes[ci]
            shape = self.shape(j, cls.group)
            assert shape is not None
            self._opened[ci] = self._opened.get(ci, 0) + shape.max_nodes
            if self.capped(j, cls) and (
                cls.usable_capped(job) <= 0 if shape.gang else not cls.fits_capped(job)
            ):
                continue  # the reservation's caps leave this job no room on these nodes
            slots.extend(
                (self._slot(ci, k), shape.gang) for k in range(min(self._opened[ci], self.n_slots[ci]))
            )
        gang = any(g for _, g in slots)
        checks: list[list[list[Cond]]] = []
        free_for_gang: dict[int, list[int]] = {}
        for s, is_gang in slots:
            if is_gang:
                if not (s.gpu.vs or s.cpu.vs or s.mem.vs):
                    u = s.cls.usable_capped(job) if self.capped(j, s.cls) else s.cls.usable(job)
                    free_for_gang.setdefault(s.group, []).append(u)
            else:
                checks.append(self._shortages(job, s, self.capped(j, s.cls)))
        # a job that is a gang in some group uses gang pairs everywhere (a single-node group is
        # then a gang of at most one node)
        for s, _ in slots:
            p = self._gang_pair(j, job, s) if gang else self._pair(j, job, s)
            if p is not None:
                jv.pairs.append(p)
        if not jv.pairs:
            return
        jv.start = self.b.bool_var()
        if gang:
            self._gang_constraints(j, jv)
            jv.forced = any(
                sum(sorted(caps, reverse=True)[: jv.max_nodes.get(g, 0)]) >= job.gpus
                for g, caps in free_for_gang.items()
            )
        else:
            lits = [p.y for p in jv.pairs if p.y >= 0] + [f for p in jv.pairs for _, _, f in p.bins]
            self.b.linear([*lits, jv.start], [1] * len(lits) + [-1], lo=0, hi=0)
        jv.forced = jv.forced or any(not alts for alts in checks)
        if jv.forced:
            self.b.linear([jv.start], [1], lo=1, hi=1)
            return
        for alts in checks:
            self._post_check(j, jv.start, alts)

    def _shortages(self, job: JobRequest, s: Slot, capped: bool = False) -> list[list[Cond]]:
        """Ways in which ``job`` does not fit on ``s`` after the higher-ranked usage so far.

        Each item is a list of conditions that together mean "short"; an empty result means the
        job fits there whatever the higher-ranked jobs do. A ``capped`` job is also short when
        the higher-ranked capped jobs leave it too little of a reservation's caps.
        """
        c = s.cls
        out: list[list[Cond]] = []
        for total, free, need in ((s.cpu, c.cpu, job.cpus_milli), (s.mem, c.mem, job.mem_mib)):
            if need and total.top >= free - need + 1:
                out.append([total.at_least(free - need + 1)])
        if capped and not job.fractional:
            for total, cap, need in (
                (s.cap_gpu, c.cap_whole, job.gpus),
                (s.cap_cpu, c.cap_cpu, job.cpus_milli),
                (s.cap_mem, c.cap_mem, job.mem_mib),
            ):
                if need and cap < NO_CAP and total.top >= cap - need + 1:
                    out.append([total.at_least(cap - need + 1)])
        if job.gpus == 0:
            return out
        if not job.fractional:
            used = self._gpus_above(s, self._opened_above(s))
            if used.top >= c.whole - job.gpus + 1:
                out.append([used.at_least(c.whole - job.gpus + 1)])
            return out
        conds: list[Cond] = []
        for k, cap in enumerate(c.partial):
            if cap >= job.gpu_milli:
                if s.partial[k].top < cap - job.gpu_milli + 1:
                    return out  # this GPU keeps room whatever the higher-ranked jobs do
                conds.append(s.partial[k].at_least(cap - job.gpu_milli + 1))
        opened = self._opened_above(s)  # the same Booleans in both kinds of condition (see below)
        used = self._gpus_above(s, opened)
        for u, use in zip(opened, s.fresh_use, strict=True):
            conds.append(([u, *use.vs], [WHOLE_GPU_MILLI, *(-x for x in use.cs)], -BIG, job.gpu_milli - 1))
        if c.whole > 0:
            if used.top < c.whole:
                return out
            conds.append(used.at_least(c.whole))
        out.append(conds)
        return out

    def _opened_above(self, s: Slot) -> list[int]:
        """Per fresh bin of ``s``, a Boolean that may be 1 only if a job added so far (ranked above
        the one being added) has a share on it: ``u <= sum of their share Booleans``.

        A check wants its shortage, so the solver sets ``u`` to 1 exactly when it may. (Using the
        bin's "opened" Boolean instead would count bins opened by lower-ranked jobs.)
        """
        out = []
        for use in s.fresh_use:
            u = self.b.bool_var()
            self.b.linear([*use.vs, u], [1] * len(use.vs) + [-1], lo=0)
            self.aux.append((u, [(list(use.vs), [1] * len(use.vs), 1, BIG)]))
            out.append(u)
        return out

    @staticmethod
    def _gpus_above(s: Slot, opened: list[int]) -> LinSum:
        """Whole GPUs of ``s`` used by the jobs added so far: whole-GPU jobs and their fresh bins.

        A share job's check must use the same ``opened`` Booleans for "bin b is too full" and for
        "no whole GPU is free": with one Boolean per bin, claiming a used bin unused in one
        condition makes the other fail (capacity), so the check is exact.
        """
        if not opened:
            return s.whole_use
        total = LinSum(list(s.whole_use.vs), list(s.whole_use.cs), s.whole_use.top)
        for u in opened:
            total.add(u, 1, 1)
        return total

    def _post_check(self, j: int, start: int, alts: list[list[Cond]]) -> None:
        """``not start => one of alts holds``; one alternative needs no auxiliary literal."""
        self.checks.append((j, alts))
        if len(alts) == 1:
            for vs, cs, lo, hi in alts[0]:
                self.b.linear(vs, cs, lo=lo, hi=hi, enforce=(neg(start),))
            return
        lits = []
        for conds in alts:
            lit = self.b.bool_var()
            for vs, cs, lo, hi in conds:
                self.b.linear(vs, cs, lo=lo, hi=hi, enforce=(lit,))
            self.aux.append((lit, conds))
            lits.append(lit)
        self.b.bool_or([start, *lits])

    def capped(self, j: int, cls: NodeClass) -> bool:
        """Job j must respect a reservation's caps on this class's nodes."""
        return cls.capped and cls.group in self.batch[j].capped

    def _pair(self, j: int, job: JobRequest, s: Slot) -> Pair | None:
        if job.fractional:
            return self._frac_pair(j, job, s)
        c = s.cls
        y = self.b.bool_var()
        if job.gpus:
            s.gpu.add(y, job.gpus, 1)
            s.whole_use.add(y, job.gpus, 1)
        if job.cpus_milli and not c.cpu_slack:
            s.cpu.add(y, job.cpus_milli, 1)
        if job.mem_mib and not c.mem_slack:
            s.mem.add(y, job.mem_mib, 1)
        if self.capped(j, c):
            for total, need, cap in (
                (s.cap_gpu, job.gpus, c.cap_whole),
                (s.cap_cpu, job.cpus_milli, c.cap_cpu),
                (s.cap_mem, job.mem_mib, c.cap_mem),
            ):
                if need and cap < NO_CAP:
                    total.add(y, need, 1)
        self._charge(j, s.group, y)
        return Pair(j, s, y=y)

    def _gang_pair(self, j: int, job: JobRequest, s: Slot) -> Pair | None:
        b = self.b
        c = s.cls
        capped = self.capped(j, c)
        cap = c.usable_capped(job) if capped else c.usable(job)
        if cap <= 0:
            return None
        p = Pair(j, s, y=b.bool_var(), x=b.int_var(0, cap))
        b.linear([p.x, p.y], [1, -1], lo=0)  # y => x >= 1
        b.linear([p.x, p.y], [1, -cap], hi=0)  # x >= 1 => y
        s.gpu.add(p.x, 1, cap)
        s.whole_use.add(p.x, 1, cap)
        g = job.gpus
        if job.cpus_milli and (not c.cpu_slack or (capped and c.cap_cpu < NO_CAP)):
            p.cpu = b.int_var(0, cpu_share(job, cap))
            b.linear([p.cpu, p.x], [g, -job.cpus_milli], lo=0, hi=g - 1)
            if not c.cpu_slack:
                s.cpu.add(p.cpu, 1, cpu_share(job, cap))
        if job.mem_mib and (not c.mem_slack or (capped and c.cap_mem < NO_CAP)):
            p.mem = b.int_var(0, mem_share(job, cap))
            b.linear([p.mem, p.x], [g, -job.mem_mib], lo=0, hi=g - 1)
            if not c.mem_slack:
                s.mem.add(p.mem, 1, mem_share(job, cap))
        if capped:
            if c.cap_whole < NO_CAP:
                s.cap_gpu.add(p.x, 1, cap)
            if p.cpu >= 0 and c.cap_cpu < NO_CAP:
                s.cap_cpu.add(p.cpu, 1, cpu_share(job, cap))
            if p.mem >= 0 and c.cap_mem < NO_CAP:
                s.cap_mem.add(p.mem, 1, mem_share(job, cap))
        return p

    def _frac_pair(self, j: int, job: JobRequest, s: Slot) -> Pair | None:
        b = self.b
        c = s.cls
        p = Pair(j, s)
        for k, cap in enumerate(c.partial):
            if cap >= job.gpu_milli:
                f = b.bool_var()
                p.bins.append((False, k, f))
                s.partial[k].add(f, job.gpu_milli, 1)
        if len(s.fresh) < min(c.whole, s.n_frac + 1):
            o = b.bool_var()
            if s.fresh:
                b.implies(o, s.fresh[-1])  # fresh bins open in order
            s.fresh.append(o)
            s.fresh_use.append(LinSum())
            s.gpu.add(o, 1, 1)
        for k in range(min(len(s.fresh), s.n_frac + 1)):
            f = b.bool_var()
            p.bins.append((True, k, f))
            s.fresh_use[k].add(f, job.gpu_milli, 1)
        s.n_frac += 1
        if not p.bins:
            return None
        for _, _, f in p.bins:
            self._charge(j, s.group, f)
            if job.cpus_milli and not c.cpu_slack:
                s.cpu.add(f, job.cpus_milli, 1)
            if job.mem_mib and not c.mem_slack:
                s.mem.add(f, job.mem_mib, 1)
        return p

    def _gang_constraints(self, j: int, jv: JobVars) -> None:
        b = self.b
        job = self.batch[j]
        by_group: dict[int, list[Pair]] = {}
        for p in jv.pairs:
            by_group.setdefault(p.slot.group, []).append(p)
        if len(by_group) == 1:
            jv.groups = {next(iter(by_group)): jv.start}
        else:
            jv.groups = {g: b.bool_var() for g in by_group}
            gl = list(jv.groups.values())
            b.linear([*gl, jv.start], [1] * len(gl) + [-1], lo=0, hi=0)
        for g, ps in by_group.items():
            z = jv.groups[g]
            shape = self.shape(j, g)
            assert shape is not None
            jv.min_nodes[g] = shape.min_nodes
            jv.max_nodes[g] = shape.max_nodes
            xs = [p.x for p in ps]
            ys = [p.y for p in ps]
            b.linear([*xs, z], [1] * len(xs) + [-job.gpus], lo=0, hi=0)
            b.linear([*ys, z], [1] * len(ys) + [-shape.max_nodes], hi=0)
            for y in ys:
                self.obj["c"].append((y, -1))
            self.obj["c"].append((z, shape.min_nodes))
            self._charge(j, g, z)

    def _charge(self, j: int, group: int, lit: int) -> None:
        """Tier (t): ``lit`` (job j runs in ``group`` this way) costs the job's cost there."""
        cost = self.cost.get((j, group), 0)
        if cost:
            self.obj["t"].append((lit, -cost))

    # -- capacity ---------------------------------------------------------------------------------
    def _capacity(self) -> None:
        b = self.b
        for s in self.slots.values():
            c = s.cls
            for total, cap in ((s.gpu, c.whole), (s.cpu, c.cpu), (s.mem, c.mem)):
                if total.top > cap:
                    b.linear(total.vs, total.cs, hi=cap)
            for total, cap in zip(s.partial, c.partial, strict=True):
                if total.top > cap:
                    b.linear(total.vs, total.cs, hi=cap)
            # reservation caps: what the capped jobs together take stays within them
            for total, cap in ((s.cap_gpu, c.cap_whole), (s.cap_cpu, c.cap_cpu), (s.cap_mem, c.cap_mem)):
                if total.top > cap:
                    b.linear(total.vs, total.cs, hi=cap)
            for o, use in zip(s.fresh, s.fresh_use, strict=True):
                b.linear([*use.vs, o], [*use.cs, -WHOLE_GPU_MILLI], hi=0)  # shares fit, and imply o
                b.linear([*use.vs, o], [1] * len(use.vs) + [-1], lo=0)  # o implies a share on it

    def orderable(self, j: int) -> bool:
        """A whole-GPU or CPU-only job that is a single-node job in every group it may use."""
        ok = self._orderable.get(j)
        if ok is None:
            job = self.batch[j]
            ok = not job.fractional and all(
                (sh := self.shape(j, g)) is None or not sh.gang for g in job.groups
            )
            self._orderable[j] = ok
        return ok


def _integer_costs(
    batch: Sequence[JobRequest], costs: Mapping[int, GroupCost], levels: int
) -> dict[tuple[int, int], int]:
    """Tier (t)'s coefficient of job j in group g: its cost scaled so the largest is ``levels``.

    A group without a price costs 0. Rounding keeps ties between groups of (nearly) equal price,
    so best-fit order and the lower tiers decide among them. A job whose groups all cost the same
    (one eligible group, say) gets no term: a constant changes no decision, only the solve.
    """
    raw: dict[tuple[int, int], float] = {}
    for j, job in enumerate(batch):
        mine = [costs[g].cost(job) if g in costs else 0.0 for g in job.groups]
        if len(set(mine)) > 1:
            raw.update(((j, g), v) for g, v in zip(job.groups, mine, strict=True) if v > 0)
    top = max(raw.values(), default=0.0)
    if top <= 0:
        return {}
    return {key: round(levels * v / top) for key, v in raw.items() if round(levels * v / top) > 0}
