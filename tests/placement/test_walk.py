"""WalkState makes exactly best-fit's choices (``shared.scheduling.placement.BestFit``) on random walks.

Each walk starts from a random occupied cluster (whole GPUs, GPU shares, CPUs and memory in use,
groups with and without share tracking) and places a long sequence of random jobs (whole GPUs,
gangs, shares, CPU-only and empty requests, some with unsorted groups, some with nodes blocked by
a reservation) on two copies: ``BestFit`` with the equivalent blocking caps on one, ``WalkState``
on the other. Every answer must be the same allocation, every start taken on both; the free
resources, allocation checks and the synced ``ClusterState`` must agree all along.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from placement_helpers import spec, state

from shared.domain.cluster import ClusterSpec
from shared.placement.walk import WalkState, blocking_caps
from shared.placement.warmstart import partial_copy
from shared.scheduling.placement import BestFit, Caps, alloc_fits
from shared.scheduling.state import Alloc, ClusterState


def _cluster(rng: random.Random) -> tuple[ClusterSpec, set[int]]:
    groups = []
    for k in range(rng.randint(2, 6)):
        g = rng.choice([1, 2, 4, 8, 8])
        groups.append((f"T{k % 3}", rng.randint(1, 12), g, rng.choice([16, 32, 96]), rng.choice([64, 256])))
    sp = spec(*groups)
    track = {g for g in range(len(groups)) if rng.random() < 0.6}
    return sp, track


def _request(
    rng: random.Random, sp: ClusterSpec, track: set[int]
) -> tuple[int, int, int, int, tuple[int, ...]]:
    """(gpus, milli, milli-CPUs, MiB, groups) of a random job."""
    n = len(sp.node_groups)
    kind = rng.random()
    cpu = rng.choice([0, 500, 2000, 8000, 16000])
    mem = rng.choice([0, 1024, 8192, 32768])
    if kind < 0.12:  # a share: only groups that track shares
        pool = sorted(track)
        if not pool:
            return 1, 1000, cpu, mem, (0,)
        groups = tuple(sorted(rng.sample(pool, rng.randint(1, len(pool)))))
        return 1, rng.choice([100, 250, 500, 700, 900]), cpu, mem, groups
    groups = tuple(sorted(rng.sample(range(n), rng.randint(1, n))))
    if rng.random() < 0.1:
        groups = tuple(rng.sample(groups, len(groups)))  # unsorted: the fallback path
    if kind < 0.25:
        return 0, 1000, cpu, mem, groups  # CPU-only (or nothing at all)
    if kind < 0.32:
        return rng.choice([9, 12, 16]), 1000, cpu, mem, groups  # a gang on 8-GPU nodes
    return rng.choice([1, 1, 1, 2, 4, 8]), 1000, cpu, mem, groups


def _occupy(rng: random.Random, st: ClusterState, sp: ClusterSpec, track: set[int]) -> None:
    bf = BestFit()
    for _ in range(rng.randint(0, 60)):
        gpus, milli, cpu, mem, groups = _request(rng, sp, track)
        a = bf.place(st, gpus, milli, cpu, mem, groups)
        if a is not None:
            st.take(a)


def _blocked(
    rng: random.Random, st: ClusterState, groups: tuple[int, ...]
) -> dict[int, frozenset[int]] | None:
    if rng.random() < 0.6:
        return None
    out = {}
    for g in groups:
        if rng.random() < 0.5:
            n = st.groups[g].n
            out[g] = frozenset(rng.sample(range(n), rng.randint(0, n)))
    return out or None


def _caps(st: ClusterState, blocked: dict[int, frozenset[int]] | None) -> dict[int, Caps] | None:
    if not blocked:
        return None
    return {g: blocking_caps(st.groups[g].n, nodes) for g, nodes in blocked.items()}


def _same_state(a: ClusterState, b: ClusterState) -> None:
    for ga, gb in zip(a.groups, b.groups, strict=True):
        assert ga.whole.tolist() == gb.whole.tolist()
        assert ga.cpu.tolist() == gb.cpu.tolist() and ga.mem.tolist() == gb.mem.tolist()
        assert ga.bucket == gb.bucket and ga.free_whole == gb.free_whole
        if ga.gfree is not None:
            assert gb.gfree is not None and ga.gfree.tolist() == gb.gfree.tolist()
            assert ga.partial == gb.partial


def _free_arrays(st: ClusterState) -> list[list[int]]:
    share = [
        (gs.maxfrac if gs.maxfrac is not None else np.where(gs.whole > 0, 1000, 0)).tolist()
        for gs in st.groups
    ]
    return [
        [x for gs in st.groups for x in gs.whole.tolist()],
        [x for gs in st.groups for x in gs.cpu.tolist()],
        [x for gs in st.groups for x in gs.mem.tolist()],
        [x for s in share for x in s],
    ]


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("slack", [0, 1])
def test_walk_state_makes_best_fits_choices(seed: int, slack: int) -> None:
    rng = random.Random(seed * 7 + slack)
    sp, track = _cluster(rng)
    ref = state(sp)
    ref = ClusterState(sp, track)
    _occupy(rng, ref, sp, track)
    mine = partial_copy(ref, set(range(len(ref.groups))))
    walk = WalkState(mine)
    bf = BestFit()
    taken: list[tuple[Alloc, int]] = []
    placed = 0
    for step in range(150):
        gpus, milli, cpu, mem, groups = _request(rng, sp, track)
        blocked = _blocked(rng, ref, groups)
        want = bf.place(ref, gpus, milli, cpu, mem, groups, _caps(ref, blocked), slack)
        got = walk.place(gpus, milli, cpu, mem, groups, blocked, slack)
        assert got == want, (seed, step, gpus, milli, cpu, mem, groups, blocked)
        if want is not None:
            ref.take(want)
            walk.take(want)
            taken.append((want, milli))
            placed += 1
        if step % 25 == 0:
            assert [a.tolist() for a in walk.free_arrays()] == _free_arrays(ref)
            for a, m in rng.sample(taken, min(len(taken), 5)):
                bl = _blocked(rng, ref, (a.group,))
                assert walk.fits(a, bl, m) == alloc_fits(ref, a, _caps(ref, bl), m)
    _same_state(walk.sync(), ref)
    assert placed > 0


def test_blocked_nodes_are_never_used() -> None:
    """A 1-GPU job and a share may not touch blocked nodes even when those fit best."""
    sp = spec(("A", 3, 8, 64, 256))
    st = ClusterState(sp, {0})
    st.take(Alloc(0, [0], [7], [0], [0], [list(range(7))]))  # node 0: 1 GPU left (the best fit)
    walk = WalkState(partial_copy(st, {0}))
    a = walk.place(1, 1000, 0, 0, (0,), {0: frozenset({0})})
    assert a is not None and a.nodes == [1]
    b = walk.place(1, 300, 0, 0, (0,), {0: frozenset({0, 1})})
    assert b is not None and b.nodes == [2]
    assert walk.place(1, 1000, 0, 0, (0,), {0: frozenset({0, 1, 2})}) is None
