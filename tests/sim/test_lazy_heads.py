"""The class-heads cycle lists the heads lazily when keys move with the clock.

With oracle runtimes nearly every job is its own order class (Philly: 17,327 classes instead of
315), and sorting every head each cycle cost most of a run under a committed head, where a visit
usually ends at the first head. The cycle now sorts the smallest ``head_chunk`` keys and lists
more only when the visit gets there (``Simulator.head_chunk``). These tests hold it to the
schedule of the full sort (``head_chunk=0``) and of the plain cycle, on small random traces with
many classes, tiny chunks (so that the list grows several times a cycle) and integer keys that tie
a lot (multifactor), and to the full sort on a policy whose keys are NaN for some jobs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.jobs import FloatArray, IntArray, build_table
from shared.policies import make_policy
from shared.policies.base import Policy, waited
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec
from tests.sim.test_order_classes import plain

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_trace(seed: int, n: int) -> BoundWorkload:
    """``n`` jobs on 3 nodes of 8 GPUs, arriving faster than they run (a long queue), with
    distinct runtimes (one order class per job under oracle runtimes) and coarse submit times
    (equal keys under multifactor's integer priorities)."""
    rng = np.random.default_rng(seed)
    jobs = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=np.sort(rng.integers(0, n * 4, n) // 60 * 60).astype(float).tolist(),
        runtime=(rng.permutation(n) * 7 + 30).astype(float).tolist(),
        estimate=rng.choice([600.0, 3600.0], n).tolist(),
        gpus=rng.choice([1, 1, 2, 4, 8, 16], n).tolist(),
        gpu_milli=[1000] * n,
        type_set=[0] * n,
        cpus_milli=rng.choice([-1, -1, 8000, 60000], n).tolist(),
        mem_mib=[-1] * n,
        user=rng.integers(0, 3, n).tolist(),
        users=["u0", "u1", "u2"],
    )
    return bind_jobs(jobs, one_group_spec(3, 8))


def run(sim: Simulator, chunk: int, record: bool = False) -> tuple[Simulator, SimResult]:
    sim.class_heads_queue = 0
    sim.head_chunk = chunk
    return sim, sim.run(record_reservations=record)


def assert_same(a: tuple[Simulator, SimResult], b: tuple[Simulator, SimResult]) -> None:
    np.testing.assert_array_equal(a[1].start, b[1].start)
    np.testing.assert_array_equal(a[1].nodes_used, b[1].nodes_used)
    np.testing.assert_array_equal(a[0].job_group, b[0].job_group)


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(40, 160),
    policy=st.sampled_from(["multifactor", "wfp3", "unicep"]),
    backfill=st.sampled_from(["none", "easy", "greedy"]),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    precheck=st.sampled_from([0, 10**9]),
    chunk=st.sampled_from([1, 2, 5]),
)
def test_lazy_heads_give_the_full_sort_schedule(
    seed: int, n: int, policy: str, backfill: str, placement: str, precheck: int, chunk: int
) -> None:
    bound = random_trace(seed, n)
    cfg = SimConfig(backfill=backfill, placement=placement, oracle_runtimes=True)

    def sim() -> Simulator:
        s = Simulator(bound, make_policy(policy), cfg)  # a fresh policy: multifactor keeps usage
        s.precheck_queue = precheck
        return s

    full = run(sim(), 0)
    lazy = run(sim(), chunk)
    assert_same(full, lazy)
    np.testing.assert_array_equal(full[1].timeline_queued, lazy[1].timeline_queued)
    # the lazy path was taken: more heads were queued than two chunks
    assert int(lazy[1].timeline_queued.max()) > 2 * chunk
    ref = plain(Simulator(bound, make_policy(policy), cfg))
    assert_same((ref, ref.run()), lazy)
    # the same reservations, made at the same times
    full_r = run(sim(), 0, record=True)
    lazy_r = run(sim(), chunk, record=True)
    assert full_r[0].first_reservation is not None and lazy_r[0].first_reservation is not None
    np.testing.assert_array_equal(full_r[0].first_reservation, lazy_r[0].first_reservation)


class CoarseWithNaN(Policy):
    """Longest wait first in steps of 100 s (keys tie a lot), with a NaN key for every 5th job:
    whatever order NaNs give, the lazy listing must give the full sort's."""

    name = "coarse-nan"
    dynamic = True

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        out: FloatArray = -np.floor(waited(self.ctx, idx, now) / 100.0)
        return np.where(idx % 5 == 0, np.nan, out)

    def order_classes(self) -> IntArray | None:
        return np.arange(len(self.ctx.submit), dtype=np.int64)  # every job its own class


@SETTINGS
@given(
    seed=st.integers(0, 10**6),
    backfill=st.sampled_from(["none", "easy", "greedy"]),
    precheck=st.sampled_from([0, 10**9]),
    chunk=st.sampled_from([1, 3]),
)
def test_lazy_heads_order_ties_and_nan_as_the_full_sort(
    seed: int, backfill: str, precheck: int, chunk: int
) -> None:
    bound = random_trace(seed, 120)
    cfg = SimConfig(backfill=backfill, oracle_runtimes=True)

    def sim() -> Simulator:
        s = Simulator(bound, CoarseWithNaN(), cfg)
        s.precheck_queue = precheck
        return s

    assert_same(run(sim(), 0), run(sim(), chunk))
