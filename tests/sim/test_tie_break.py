"""Best-fit breaks ties between equally full nodes by the lowest node id, on every code path."""

from __future__ import annotations

from shared.scheduling.placement import Caps, make_placer
from shared.scheduling.state import Alloc, ClusterState
from tests.sim.sim_helpers import one_group_spec


def _state() -> ClusterState:
    spec = one_group_spec(20, 4)
    st = ClusterState(spec)
    # nodes 9, then 2, then 17 are left with one free GPU each (in that order: a hash set with a
    # small table would list 9 or 17 before 2)
    for node in (9, 2, 17):
        st.take(Alloc(0, [node], [3], [0], [0]))
    return st


def test_bucket_path_picks_the_lowest_equally_full_node() -> None:
    a = make_placer("best-fit").place(_state(), 1, 1000, 0, 0, (0,))
    assert a is not None and a.nodes == [2]


def test_capped_array_path_agrees() -> None:
    caps = {0: Caps.unlimited(20)}
    a = make_placer("best-fit").place(_state(), 1, 1000, 0, 0, (0,), caps)
    assert a is not None and a.nodes == [2]


def test_ties_hold_after_nodes_free_up_again() -> None:
    st = _state()
    st.give(Alloc(0, [2], [3], [0], [0]))  # node 2 is empty again: 9 and 17 are the fullest
    a = make_placer("best-fit").place(st, 1, 1000, 0, 0, (0,))
    assert a is not None and a.nodes == [9]
