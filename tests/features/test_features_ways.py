"""Placement counts (can_schedule_now, ways, stranded GPUs) by hand, and against the placer.

The hand cases use one group of 4 nodes x 2 GPUs; the property test builds random small clusters,
fills them through the simulator's own placer and checks that ``can_schedule_now`` says exactly
what ``Placer.place`` does, and that the node counts of single-node jobs match a brute-force count.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from feature_views import cluster_view, queue_view
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.features import SimViewBuilder, compute_features, placement_ways
from shared.features.ways import distinct_requests
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.placement import make_placer
from shared.scheduling.state import ClusterState

GIB = 1024


def start_some(
    bound: BoundWorkload, order: np.ndarray, slack: int
) -> tuple[ClusterState, list[int], list[int]]:
    """An empty cluster on which best-fit starts the jobs of ``order`` that fit, in that order:
    the state, the started jobs and their groups (the running jobs of a feature test)."""
    state = ClusterState(bound.spec, set(range(len(bound.spec.node_groups))))
    placer = make_placer("best-fit")
    running, run_group = [], []
    for j in order:
        a = placer.place(state, *bound.request(int(j)), None, slack)
        if a is not None:
            state.take(a)
            running.append(int(j))
            run_group.append(a.group)
    return state, running, run_group


def _pairs(free: list[tuple[int, int]], slack: int = 0):  # type: ignore[no-untyped-def]
    """One group of 4 nodes x 2 GPUs, 16 CPUs, 64 GiB; free = (GPUs, milli-CPUs) per node."""
    return cluster_view(
        groups=[(4, 2, 16_000, 64 * GIB)],
        free=[(g, c, 64 * GIB) for g, c in free],
        node_slack=slack,
    )


@pytest.mark.parametrize(
    ("gpus", "slack", "ways", "can"),
    [
        # usable GPUs per node [2, 1, 1, 0]
        (3, 0, 3, True),  # gang of 2 nodes: {0,1} or {0,2} -> nodes 0, 1, 2
        (4, 0, 0, False),  # 2 nodes give at most 2 + 1
        (4, 1, 3, True),  # 3 nodes: 2 + 1 + 1
        (2, 0, 1, True),  # single node: only node 0
        (2, 1, 3, True),  # may split over 2 nodes: node 0 alone, or 1 + 2
        (1, 0, 3, True),
        (9, 0, 0, False),  # needs 5 nodes, the group has 4
    ],
)
def test_gang_ways_by_hand(gpus: int, slack: int, ways: int, can: bool) -> None:
    cv = _pairs([(2, 16_000), (1, 8_000), (1, 8_000), (0, 0)], slack)
    qv = queue_view([dict(gpus=gpus, cpu=0, mem=0, eligible=[0])], n_groups=1)
    w = placement_ways(qv, cv)
    assert w.ways[0] == ways
    assert bool(w.can_now[0]) is can


def test_cpu_share_limits_the_gpus_a_node_gives() -> None:
    # 3 GPUs with 3 CPUs (1 per GPU): node 0 (2 CPUs) gives 2 GPUs, node 1 (16) gives its 1,
    # node 2 (0.5 CPU) gives 0 although it has a free GPU -> gang {0, 1}, ways 2
    cv = _pairs([(2, 2_000), (1, 16_000), (1, 500), (0, 0)])
    qv = queue_view([dict(gpus=3, cpu=3_000, mem=0, eligible=[0])], n_groups=1)
    w = placement_ways(qv, cv)
    assert w.ways[0] == 2
    assert bool(w.can_now[0])
    # stranded: free GPUs on partially used nodes outside every placement: node 2's one GPU
    assert w.stranded_gpus[0] == 1


def test_fractional_and_cpu_only_jobs() -> None:
    # node 0: a GPU with 300 milli free (no whole GPU), node 1: a whole GPU, few CPUs
    cv = cluster_view(
        groups=[(2, 1, 8_000, 32 * GIB)],
        free=[(0, 8_000, 32 * GIB), (1, 1_000, 32 * GIB)],
        share=[300, 1000],
    )
    qv = queue_view(
        [
            dict(gpus=1, milli=250, cpu=500, mem=GIB, eligible=[0]),  # fits both nodes
            dict(gpus=1, milli=500, cpu=500, mem=GIB, eligible=[0]),  # only node 1 (300 < 500)
            dict(gpus=1, milli=250, cpu=2_000, mem=GIB, eligible=[0]),  # only node 0 (CPUs)
            dict(gpus=0, cpu=4_000, mem=GIB, eligible=[0]),  # CPU-only: node 0
        ],
        n_groups=1,
    )
    w = placement_ways(qv, cv)
    np.testing.assert_array_equal(w.ways, [2, 1, 1, 1])
    np.testing.assert_array_equal(w.ways_empty, [2, 2, 2, 2])
    # node 1 is partially used (CPUs taken) and holds 1 free GPU; job 2 cannot use it
    np.testing.assert_array_equal(w.stranded_gpus, [0, 0, 1, 1])


def test_num_ways_normalizer_counts_only_groups_the_job_fits_when_empty() -> None:
    # group 1's nodes have too little memory for the job even when empty: not counted
    cv = cluster_view(
        groups=[(3, 4, 8_000, 64 * GIB), (5, 4, 8_000, 8 * GIB)],
        free=[(4, 8_000, 64 * GIB)] * 3 + [(4, 8_000, 8 * GIB)] * 5,
    )
    qv = queue_view([dict(gpus=1, cpu=1_000, mem=16 * GIB, eligible=[0, 1])], n_groups=2)
    values = compute_features(qv, cv, 0.0)
    assert values.ways[0] == 3
    assert values.column("num_ways")[0] == pytest.approx(1.0)
    assert values.column("free_nodes")[0] == 1.0


# ---------------------------------------------------------------------------------------------
# against the simulator's placer


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    n_groups = draw(st.integers(1, 3))
    groups = [
        {
            "name": f"g{k}",
            "gpu_type": draw(st.sampled_from(["A", "B"])),
            "count": draw(st.integers(1, 4)),
            "gpus": draw(st.sampled_from([1, 2, 4, 8])),
            "cpus": draw(st.sampled_from([8, 16, 32])),
            "mem_gib": draw(st.sampled_from([32, 64, 128])),
        }
        for k in range(n_groups)
    ]
    spec = parse_cluster_spec({"name": "t", "node_groups": groups}, "test")
    n_jobs = draw(st.integers(2, 30))
    rows = {
        "gpus": draw(
            st.lists(st.sampled_from([1, 1, 2, 3, 4, 6, 8, 12, 16]), min_size=n_jobs, max_size=n_jobs)
        ),
        "milli": draw(
            st.lists(st.sampled_from([1000, 1000, 1000, 250, 500]), min_size=n_jobs, max_size=n_jobs)
        ),
        "cpus": draw(
            st.lists(st.sampled_from([-1, 0, 1_000, 6_000, 20_000]), min_size=n_jobs, max_size=n_jobs)
        ),
        "mem": draw(st.lists(st.sampled_from([-1, 0, 4_096, 40_000]), min_size=n_jobs, max_size=n_jobs)),
        "type": draw(st.lists(st.integers(0, 2), min_size=n_jobs, max_size=n_jobs)),
    }
    n_running = draw(st.integers(0, n_jobs))
    slack = draw(st.integers(0, 1))
    return spec, rows, n_running, slack, draw(st.integers(0, 2**31))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_can_schedule_now_matches_the_placer(scenario: tuple) -> None:  # type: ignore[type-arg]
    spec, rows, n_running, slack, seed = scenario
    n = len(rows["gpus"])
    gpus = [g if m == 1000 else 1 for g, m in zip(rows["gpus"], rows["milli"], strict=True)]
    table = build_table(
        ids=[f"j{k}" for k in range(n)],
        submit=[float(k) for k in range(n)],
        runtime=[100.0] * n,
        estimate=[100.0 + k for k in range(n)],
        gpus=gpus,
        gpu_milli=rows["milli"],
        cpus_milli=rows["cpus"],
        mem_mib=rows["mem"],
        type_set=rows["type"],
        type_sets=[(), ("A",), ("B",)],
    )
    bound = bind_jobs(table, spec, node_slack=slack)
    m = len(bound.jobs)
    if m == 0:
        return
    jobs = bound.jobs
    rng = np.random.default_rng(seed)
    state, running, run_group = start_some(bound, rng.permutation(m)[: min(n_running, m)], slack)
    placer = make_placer("best-fit")
    builder = SimViewBuilder(bound, jobs.estimate, check_values=True)
    queued = np.arange(m)
    qv = builder.queue_view(queued)
    cv = builder.cluster_view(state, running, run_group, [200.0] * len(running))
    values = compute_features(qv, cv, 150.0)
    w = placement_ways(qv, cv)

    for k, j in enumerate(queued):
        g, milli, c, mm, groups = bound.request(int(j))
        placed = placer.place(state, g, milli, c, mm, groups, None, slack)
        assert bool(w.can_now[k]) == (placed is not None), (g, milli, c, mm, groups)
        single = milli < 1000 or (
            g <= min(spec.node_groups[x].gpus for x in groups) and (slack == 0 or g < 2)
        )
        if single:
            # brute force: nodes of the eligible groups that hold the whole request
            count = 0
            for x in groups:
                gs = state.groups[x]
                for i in range(gs.n):
                    if milli < 1000:
                        gpu_ok = gs.gfree is not None and g > 0 and int(gs.gfree[i].max()) >= milli
                    else:
                        gpu_ok = int(gs.whole[i]) >= g
                    count += gpu_ok and int(gs.cpu[i]) >= c and int(gs.mem[i]) >= mm
            assert w.ways[k] == count
        # ways never exceed the nodes usable on the empty cluster, which binding made >= 1
        assert 0 <= w.ways[k] <= w.ways_empty[k]
        assert w.ways_empty[k] >= 1
        assert not math.isnan(values.job[k].sum())
    assert ((values.job >= 0) & (values.job <= 1)).all()


@pytest.mark.parametrize("scale", [1, 2**38])  # packed int64 key, and the row-wise fallback
def test_distinct_requests_dedupe(scale: int) -> None:
    jobs = [
        dict(gpus=2, cpu=1 * scale, mem=5 * scale, eligible=[0]),
        dict(gpus=1, milli=500, cpu=1 * scale, mem=5 * scale, eligible=[0]),
        dict(gpus=2, cpu=1 * scale, mem=5 * scale, eligible=[0]),
        dict(gpus=0, cpu=3 * scale, mem=0, eligible=[0]),
        dict(gpus=1, milli=500, cpu=1 * scale, mem=5 * scale, eligible=[0]),
    ]
    qv = queue_view(jobs, n_groups=1)
    cv = cluster_view(groups=[(1, 2, 4 * scale, 8 * scale)], free=[(2, 4 * scale, 8 * scale)])
    req = distinct_requests(qv, cv)
    assert len(req.gpus) == 3
    # every job maps to a request equal to its own
    for k, j in enumerate(jobs):
        r = req.inverse[k]
        assert (req.gpus[r], req.milli[r], req.cpu[r], req.mem[r]) == (
            j["gpus"],
            j.get("milli", 1000),
            j["cpu"],
            j["mem"],
        )
    assert req.inverse[0] == req.inverse[2] and req.inverse[1] == req.inverse[4]
    np.testing.assert_array_equal(req.whole, (req.milli == 1000) & (req.gpus > 0))
