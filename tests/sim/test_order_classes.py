"""Order classes (``Policy.order_classes``) and the simulator's class-heads cycle.

A policy that declares order classes promises that, at any time, keys never decrease with the job
index inside a class; the simulator then orders only the first queued job of each class. Two kinds
of check: the promise itself, brute force over random jobs and times (every pair of jobs of one
class), and the schedule of the class-heads cycle against the plain one (every queued job keyed and
tried in order at every event), on the random scenarios of ``test_properties``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.policies import POLICY_NAMES, PolicyContext, make_policy
from shared.policies.base import nondecreasing_within
from shared.policies.capabilities import hooks
from shared.scheduling.binding import bind_jobs
from shared.scheduling.partition import classes_of
from shared.scheduling.placement import _lowest_with_free_gpu, make_placer, whole_gpus_fit
from shared.scheduling.releases import NodeReleases
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec, predictable
from tests.sim.test_properties import Scenario, scenarios

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# helpers


def test_classes_of_groups_equal_rows() -> None:
    # rows 0 and 2 agree in both columns, row 1 differs in the second, row 3 in the first
    c = classes_of([1.0, 1.0, 1.0, 2.0], [5, 6, 5, 5])
    assert c[0] == c[2]
    assert len({int(c[0]), int(c[1]), int(c[3])}) == 3


def test_nondecreasing_within() -> None:
    classes = np.array([0, 1, 0, 1])
    # class 0: keys 1 then 2 (up); class 1: keys 9 then 3 (down)
    assert not nondecreasing_within(classes, np.array([1.0, 9.0, 2.0, 3.0]))
    # class 1 now 3 then 9: both classes up, although the sequence as a whole is not
    assert nondecreasing_within(classes, np.array([1.0, 3.0, 2.0, 9.0]))
    assert nondecreasing_within(np.array([0]), np.array([5.0]))


# ---------------------------------------------------------------------------------------------
# the promise, brute force

job_rows = st.lists(
    st.tuples(
        st.integers(0, 3),  # gap to the previous submit (s): equal submits included
        st.sampled_from([1, 1, 2, 4, 8, 16]),  # GPUs
        st.sampled_from([0.5, 60.0, 60.0, 600.0, 3600.0, 7200.0]),  # estimate
        st.integers(0, 2),  # user
        st.integers(0, 1),  # VC
        st.integers(1, 5000),  # runtime
    ),
    min_size=2,
    max_size=30,
)


@SETTINGS
@given(
    rows=job_rows,
    times=st.lists(st.floats(0, 1e6), min_size=1, max_size=4),
    name=st.sampled_from(POLICY_NAMES),
)
def test_keys_never_decrease_with_arrival_inside_a_class(
    rows: list[tuple[int, int, float, int, int, int]], times: list[float], name: str
) -> None:
    submit = np.cumsum([r[0] for r in rows]).astype(float)
    jobs = build_table(
        ids=[f"j{k}" for k in range(len(rows))],
        submit=submit.tolist(),
        runtime=[float(r[5]) for r in rows],
        estimate=[r[2] for r in rows],
        gpus=[r[1] for r in rows],
        gpu_milli=[1000] * len(rows),
        type_set=[0] * len(rows),
        cpus_milli=[-1] * len(rows),
        mem_mib=[-1] * len(rows),
        user=[r[3] for r in rows],
        vc=[r[4] for r in rows],
        users=["u0", "u1", "u2"],
        vcs=["a", "b"],
    )
    spec = one_group_spec(4, 8)
    bound = bind_jobs(predictable(jobs), spec)
    assert len(bound.jobs) == len(rows)
    policy = make_policy(name)
    policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=spec.total_gpus))
    h = hooks(policy)
    if h.on_start is not None:
        # some usage, so that fair-share factors differ between users
        h.on_start(0, float(submit[0]))
    assert h.order_classes is not None
    classes = h.order_classes()
    assert classes is not None, f"{name} declares no order classes"
    idx = np.arange(len(rows))
    for t in sorted(times):
        now = float(submit[-1]) + t
        keys = policy.keys(idx, now)
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                if classes[a] == classes[b]:
                    assert keys[a] <= keys[b], (name, a, b, keys[a], keys[b])


# ---------------------------------------------------------------------------------------------
# the class-heads cycle gives the plain schedule

MODES = ["easy", "greedy", "none"]


def plain(bound_sim: Simulator) -> Simulator:
    bound_sim.precheck_queue, bound_sim.visit_chunk, bound_sim.skip_idle_cycles = 10**9, 10**9, False
    bound_sim.retire_dominated = False
    bound_sim.overlay_reservations = bound_sim.node_release_profiles = False
    bound_sim.class_heads_queue = 10**9
    bound_sim.lone_arrivals = False
    return bound_sim


@SETTINGS
@given(
    scenario=scenarios(),
    policy=st.sampled_from(POLICY_NAMES),
    backfill=st.sampled_from(MODES),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    oracle=st.booleans(),
    max_res=st.sampled_from([0, 1]),
    precheck=st.sampled_from([0, 3, 10**9]),
)
def test_class_heads_cycle_gives_the_plain_schedule(
    scenario: Scenario, policy: str, backfill: str, placement: str, oracle: bool, max_res: int, precheck: int
) -> None:
    """The class-heads cycle at every queue length (with and without the shape pre-check) starts
    the same jobs at the same times on the same nodes as the plain cycle, and makes the same
    reservations as the array cycle with the same shortcuts (the plain cycle may reserve at other
    events: it also runs the cycles that the shortcuts skip)."""
    bound = scenario.bind()
    cfg = SimConfig(
        backfill=backfill,
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
        max_reservations=max_res,
    )
    ref = plain(Simulator(bound, make_policy(policy), cfg))
    arrays = Simulator(bound, make_policy(policy), cfg)
    arrays.class_heads_queue, arrays.precheck_queue, arrays.lone_arrivals = 10**9, precheck, False
    fast = Simulator(bound, make_policy(policy), cfg)
    fast.class_heads_queue, fast.precheck_queue = 0, precheck
    a, b = ref.run(), fast.run()  # lone arrivals are tried directly only without recording
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.nodes_used, b.nodes_used)
    np.testing.assert_array_equal(ref.job_group, fast.job_group)
    rec = Simulator(bound, make_policy(policy), cfg)  # a fresh policy: multifactor keeps usage
    rec.class_heads_queue, rec.precheck_queue = 0, precheck
    c = rec.run(record_reservations=True)
    arrays.run(record_reservations=True)
    np.testing.assert_array_equal(a.start, c.start)
    np.testing.assert_array_equal(arrays.first_reservation, rec.first_reservation)


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_class_heads_cycle_on_a_long_queue(policy: str) -> None:
    """A queue of 300 jobs of mixed widths and estimates on a 2-node cluster, over several classes
    per shape: the class-heads cycle (queues above 32) and the plain cycle agree."""
    rng = np.random.default_rng(7)
    n = 300
    jobs = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=np.sort(rng.integers(0, 600, n)).astype(float).tolist(),
        runtime=rng.integers(10, 900, n).astype(float).tolist(),
        estimate=rng.choice([60.0, 300.0, 900.0, 1800.0], n).tolist(),
        gpus=rng.choice([1, 1, 2, 4, 8, 12], n).tolist(),
        gpu_milli=[1000] * n,
        type_set=[0] * n,
        cpus_milli=rng.choice([-1, -1, 2000, 30000], n).tolist(),
        mem_mib=[-1] * n,
        user=rng.integers(0, 3, n).tolist(),
        users=["u0", "u1", "u2"],
    )
    spec = one_group_spec(2, 8)
    bound = bind_jobs(predictable(jobs), spec)
    for backfill in MODES:
        cfg = SimConfig(backfill=backfill)
        ref = plain(Simulator(bound, make_policy(policy), cfg)).run()
        fast_sim = Simulator(bound, make_policy(policy), cfg)
        assert fast_sim.class_heads_queue < 300
        fast = fast_sim.run()
        assert int(fast.timeline_queued.max()) > fast_sim.class_heads_queue  # the path was taken
        np.testing.assert_array_equal(ref.start, fast.start)
        np.testing.assert_array_equal(ref.nodes_used, fast.nodes_used)


# ---------------------------------------------------------------------------------------------
# the histogram pre-check agrees with the placers

node_use = st.tuples(st.integers(0, 8), st.integers(0, 64_000), st.integers(0, 512 * 1024))


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.tuples(st.integers(1, 5), st.sampled_from([0, 1, 2, 4, 8])), min_size=1, max_size=3),
    use=st.lists(node_use, min_size=15, max_size=15),
    gpus=st.integers(1, 40),
    slack=st.integers(0, 2),
    pick=st.integers(0, 7),
)
def test_whole_gpus_fit_agrees_with_the_placers(
    groups: list[tuple[int, int]], use: list[tuple[int, int, int]], gpus: int, slack: int, pick: int
) -> None:
    """``whole_gpus_fit`` (histograms only) says yes exactly when first-fit and best-fit find nodes
    for the same GPUs with no CPUs, memory or caps, on random partly used clusters (CPUs and
    memory used too, which a GPU-only request must ignore)."""
    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": f"g{k}", "gpu_type": "A", "count": c, "gpus": g, "cpus": 64, "mem_gib": 512}
                for k, (c, g) in enumerate(groups)
            ],
            "cpu_only_jobs": "run",
        },
        "t",
    )
    state = ClusterState(spec)
    u = iter(use)
    for k, (count, g) in enumerate(groups):
        for i in range(count):
            w, c, m = next(u)
            state.take(Alloc(k, [i], [min(w, g)], [c], [m]))
    subsets = [tuple(range(len(groups)))] + [(k,) for k in range(len(groups))]
    gset = subsets[pick % len(subsets)]
    fast = whole_gpus_fit(state, gpus, gset, slack)
    for name in ("first-fit", "best-fit"):
        placed = make_placer(name).place(state, gpus, 1000, 0, 0, gset, None, slack)
        assert fast == (placed is not None), (name, gpus, gset, slack)


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 12),
    gpus=st.integers(1, 8),
    use=st.lists(
        st.tuples(st.integers(0, 8), st.booleans(), st.integers(0, 64_000), st.integers(0, 4096)),
        min_size=12,
        max_size=12,
    ),
    cpu=st.sampled_from([0, 1000, 16_000, 40_000, 64_000]),
    mem=st.sampled_from([0, 1024, 2048, 4096]),
    budget=st.sampled_from([1, 3, 10**6]),
)
def test_lowest_node_with_a_free_gpu_matches_an_array_scan(
    count: int, gpus: int, use: list[tuple[int, bool, int, int]], cpu: int, mem: int, budget: int
) -> None:
    """The bucket walk that places a GPU share on a whole free GPU finds the node an array scan
    finds (lowest id with a free GPU, the CPUs and the memory), or gives up past its budget."""
    spec = one_group_spec(count, gpus, 64, 4)
    state = ClusterState(spec, {0})
    gs = state.groups[0]
    for i in range(count):
        w, share, c, m = use[i]
        w = min(w, gpus)
        frac = share and w < gpus
        state.take(Alloc(0, [i], [w], [c], [m], [list(range(w))], w if frac else -1, 300 if frac else 0))
    expect = np.flatnonzero((gs.whole >= 1) & (gs.cpu >= cpu) & (gs.mem >= mem))
    got = _lowest_with_free_gpu(gs, cpu, mem, budget)
    assert got is not None or budget < 10**6, "gave up with an unlimited budget"
    if got is not None:
        assert got == (int(expect[0]) if len(expect) else -1)


# ---------------------------------------------------------------------------------------------
# per-group release profiles kept between calls


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 4), st.integers(0, 30), st.integers(0, 3)),
        min_size=1,
        max_size=40,
    ),
    reqs=st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from([0, 8000, 16000]), st.sampled_from([0, 1024])),
        min_size=1,
        max_size=12,
    ),
)
def test_group_fits_match_a_fresh_replay(
    ops: list[tuple[int, int, int, int]], reqs: list[tuple[int, int, int]]
) -> None:
    """After any sequence of starts and ends (and queries in between, for up to 12 requests, more
    than the tables kept per group), ``group_fits`` gives for every node the first release, in
    (estimated end, start order) order (the job numbers here: jobs start in number order), after
    which the node holds the request: replayed here from the running jobs alone."""
    spec = one_group_spec(6, 4, 16, 2)
    state = ClusterState(spec)
    gs = state.groups[0]
    rel = NodeReleases()
    running: dict[int, tuple[float, Alloc]] = {}
    for job, (node, w, end, q) in enumerate(ops):
        # end a job (one on this node if any) when the node is full or q says so, then start one
        if gs.whole[node] < w or (q == 0 and running):
            victim = next((r for r, (_, a) in running.items() if a.nodes[0] == node), None)
            if victim is None:
                victim = next(iter(running)) if running else None
            if victim is not None:
                e, a = running.pop(victim)
                state.give(a)
                rel.remove(victim, e, a)
        if gs.whole[node] >= w and gs.cpu[node] >= 4000 * w:
            a = Alloc(0, [node], [w], [4000 * w], [256 * w])
            state.take(a)
            rel.add(job, float(end), a)
            running[job] = (float(end), a)
        for need, cpu, mem in reqs[: 1 + job % len(reqs)]:
            got = dict(rel.group_fits(gs, need, cpu, mem))
            for i in range(gs.n):
                free = [int(gs.whole[i]), int(gs.cpu[i]), int(gs.mem[i])]
                expect = None
                for r, (e, a) in sorted(running.items(), key=lambda kv: (kv[1][0], kv[0])):
                    if a.nodes[0] != i:
                        continue
                    free = [free[0] + a.whole[0], free[1] + a.cpu[0], free[2] + a.mem[0]]
                    if free[0] >= need and free[1] >= cpu and free[2] >= mem:
                        expect = ((e, r), free[0], free[1], free[2])
                        break
                assert got[i] == expect, (i, need, cpu, mem)


def test_a_subclass_with_its_own_keys_makes_no_promise() -> None:
    """A policy derived from a base policy that computes its own keys (a spy, a learned ranking)
    does not inherit the base's order classes: the simulator then keys the whole queue."""
    from shared.policies.classic import F1, FCFS, SJF, UNICEP, WFP3
    from shared.policies.multifactor import SlurmMultifactor

    jobs = build_table(ids=["a", "b"], submit=[0, 1], runtime=[5, 5], gpus=[1, 2], estimate=[5, 9])
    spec = one_group_spec(1, 4)
    bound = bind_jobs(jobs, spec)
    for base in (FCFS, SJF, WFP3, UNICEP, F1, SlurmMultifactor):

        class Own(base):  # type: ignore[valid-type, misc]
            def keys(self, idx, now):  # type: ignore[no-untyped-def]
                return -super().keys(idx, now)

        for policy, promised in ((base(), True), (Own(), False)):
            policy.bind(PolicyContext(workload=bound, estimate=bound.jobs.estimate, capacity_gpus=4))
            assert (policy.order_classes() is not None) == promised, (base.name, promised)  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 20),
    gpus=st.integers(1, 8),
    used=st.lists(st.integers(0, 8), min_size=20, max_size=20),
    changes=st.dictionaries(
        st.integers(0, 19),
        st.tuples(st.integers(0, 8), st.integers(0, 64_000), st.integers(0, 4096)),
        max_size=20,
    ),
)
def test_overlaid_equals_copy_then_set_free(
    count: int, gpus: int, used: list[int], changes: dict[int, tuple[int, int, int]]
) -> None:
    """A reservation's scratch group built at once (``overlaid``, both for a few changed nodes and
    for many) holds the same free resources, buckets and total as a copy changed node by node."""
    spec = one_group_spec(count, gpus, 64, 4)
    state = ClusterState(spec)
    gs = state.groups[0]
    for i in range(count):
        state.take(Alloc(0, [i], [min(used[i], gpus)], [1000], [512]))
    over = {i: [min(w, gpus), c, m] for i, (w, c, m) in changes.items() if i < count}
    slow = gs.copy()
    for i, (w, c, m) in over.items():
        slow.set_free(i, w, c, m)
    fast = gs.overlaid(over)
    assert fast.whole.tolist() == slow.whole.tolist()
    assert fast.cpu.tolist() == slow.cpu.tolist() and fast.mem.tolist() == slow.mem.tolist()
    assert fast.bucket == slow.bucket and fast.free_whole == slow.free_whole
    assert gs.whole.tolist() == [gpus - min(used[i], gpus) for i in range(count)]  # source untouched
