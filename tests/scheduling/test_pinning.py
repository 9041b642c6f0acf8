"""``repin``: which nodes an EASY reservation pins, by hand-worked cases.

The whole-schedule tests (``tests/sim/test_textbook_easy.py``, the compiled-parity tests) show
that the rule gives textbook EASY and that both loops agree; these pin down the rule itself.
"""

from __future__ import annotations

import numpy as np

from shared.scheduling.pinning import repin


def arr(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def test_free_now_plan_nodes_give_way_to_nodes_freed_by_then() -> None:
    """Six single-slot nodes: 0-2 free now, 3-4 busy until the reservation's time, 5 busy after.
    The placer planned the lowest ids free then, 0-2. Nodes 3 and 4 hold a take of 1 then with no
    overlap, so the highest-id free-now plan nodes give way first: 2 -> 3, 1 -> 4; node 0 stays
    (nothing else is free then), so 1 and 2 are left free now for jobs that run past it."""
    now = arr(1, 1, 1, 0, 0, 0)
    at = arr(1, 1, 1, 1, 1, 0)
    out = repin([0, 1, 2], [1, 1, 1], [0, 0, 0], [0, 0, 0], now, now * 0, at, at * 0 + 10, at * 0 + 10)
    assert sorted(out) == [0, 3, 4]
    assert out == [0, 4, 3]  # positions kept: node 2's take went to 3, node 1's to 4


def test_a_plan_without_overlap_is_kept() -> None:
    now = arr(0, 0, 2)
    at = arr(2, 2, 2)
    assert repin([0, 1], [2, 2], [0, 0], [0, 0], now, now * 0, at, at * 0, at * 0) == [0, 1]


def test_partial_overlap_prefers_the_node_that_releases_more() -> None:
    """8-GPU nodes, a take of 8: node 0 has 6 free now and 2 released (overlap 6), node 1 has
    8 released (overlap 0), node 2 has 4 free and 4 released (overlap 4). The plan's node 0 goes
    to node 1, the least overlap."""
    now = arr(6, 0, 4)
    at = arr(8, 8, 8)
    z = at * 0
    assert repin([0], [8], [0], [0], now, z, at, z + 100, z + 100) == [1]


def test_a_candidate_must_hold_the_take_then_cpus_and_memory_included() -> None:
    """Node 1 is released in full but lacks the CPUs then: the plan keeps node 0."""
    now = arr(4, 0)
    at = arr(4, 4)
    assert repin([0], [4], [10], [5], now, arr(10, 0), at, arr(10, 8), arr(5, 5)) == [0]


def test_a_take_without_gpus_is_judged_on_cpus() -> None:
    """A CPU-only plan: node 0's CPUs are free now (overlap 4), node 1's are released by then."""
    z = arr(0, 0)
    assert repin([0], [0], [4], [1], z, arr(4, 0), z, arr(4, 4), arr(1, 1)) == [1]
