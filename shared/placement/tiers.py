"""Objective tiers (d) fragmentation and (e) look-ahead, and the lexicographic weights.

Tiers (b) work and (c) extra nodes are collected while the jobs are added (``model.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.placement.aggregate import fit_count, job_shape
from shared.placement.builder import neg
from shared.placement.model import PlacementModel
from shared.placement.settings import PlacerSettings
from shared.placement.slots import BIG, Cond, Slot
from shared.placement.types import JobRequest


def empty_literal(m: PlacementModel, s: Slot) -> int:
    """A literal implying that no GPU of slot ``s`` is used after placement."""
    if s.empty < 0:
        s.empty = m.b.bool_var()
        if s.gpu.vs:
            m.b.linear(s.gpu.vs, s.gpu.cs, hi=0, enforce=(s.empty,))
        m.aux.append((s.empty, [s.gpu.at_most(0)]))
    return s.empty


def add_fragmentation(m: PlacementModel) -> None:
    """(d): reward each model node that is left empty or full; fragmented means neither.

    Both indicators only *imply* their state and are rewarded, so the solver sets them exactly when
    the state holds: a two-sided indicator. (The reference MILP implied "partial" from a penalized
    indicator, which the solver always set to 0: a dead term.)
    """
    for s in m.slots.values():
        c = s.cls
        if c.gpn < 2 or c.whole == 0:
            continue  # a 1-GPU node is never fragmented; a node with no free GPU stays as it is
        if c.whole == c.gpn:
            m.obj["d"].append((empty_literal(m, s), 1))
        if s.gpu.top >= c.whole:
            s.full = m.b.bool_var()
            m.b.linear(s.gpu.vs, s.gpu.cs, lo=c.whole, enforce=(s.full,))
            m.aux.append((s.full, [s.gpu.at_least(c.whole)]))
            m.obj["d"].append((s.full, 1))


def add_lookahead(m: PlacementModel) -> None:
    """(e): reward each next job (weighted by its rank) that still fits somewhere afterwards.

    Only the model's nodes can change; a next job that fits on a node outside them (or on a node
    the model does not touch) fits whatever the batch does and gets no indicator.
    """
    n = len(m.lookahead)
    slack = m.settings.node_slack
    by_group: dict[int, list[Slot]] = {}
    for s in m.slots.values():
        by_group.setdefault(s.group, []).append(s)
    for i, job in enumerate(m.lookahead):
        lits: list[int] = []
        static = False
        for g in job.groups:
            gs = m.state.groups[g]
            shape = job_shape(job, gs.G, gs.n, slack)
            if shape is None:
                continue
            slots = by_group.get(g, [])
            if shape.gang:
                lit = _gang_room(m, g, shape.min_nodes, slots)
                if lit is None:
                    static = True
                    break
                if lit >= 0:
                    lits.append(lit)
                continue
            fitting = [s for s in slots if s.cls.fits(job)]
            if fit_count(gs, job, slack) > len(fitting):
                static = True  # a node outside the model holds it whatever the batch does
                break
            for s in fitting:
                lits.extend(_room(m, job, s))
        if static or not lits:
            continue
        fit = m.b.bool_var()
        m.b.bool_or([neg(fit), *lits])
        m.ors.append((fit, lits))
        m.obj["e"].append((fit, n - i))


def _room(m: PlacementModel, job: JobRequest, s: Slot) -> list[int]:
    """Literals, each implying that ``job`` still fits on ``s`` after the batch (one per GPU option)."""
    c = s.cls
    base: list[Cond] = []
    for total, free, need in ((s.cpu, c.cpu, job.cpus_milli), (s.mem, c.mem, job.mem_mib)):
        if need and total.top > free - need:
            base.append(total.at_most(free - need))
    options: list[list[Cond]] = []
    if job.gpus == 0:
        options.append([])
    elif not job.fractional:
        options.append(_room_gpu(s, job.gpus))
    else:
        for k, cap in enumerate(c.partial):
            if cap >= job.gpu_milli:
                total = s.partial[k]
                options.append(
                    [total.at_most(cap - job.gpu_milli)] if total.top > cap - job.gpu_milli else []
                )
        for o, use in zip(s.fresh, s.fresh_use, strict=True):
            options.append([([o, *use.vs], [WHOLE_GPU_MILLI, *(-x for x in use.cs)], job.gpu_milli, BIG)])
        if c.whole > 0:
            options.append(_room_gpu(s, 1))
    out = []
    for opt in options:
        conds = [*base, *opt]
        lit = m.b.bool_var()
        for vs, cs, lo, hi in conds:
            m.b.linear(vs, cs, lo=lo, hi=hi, enforce=(lit,))
        m.aux.append((lit, conds))
        out.append(lit)
    return out


def _room_gpu(s: Slot, need: int) -> list[Cond]:
    if s.gpu.top <= s.cls.whole - need:
        return []
    return [s.gpu.at_most(s.cls.whole - need)]


def _gang_room(m: PlacementModel, g: int, need: int, slots: list[Slot]) -> int | None:
    """A literal implying ``need`` GPU-free nodes remain in group g.

    None when that holds whatever the batch does, -1 when it cannot hold.
    """
    gs = m.state.groups[g]
    free_nodes = len(gs.bucket[gs.G]) if gs.G else 0
    model_free = [s for s in slots if s.cls.whole == gs.G]
    untouched = free_nodes - len(model_free)
    if untouched >= need:
        return None
    if untouched + len(model_free) < need:
        return -1
    lits = [empty_literal(m, s) for s in model_free]
    h = m.b.bool_var()
    m.b.linear(lits, [1] * len(lits), lo=need - untouched, enforce=(h,))
    m.aux.append((h, [(lits, [1] * len(lits), need - untouched, BIG)]))
    return h


def work_coefficients(batch: Sequence[JobRequest], settings: PlacerSettings) -> list[int]:
    """Tier (b)'s integer coefficient of each job of the batch (>= 1: starting a job always pays).

    Priority-weighted work = weight x GPUs (a share counts as its fraction) x estimated runtime,
    scaled so that the largest is ``work_levels``. With ``strict_rank`` it is 2^(K-1-rank): each job
    then outweighs all jobs ranked below it together.
    """
    k = len(batch)
    if settings.strict_rank:
        return [1 << (k - 1 - j) for j in range(k)]
    if not settings.weights.work:
        return [1] * k
    values = [job.weight * job.gpu_demand * job.est_runtime for job in batch]
    top = max(values, default=0.0)
    if top <= 0:
        return [1] * k
    return [max(1, round(settings.work_levels * v / top)) for v in values]


def set_objective(m: PlacementModel) -> dict[str, int]:
    """Combine the tiers; each tier's unit outweighs the whole range of every tier below it.

    With ranges R_e, R_d, R_t, R_c of tiers (e), (d), (t), (c): w_e = 1, w_d = R_e + 1,
    w_t = w_d R_d + R_e + 1, w_c = w_t R_t + w_d R_d + R_e + 1,
    w_b = w_c R_c + w_t R_t + w_d R_d + R_e + 1 (R_t = 0 without group costs: the old weights).
    A one-unit gain in a tier then beats any change in all lower tiers together, which is
    lexicographic order with a single solve.
    Tier (b)'s coefficients are the jobs' priority-weighted work scaled to 1..work_levels.
    """
    w = m.settings.weights
    coefs = work_coefficients(m.batch, m.settings)
    for j, jv in enumerate(m.jobs):
        if jv.start >= 0:
            m.obj["b"].append((jv.start, coefs[j]))
    if not w.locality:
        m.obj["c"] = []
    range_c = 0
    if w.locality:
        for jv in m.jobs:
            extra = [
                min(jv.max_nodes[g], sum(1 for p in jv.pairs if p.slot.group == g)) - jv.min_nodes[g]
                for g in jv.groups
            ]
            range_c += max([0, *extra])
    range_t = 0
    for j, jv in enumerate(m.jobs):
        if jv.start >= 0:
            range_t += max([0, *(m.cost.get((j, g), 0) for g in m.batch[j].groups)])
    range_d = sum(c for _, c in m.obj["d"])
    range_e = sum(c for _, c in m.obj["e"])
    wd = range_e + 1
    wt = wd * range_d + range_e + 1
    wc = wt * range_t + wd * range_d + range_e + 1
    wb = wc * range_c + wt * range_t + wd * range_d + range_e + 1
    weights = {"b": wb, "c": wc, "t": wt, "d": wd, "e": 1}
    vs: list[int] = []
    cs: list[int] = []
    for tier, wt in weights.items():
        for v, c in m.obj[tier]:
            vs.append(v)
            cs.append(wt * c)
    m.b.maximize(vs, cs)
    return weights
