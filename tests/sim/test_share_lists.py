"""``_tightest_share`` (best-fit's GPU share): past ``SHARE_SCAN`` entries of the share list it
asks the arrays (``_tightest_in_arrays``), which must find the share list's first fitting entry."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.scheduling import placement as placement_module
from shared.scheduling.placement import make_placer
from tests.sim.sim_helpers import one_type_state


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 8)), min_size=1, max_size=2),
    use=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 999), st.integers(0, 40_000)), max_size=60),
    milli=st.integers(1, 999),
    cpu=st.integers(0, 64_000),
    skip=st.sets(st.integers(0, 5), max_size=3),
)
def test_the_tightest_share_from_the_arrays_is_the_share_lists(
    groups: list[tuple[int, int]], use: list[tuple[int, int, int]], milli: int, cpu: int, skip: set[int]
) -> None:
    """``_tightest_in_arrays`` (what ``_tightest_share`` asks past ``SHARE_SCAN`` entries) finds
    the first entry of the share list that fits, on clusters partly filled by best-fit."""
    _, state, everywhere = one_type_state(groups)
    best = make_placer("best-fit")
    for kind, m, c in use:
        a = best.place(state, 1 if kind == 0 else kind, m if kind == 0 else 1000, c, 0, everywhere)
        if a is not None:
            state.take(a)
    for gs in state.groups:
        assert gs.partial is not None
        nodes = {i for i in skip if i < gs.n}  # a reservation's nodes: some of the group's
        scan = next(
            ((v, i, g) for v, i, g in gs.partial if v >= milli and gs.cpu[i] >= cpu and i not in nodes), None
        )
        assert placement_module._tightest_in_arrays(gs, milli, cpu, 0, nodes) == scan
        assert placement_module._tightest_share(gs, milli, cpu, 0, nodes) == scan
