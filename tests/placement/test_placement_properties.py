"""Property tests of the CP-SAT placer on random small clusters, busy states and batches.

Every returned placement is applied to a copy of the state (``ClusterState.take``) and checked with
``check_invariants``; each allocation must be in a group of an allowed GPU type and have the shape
its request implies; no job that would fit after the higher-ranked started jobs alone may wait; the
started priority-weighted work is never below best-fit's; and the warm start is a feasible point
of the model (solved with every variable fixed to its hint).
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import EXACT, apply_all, place, spec, state

from shared.domain.cluster import ClusterSpec
from shared.placement import CpSatPlacer, JobRequest, PlacerSettings, SolveStatus
from shared.placement.aggregate import job_shape
from shared.placement.builder import solve
from shared.placement.placer import build_model
from shared.placement.tiers import work_coefficients
from shared.placement.warmstart import best_fit_batch, partial_copy
from shared.scheduling.placement import BestFit, Caps, alloc_fits
from shared.scheduling.state import Alloc, ClusterState

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TYPES = ("A", "B", "C")

group_st = st.tuples(
    st.sampled_from(TYPES),
    st.integers(1, 4),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([8, 32, 96]),
    st.sampled_from([32, 128, 512]),
)
# (kind, gpus, milli, cpus in milli, memory in MiB, allowed types, estimate)
job_st = st.tuples(
    st.sampled_from(["whole"] * 5 + ["frac"] * 3 + ["cpu"]),
    st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8, 12]),
    st.sampled_from([100, 250, 500, 700, 999]),
    st.sampled_from([0, 1000, 4000, 16000, 48000]),
    st.sampled_from([0, 4096, 32768, 131072]),
    st.sampled_from([TYPES, ("A",), ("B",), ("A", "C")]),
    st.sampled_from([1.0, 60.0, 3600.0]),
)


def _request(sp: ClusterSpec, t: tuple[str, int, int, int, int, tuple[str, ...], float]) -> JobRequest:
    kind, gpus, milli, cpu, mem, types, est = t
    groups = tuple(k for k, g in enumerate(sp.node_groups) if g.gpu_type in types)
    if kind == "cpu":
        return JobRequest(0, 1000, max(cpu, 1000), mem, groups or (0,), 1.0, est)
    if kind == "frac":
        return JobRequest(1, milli, cpu, mem, groups or (0,), 1.0, est)
    return JobRequest(gpus, 1000, cpu, mem, groups or (0,), 1.0, est)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int]:
    sp = spec(*draw(st.lists(group_st, min_size=1, max_size=3)))
    cs = state(sp, track=True)
    bf = BestFit()
    for t in draw(st.lists(job_st, max_size=10)):  # make the cluster busy with best-fit
        j = _request(sp, t)
        a = bf.place(cs, j.gpus, j.gpu_milli, j.cpus_milli, j.mem_mib, j.groups)
        if a is not None:
            cs.take(a)
    batch = [_request(sp, t) for t in draw(st.lists(job_st, min_size=1, max_size=8))]
    # priority weights unrelated to the rank, so that tier (b) often prefers lower-ranked jobs
    weights = draw(st.lists(st.sampled_from([1.0, 10.0, 100.0]), min_size=len(batch), max_size=len(batch)))
    batch = [replace(job, weight=w) for job, w in zip(batch, weights, strict=True)]
    ahead = [_request(sp, t) for t in draw(st.lists(job_st, max_size=3))]
    return sp, cs, batch, ahead, draw(st.sampled_from([0, 0, 1]))


def _single_node(cs: ClusterState, job: JobRequest, slack: int) -> bool:
    shapes = [job_shape(job, cs.groups[g].G, cs.groups[g].n, slack) for g in job.groups]
    return all(s is None or not s.gang for s in shapes)


def _fits_after(cs: ClusterState, allocs: list[Alloc | None], job: JobRequest, slack: int) -> bool:
    copy = partial_copy(cs, set(range(len(cs.groups))))
    for a in allocs:
        if a is not None:
            copy.take(a)
    return (
        BestFit().place(copy, job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib, job.groups, None, slack)
        is not None
    )


def _check(
    sp: ClusterSpec,
    cs: ClusterState,
    batch: list[JobRequest],
    cfg: PlacerSettings,
    allocs: list[Alloc | None],
) -> None:
    apply_all(cs, sp, allocs)  # capacities: GPUs, shares, CPUs, memory on every node
    used_ids: set[tuple[int, int, int]] = set()
    for job, a in zip(batch, allocs, strict=True):
        if a is None:
            continue
        assert a.group in job.groups  # an allowed GPU type (and partition)
        gs = cs.groups[a.group]
        if job.fractional:
            assert a.frac_gpu >= 0 and a.milli == job.gpu_milli and a.whole == [0]
            continue
        assert sum(a.whole) == job.gpus
        shape = job_shape(job, gs.G, gs.n, cfg.node_slack)
        assert shape is not None and len(a.nodes) <= shape.max_nodes
        if len(a.nodes) > 1:
            assert a.cpu == [math.ceil(job.cpus_milli * w / job.gpus) for w in a.whole]
        for n, ids in zip(a.nodes, a.gpu_ids or [[] for _ in a.nodes], strict=True):
            for gpu in ids:
                assert (a.group, n, gpu) not in used_ids
                used_ids.add((a.group, n, gpu))


@SETTINGS
@given(scenarios())
def test_placements_respect_capacity_types_and_priority(
    case: tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int],
) -> None:
    sp, cs, batch, ahead, slack = case
    cfg = EXACT.model_copy(update={"node_slack": slack})
    res = place(cs, batch, ahead, settings=cfg)
    assert res.status in (SolveStatus.OPTIMAL, SolveStatus.NOTHING_FITS)
    allocs = res.allocs
    _check(sp, cs, batch, cfg, allocs)
    # tier (a): a single-node job that waits does not fit once only the jobs ranked above it start
    for j, job in enumerate(batch):
        if allocs[j] is None and _single_node(cs, job, slack):
            assert not _fits_after(cs, allocs[:j], job, slack)
    assert res.terms.priority_violations == 0
    # the solver starts from best-fit, so its started work is never lower
    coefs = work_coefficients(batch, cfg)
    greedy = best_fit_batch(cs, batch, slack)
    assert sum(c for c, a in zip(coefs, allocs, strict=True) if a) >= sum(
        c for c, a in zip(coefs, greedy, strict=True) if a
    )


@SETTINGS
@given(scenarios())
def test_warm_start_is_a_feasible_point_of_the_model(
    case: tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int],
) -> None:
    sp, cs, batch, ahead, slack = case
    cfg = PlacerSettings(node_slack=slack, reproducible=True)  # default pruning this time
    hint = best_fit_batch(cs, batch, slack)
    if all(a is None for a in hint):
        return
    model, _ = build_model(cs, batch, ahead, hint, cfg)
    out = solve(model.b, seed=0, wall_s=5.0, deterministic_time=5.0, fix_hint=True)
    assert out.status in ("OPTIMAL", "FEASIBLE")
    # and the default (pruned) model's answer is valid too
    res = place(cs, batch, ahead, settings=cfg)
    assert res.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    _check(sp, cs, batch, cfg, res.allocs)


@st.composite
def contended(draw: st.DrawFn) -> tuple[ClusterSpec, ClusterState, list[JobRequest]]:
    """One small group, partly used, and whole-GPU jobs whose weights grow down the ranking.

    Tier (b) then prefers the lower-ranked jobs whenever they compete for room, which is exactly
    when tier (a) has to hold.
    """
    gpn = draw(st.sampled_from([2, 4, 8]))
    sp = spec(("A", draw(st.integers(1, 3)), gpn, 64, 256))
    cs = state(sp)
    for n in range(len(cs.groups[0].whole)):
        used = draw(st.integers(0, gpn))
        if used:
            cs.take(Alloc(0, [n], [used], [0], [0]))
    sizes = draw(st.lists(st.integers(1, gpn), min_size=2, max_size=8))
    return sp, cs, [JobRequest(g, 1000, 0, 0, (0,), float(1 + 10 * k), 1.0) for k, g in enumerate(sizes)]


@SETTINGS
@given(contended())
def test_no_lower_ranked_job_takes_the_room_of_a_higher_ranked_one(
    case: tuple[ClusterSpec, ClusterState, list[JobRequest]],
) -> None:
    sp, cs, batch = case
    res = place(cs, batch)
    _check(sp, cs, batch, EXACT, res.allocs)
    for j, job in enumerate(batch):
        if res.allocs[j] is None:
            assert not _fits_after(cs, res.allocs[:j], job, 0)


@st.composite
def capped_scenarios(
    draw: st.DrawFn,
) -> tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int, dict[int, Caps]]:
    """A scenario plus EASY-style reservation caps on some nodes and jobs that must respect them."""
    sp, cs, batch, ahead, slack = draw(scenarios())
    caps: dict[int, Caps] = {}
    for g, gs in enumerate(cs.groups):
        if not draw(st.booleans()):
            continue
        cap = Caps.unlimited(gs.n)
        for n in range(gs.n):
            if draw(st.booleans()):
                cap.whole[n] = draw(st.integers(0, int(gs.whole[n])))
                cap.cpu[n] = draw(st.integers(0, int(gs.cpu[n])))
                cap.mem[n] = draw(st.integers(0, int(gs.mem[n])))
                cap.block_shares(n)
        caps[g] = cap
    flags = draw(st.lists(st.booleans(), min_size=len(batch), max_size=len(batch)))
    batch = [replace(job, capped=job.groups if f else ()) for job, f in zip(batch, flags, strict=True)]
    return sp, cs, batch, ahead, slack, caps


def _copy_caps(caps: dict[int, Caps]) -> dict[int, Caps]:
    return {
        g: Caps(c.whole.copy(), c.cpu.copy(), c.mem.copy(), c.frac_blocked.copy(), set(c.frac_blocked_set))
        for g, c in caps.items()
    }


@SETTINGS
@given(capped_scenarios())
def test_placements_respect_reservation_caps(
    case: tuple[ClusterSpec, ClusterState, list[JobRequest], list[JobRequest], int, dict[int, Caps]],
) -> None:
    """Walking the batch in rank order as the simulator does (each capped job checked against the
    caps left by the capped jobs before it, then using them up), every allocation is admitted,
    and a single-node job that waits would not be admitted either (tier a under caps)."""
    sp, cs, batch, ahead, slack, caps = case
    cfg = EXACT.model_copy(update={"node_slack": slack})
    res = CpSatPlacer(cfg).place_batch(cs, batch, ahead, None, caps)
    assert res.status in (SolveStatus.OPTIMAL, SolveStatus.NOTHING_FITS)
    _check(sp, cs, batch, cfg, res.allocs)
    copy = partial_copy(cs, set(range(len(cs.groups))))
    own = _copy_caps(caps)
    for job, a in zip(batch, res.allocs, strict=True):
        mine = {g: own[g] for g in job.capped if g in own} or None
        if a is None:
            if _single_node(cs, job, slack):
                bf = BestFit().place(
                    copy, job.gpus, job.gpu_milli, job.cpus_milli, job.mem_mib, job.groups, mine, slack
                )
                assert bf is None
            continue
        assert alloc_fits(copy, a, mine, job.gpu_milli)
        copy.take(a)
        if mine and a.group in mine:
            mine[a.group].consume(a)
    # the warm start honours the caps too, and the solver never starts less work than it
    coefs = work_coefficients(batch, cfg)
    greedy = best_fit_batch(cs, batch, slack, None, caps)
    assert sum(c for c, a in zip(coefs, res.allocs, strict=True) if a) >= sum(
        c for c, a in zip(coefs, greedy, strict=True) if a
    )
