"""Time limits, fallback and determinism on a large busy cluster (the 1,213-node openb preset)."""

from __future__ import annotations

import numpy as np
import pytest
from placement_helpers import apply_all, occupy, req, spec, state

from shared.domain.cluster import ClusterSpec, load_cluster_spec
from shared.placement import CpSatPlacer, JobRequest, PlacerSettings, SolveStatus
from shared.placement.warmstart import best_fit_batch
from shared.scheduling.placement import BestFit
from shared.scheduling.state import ClusterState


def _request(rng: np.random.Generator, sp: ClusterSpec) -> JobRequest:
    types = sorted({g.gpu_type for g in sp.node_groups})
    allowed = set(rng.choice(types, size=int(rng.integers(1, 4)), replace=False).tolist())
    groups = tuple(k for k, g in enumerate(sp.node_groups) if g.gpu_type in allowed)
    kind = rng.random()
    cpu, mem = int(rng.choice([1000, 4000, 8000, 16000])), int(rng.choice([2048, 8192, 32768]))
    if kind < 0.35:
        return JobRequest(1, int(rng.choice([100, 250, 500, 750])), cpu, mem, groups, 1.0, 600.0)
    if kind < 0.45:
        return JobRequest(0, 1000, cpu, mem, groups, 1.0, 600.0)
    return JobRequest(
        int(rng.choice([1, 1, 1, 2, 4, 8])), 1000, cpu, mem, groups, 1.0, float(rng.integers(60, 7200))
    )


@pytest.fixture(scope="module")
def busy() -> tuple[ClusterSpec, ClusterState, list[JobRequest]]:
    """openb at about 70% GPU load, filled by best-fit with random requests, and a queue."""
    sp = load_cluster_spec("alibaba-openb")
    st = ClusterState(sp, set(range(len(sp.node_groups))))
    rng = np.random.default_rng(7)
    bf = BestFit()
    misses = 0
    while st.busy_milli < 0.7 * 1000 * sp.total_gpus and misses < 200:
        j = _request(rng, sp)
        a = bf.place(st, j.gpus, j.gpu_milli, j.cpus_milli, j.mem_mib, j.groups)
        misses = misses + 1 if a is None else 0
        if a is not None:
            st.take(a)
    return sp, st, [_request(rng, sp) for _ in range(24)]


def test_no_time_returns_the_best_fit_placement(
    busy: tuple[ClusterSpec, ClusterState, list[JobRequest]],
) -> None:
    sp, st, queue = busy
    res = CpSatPlacer(PlacerSettings(time_limit_ms=0.001)).place_batch(st, queue)
    assert res.status == SolveStatus.TIMEOUT_FALLBACK and not res.deterministic
    assert res.allocs == best_fit_batch(st, queue[:16], 0)
    assert res.terms.started > 0
    apply_all(st, sp, res.allocs)


def test_deterministic_limit_stops_early_with_a_valid_reproducible_placement() -> None:
    # twelve 8-GPU nodes with 0-7 GPUs used and 16 jobs of 1-7 GPUs: a bin-packing model that a
    # deterministic limit of 1e-6 stops before the optimum is proved (the warm start is kept)
    sp = spec(("A", 12, 8, 96, 512))
    st = state(sp)
    for n, used in enumerate([1, 2, 3, 5, 6, 7, 0, 0, 4, 3, 2, 1]):
        if used:
            occupy(st, 0, n, gpus=used)
    jobs = [req(g, est=100 + 7 * k) for k, g in enumerate([3, 2, 5, 1, 6, 2, 3, 1, 7, 2, 1, 3, 2, 5, 1, 2])]
    cfg = PlacerSettings(reproducible=True, deterministic_time=1e-6)
    first = CpSatPlacer(cfg).place_batch(st, jobs, [req(8)])
    assert first.status in (SolveStatus.FEASIBLE, SolveStatus.TIMEOUT_FALLBACK)
    assert first.deterministic
    apply_all(st, sp, first.allocs)
    again = CpSatPlacer(cfg).place_batch(st, jobs, [req(8)])
    assert again.allocs == first.allocs and again.status == first.status
    full = CpSatPlacer(PlacerSettings(reproducible=True)).place_batch(st, jobs, [req(8)])
    assert full.status == SolveStatus.OPTIMAL
    assert full.terms.weighted_work >= first.terms.weighted_work


def test_same_inputs_same_decision(busy: tuple[ClusterSpec, ClusterState, list[JobRequest]]) -> None:
    sp, st, queue = busy
    cfg = PlacerSettings(reproducible=True, seed=3)
    first = CpSatPlacer(cfg).place_batch(st, queue)
    second = CpSatPlacer(cfg).place_batch(st, queue)
    assert first.status == second.status
    assert first.allocs == second.allocs
    apply_all(st, sp, first.allocs)


def test_the_caller_state_is_not_modified(busy: tuple[ClusterSpec, ClusterState, list[JobRequest]]) -> None:
    _, st, queue = busy
    before = [(gs.whole.copy(), gs.cpu.copy(), gs.mem.copy()) for gs in st.groups]
    busy_milli = st.busy_milli
    CpSatPlacer(PlacerSettings(reproducible=True)).place_batch(st, queue)
    assert st.busy_milli == busy_milli
    for gs, (w, c, m) in zip(st.groups, before, strict=True):
        assert (gs.whole == w).all() and (gs.cpu == c).all() and (gs.mem == m).all()
