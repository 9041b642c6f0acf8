"""The fast parts of EASY reservations and of the class-heads cycle, each against a plain version.

- ``NodeReleases.kth_drain`` (when a gang of k whole nodes first fits, GPU-wise) against a replay
  of the running jobs' releases in (estimated end, start order) order (the job numbers here:
  jobs start in number order), counting entirely free nodes;
- lazy reservations (a bound first, caps only when a job may run past it) against eager ones,
  and both against the plain replay, on random scenarios and on a long queue of whole-node gangs
  whose CPU requests sometimes bind (the bound's fallback);
- ``Heads`` (the heads of order classes kept sorted per shape) against a list sorted afresh;
- ``Policy.key`` (one job, scalar code) against ``Policy.keys`` bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.policies import POLICY_NAMES, PolicyContext, make_policy
from shared.policies.capabilities import hooks
from shared.scheduling.binding import bind_jobs
from shared.scheduling.releases import NodeReleases
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.heads import Heads
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec, predictable
from tests.sim.test_order_classes import plain
from tests.sim.test_properties import Scenario, scenarios

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _group(count: int, gpus: int) -> ClusterState:
    spec = one_group_spec(count, gpus, 64, 64)
    return ClusterState(spec)


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 8),
    gpus=st.integers(1, 4),
    # (first node, nodes spanned, GPUs per node, estimated end, whether an earlier job ends first)
    ops=st.lists(
        st.tuples(st.integers(0, 7), st.integers(1, 3), st.integers(0, 4), st.integers(0, 30), st.booleans()),
        max_size=40,
    ),
)
def test_kth_drain_matches_a_replay(
    count: int, gpus: int, ops: list[tuple[int, int, int, int, bool]]
) -> None:
    """After any sequence of starts (gangs over several nodes, CPU-only pieces, equal estimated
    ends) and ends, the k-th drain point is the first release after which k nodes have all their
    GPUs free, for every k: replayed here from the running jobs alone."""
    state = _group(count, gpus)
    gs = state.groups[0]
    rel = NodeReleases()
    running: dict[int, tuple[float, Alloc]] = {}
    for job, (first, span, w, end, drop) in enumerate(ops):
        if drop and running:
            victim = sorted(running)[job % len(running)]
            e, a = running.pop(victim)
            state.give(a)
            rel.remove(victim, e, a)
        nodes = [i for i in range(first, first + span) if i < count]
        take = [min(w, int(gs.whole[i])) for i in nodes]
        if nodes and all(gs.cpu[i] >= 1000 for i in nodes):
            a = Alloc(0, nodes, take, [1000] * len(nodes), [64] * len(nodes))
            state.take(a)
            rel.add(job, float(end), a)
            running[job] = (float(end), a)
        for k in range(1, count + 1):
            whole = gs.whole.tolist()
            expect: tuple[float, int] | None = None
            if whole.count(gpus) < k:
                for r, (e, a) in sorted(running.items(), key=lambda kv: (kv[1][0], kv[0])):
                    for t, i in enumerate(a.nodes):
                        whole[i] += a.whole[t]
                    if whole.count(gpus) >= k:
                        expect = (e, r)
                        break
            assert rel.kth_drain(gs, k) == expect, (k, whole)


def _lazy_and_eager(bound, cfg: SimConfig, policy: str):  # type: ignore[no-untyped-def]
    runs = []
    for lazy in (True, False):
        sim = Simulator(bound, make_policy(policy), cfg)
        sim.lazy_reservations = lazy
        runs.append((sim.run(), sim))
    ref = plain(Simulator(bound, make_policy(policy), cfg))
    runs.append((ref.run(), ref))
    return runs


def _assert_same(runs) -> None:  # type: ignore[no-untyped-def]
    (a, sa), *rest = runs
    for b, sb in rest:
        np.testing.assert_array_equal(a.start, b.start)
        np.testing.assert_array_equal(a.end, b.end)
        np.testing.assert_array_equal(a.nodes_used, b.nodes_used)
        np.testing.assert_array_equal(sa.job_group, sb.job_group)


@SETTINGS
@given(
    scenario=scenarios(),
    policy=st.sampled_from(POLICY_NAMES),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    oracle=st.booleans(),
    max_res=st.sampled_from([0, 1]),
)
def test_lazy_reservations_give_the_eager_schedule(
    scenario: Scenario, policy: str, placement: str, oracle: bool, max_res: int
) -> None:
    """Building a reservation's caps only when a job that may run past its bound wants its groups
    starts the same jobs at the same times on the same nodes as building them at once, and as the
    plain replay with every shortcut off."""
    cfg = SimConfig(
        placement=placement, oracle_runtimes=oracle, node_slack=scenario.node_slack, max_reservations=max_res
    )
    _assert_same(_lazy_and_eager(scenario.bind(), cfg, policy))


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_lazy_reservations_on_whole_node_gangs(policy: str) -> None:
    """A long queue of whole-node gangs (the drain-point bound) and single-node jobs on 2- and
    8-GPU nodes, some asking for more CPUs than their GPU share (the bound's placement then fails
    and the plain replay answers): lazy, eager and plain schedules agree."""
    rng = np.random.default_rng(11)
    n = 400
    jobs = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=np.sort(rng.integers(0, 3000, n)).astype(float).tolist(),
        runtime=rng.integers(10, 900, n).astype(float).tolist(),
        estimate=rng.choice([60.0, 300.0, 900.0, 1800.0], n).tolist(),
        gpus=rng.choice([1, 1, 2, 2, 4, 8, 16, 24], n).tolist(),
        gpu_milli=[1000] * n,
        type_set=[0] * n,
        cpus_milli=rng.choice([-1, -1, -1, 60_000, 120_000], n).tolist(),
        mem_mib=[-1] * n,
        user=rng.integers(0, 3, n).tolist(),
        users=["u0", "u1", "u2"],
    )
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": "small", "gpu_type": "A", "count": 6, "gpus": 2, "cpus": 32, "mem_gib": 256},
                {"name": "big", "gpu_type": "A", "count": 4, "gpus": 8, "cpus": 64, "mem_gib": 512},
            ],
        },
        "t",
    )
    bound = bind_jobs(predictable(jobs), spec)
    runs = _lazy_and_eager(bound, SimConfig(), policy)
    assert int(runs[0][0].timeline_queued.max()) > 50  # a queue, so reservations are made
    _assert_same(runs)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3), st.floats(-5, 5)), max_size=60))
def test_heads_stay_sorted_per_shape(ops: list[tuple[int, int, float]]) -> None:
    """Adding and removing heads keeps, per shape, the entries sorted by (key, job) and the count
    of heads equal to the entries: the same as a list sorted afresh."""
    heads = Heads(keep_sorted=True)
    model: dict[int, tuple[float, int, int, int]] = {}  # job -> entry
    shape_of: dict[int, int] = {}
    for job, shape, key in ops:
        if job in model:
            heads.remove(model[job][0], job, shape_of[job])
            del model[job], shape_of[job]
        else:
            model[job] = (key, job, job % 5, job % 7)
            shape_of[job] = shape
            heads.add(key, job, job % 5, job % 7, shape)
        for k in set(shape_of.values()) | set(heads.by_shape):
            expect = sorted(e for j, e in model.items() if shape_of[j] == k)
            assert heads.by_shape.get(k, []) == expect
            assert heads.per_shape.get(k, 0) == len(expect)
    with pytest.raises(KeyError):
        heads.remove(0.0, 10_000, 0)


@SETTINGS
@given(
    gaps=st.lists(st.integers(0, 500), min_size=2, max_size=25),
    times=st.lists(st.floats(0, 1e6), min_size=1, max_size=4),
    name=st.sampled_from(POLICY_NAMES),
    seed=st.integers(0, 1000),
)
def test_key_of_one_job_is_keys_bit_for_bit(
    gaps: list[int], times: list[float], name: str, seed: int
) -> None:
    """``key`` (asked for the next job of a class during a cycle) equals ``keys`` exactly, for
    every policy, with fair-share usage moving between calls."""
    rng = np.random.default_rng(seed)
    n = len(gaps)
    submit = np.cumsum(gaps).astype(float)
    jobs = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=submit.tolist(),
        runtime=rng.integers(1, 5000, n).astype(float).tolist(),
        estimate=(rng.random(n) * 10_000).tolist(),
        gpus=rng.choice([1, 2, 3, 8, 16], n).tolist(),
        user=rng.integers(0, 3, n).tolist(),
        users=["u0", "u1", "u2"],
    )
    spec = one_group_spec(4, 8)
    bound = bind_jobs(predictable(jobs), spec)
    policy = make_policy(name)
    policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=spec.total_gpus))
    idx = np.arange(len(bound.jobs))
    h = hooks(policy)
    for step, t in enumerate(sorted(times)):
        now = float(submit[-1]) + t
        if h.on_start is not None:
            h.on_start(step % len(idx), now)  # usage grows from here on
        keys = policy.keys(idx, now).tolist()
        assert [h.key(j, now) for j in idx.tolist()] == keys


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=2, max_size=5),
    used=st.lists(st.tuples(st.integers(0, 64_000), st.integers(0, 64 * 1024)), min_size=30, max_size=30),
    cpu=st.integers(0, 64_000),
    mem=st.integers(0, 64 * 1024),
    order=st.permutations(range(5)),
    capped=st.booleans(),
)
def test_cpu_only_over_many_groups_matches_a_walk(
    sizes: list[int],
    used: list[tuple[int, int]],
    cpu: int,
    mem: int,
    order: list[int],
    capped: bool,
) -> None:
    """A CPU-only job over several groups (joined arrays) gets the node that a walk over the groups
    in the given order picks: first-fit the first fitting node, best-fit the least CPUs left with
    earlier groups and lower ids winning ties; with and without a reservation's caps."""
    from shared.scheduling.placement import Caps, make_placer

    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": f"g{k}", "gpu_type": "A", "count": max(c, 1), "gpus": 1, "cpus": 64, "mem_gib": 64}
                for k, c in enumerate(sizes)
            ],
        },
        "t",
    )
    state = ClusterState(spec)
    k = 0
    for g, gs in enumerate(state.groups):
        for i in range(gs.n):
            c, m = used[k % len(used)]
            k += 1
            state.take(Alloc(g, [i], [0], [c // 16 * 16], [m // 16 * 16]))
    groups = tuple(g for g in order if g < len(sizes))
    caps = None
    if capped:
        cap = Caps.unlimited(state.groups[groups[0]].n)
        cap.cpu[0] = cpu // 2
        caps = {groups[0]: cap}
    for name in ("first-fit", "best-fit"):
        placer = make_placer(name)
        got = placer.place(state, 0, 1000, cpu, mem, groups, caps)
        expect = None
        best = None
        for g in groups:
            gs = state.groups[g]
            for i in range(gs.n):
                c_free = (
                    int(gs.cpu[i])
                    if caps is None or g not in caps
                    else min(int(gs.cpu[i]), int(caps[g].cpu[i]))
                )
                if c_free >= cpu and int(gs.mem[i]) >= mem:
                    if name == "first-fit":
                        expect = expect or (g, i)
                    elif best is None or c_free - cpu < best[0]:
                        best = (c_free - cpu, (g, i))
        if name == "best-fit":
            expect = None if best is None else best[1]
        assert (None if got is None else (got.group, got.nodes[0])) == expect, name
