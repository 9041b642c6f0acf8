"""Small clusters, occupied states and request builders for the placer tests."""

from __future__ import annotations

from collections.abc import Sequence

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.placement import BatchPlacement, CpSatPlacer, JobRequest, PlacerSettings
from shared.placement.warmstart import partial_copy
from shared.scheduling.state import Alloc, ClusterState

# settings under which the model covers every class and node (no pruning) and the wall clock
# never decides: hand-checked optima must then be found exactly
EXACT = PlacerSettings(reproducible=True, classes_per_job=64, slot_extra=64, deterministic_time=5.0)


def spec(*groups: tuple[str, int, int, float, float]) -> ClusterSpec:
    """A cluster from (gpu_type, nodes, gpus per node, cpus per node, GiB per node) tuples."""
    return parse_cluster_spec(
        {
            "name": "test",
            "node_groups": [
                {"name": f"g{k}", "gpu_type": t, "count": n, "gpus": g, "cpus": c, "mem_gib": m}
                for k, (t, n, g, c, m) in enumerate(groups)
            ],
        },
        "test",
    )


def state(sp: ClusterSpec, track: bool = False) -> ClusterState:
    return ClusterState(sp, set(range(len(sp.node_groups))) if track else None)


def occupy(st: ClusterState, group: int, node: int, gpus: int = 0, cpu: int = 0, mem: int = 0) -> None:
    """Mark ``gpus`` whole GPUs (the lowest free ids), ``cpu`` milli-CPUs and ``mem`` MiB as used."""
    gs = st.groups[group]
    ids = None
    if gs.gfree is not None:
        free = [k for k in range(gs.G) if gs.gfree[node][k] == 1000][:gpus]
        ids = [free]
    st.take(Alloc(group, [node], [gpus], [cpu], [mem], ids))


def occupy_share(st: ClusterState, group: int, node: int, gpu: int, milli: int) -> None:
    """Use ``milli`` milli-GPUs of physical GPU ``gpu`` (the group must track shares)."""
    st.take(Alloc(group, [node], [0], [0], [0], None, gpu, milli))


def req(
    gpus: int,
    groups: Sequence[int] = (0,),
    cpu: int = 0,
    mem: int = 0,
    milli: int = 1000,
    weight: float = 1.0,
    est: float = 1.0,
) -> JobRequest:
    return JobRequest(gpus, milli, cpu, mem, tuple(groups), weight, est)


def place(
    st: ClusterState,
    jobs: Sequence[JobRequest],
    lookahead: Sequence[JobRequest] = (),
    settings: PlacerSettings = EXACT,
) -> BatchPlacement:
    return CpSatPlacer(settings).place_batch(st, list(jobs), list(lookahead))


def apply_all(st: ClusterState, sp: ClusterSpec, allocs: Sequence[Alloc | None]) -> ClusterState:
    """A copy of ``st`` with every allocation taken, checked against every capacity."""
    copy = partial_copy(st, set(range(len(st.groups))))
    for a in allocs:
        if a is not None:
            copy.take(a)
    copy.check_invariants(sp)
    return copy


def nodes_of(a: Alloc | None) -> list[tuple[int, int]]:
    assert a is not None
    return [(a.group, n) for n in a.nodes]
