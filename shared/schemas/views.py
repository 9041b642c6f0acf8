"""QueueSnapshot -> the featurizer's QueueView and ClusterView, given the cluster spec.

Why here and pure: the production featurizer must feed ``compute_features`` numbers defined exactly as
the simulator's (``docs/features.md``, "In production"), so the rules of ``shared.scheduling.binding`` are
reused: default CPU/memory requests from the spec, eligible node groups = allowed GPU type, partition,
and a fit on an empty node of the group. A job no group can ever hold is excluded with its reason
(the simulator excludes it before simulating). No I/O, no clock: the same snapshot always gives the
same arrays.

Nodes: the spec's groups are the truth for capacities. Within a group, the reported nodes come first,
in the order the snapshot lists them (node ``i`` of a group is the group's ``i``-th reported node;
``shared.schemas.snapshot_cluster`` uses the same layout, so a placement's node indices map back to
names). A snapshot may omit nodes of a group (not yet reported); those fill the group's last slots
and count as having nothing free, as do drained and down nodes. A node of an unknown group, more
nodes than the spec lists, or free resources above capacity are errors naming the node.

Cost: the per-node and per-running-job work is a few C-speed passes plus numpy (a 1,213-node,
6,120-pod snapshot builds its views in about 1.6 ms). Two results are kept per cluster spec across
snapshots, both exact: the placement of the node names into the groups, reused while the snapshot
lists the same nodes in the same order (``_NodeShape``), and binding's result per distinct request
(``_RequestTable``: binding's rules are per request, not per job, and a queue repeats a few).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.features.catalog import JOB_FEATURES
from shared.features.views import ClusterView, FloatArray, IntArray, QueueView
from shared.scheduling.binding import fits_empty_group
from shared.schemas.columns import pick
from shared.schemas.messages import ExcludedJob
from shared.schemas.numbers import column_array
from shared.schemas.snapshot import (
    WHOLE,
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    QueueSnapshot,
    RunningJobs,
)

__all__ = [
    "MATRIX_COLUMNS",
    "RAW_COLUMNS",
    "WAYS_COLUMN",
    "NodeLayout",
    "PendingBinding",
    "SnapshotViews",
    "bind_pending",
    "node_layout",
    "snapshot_views",
]

H = TypeVar("H", bound=Hashable)

#: the FeatureMatrix's job columns: the 17 job features in catalog order, then ``ways``, the raw
#: count of nodes that could take part in a placement of the job now. ``ways`` is not a model
#: input: the feature sampler reads it (the share of jobs with several usable nodes emphasizes
#: ``num_ways``), and it cannot be recovered from the normalized ``num_ways``.
WAYS_COLUMN = "ways"
MATRIX_COLUMNS: tuple[str, ...] = (*JOB_FEATURES, WAYS_COLUMN)


#: a FeatureMatrix's raw columns (schema version 7), each job's eligible pool (the node groups it may
#: run on) in its own units: GPUs, free GPUs, nodes and idle nodes. The per-job features are these
#: normalized (``gpus`` and ``gpu_type`` by ``pool_gpus``, ``free_nodes`` = idle / nodes,
#: ``demand_supply`` and ``fragmentation`` by ``pool_free_gpus``: ``docs/features.md``), and no table
#: holds them; the job's own request and times are in the store's ``jobs`` (``docs/analysts.md``).
RAW_COLUMNS: tuple[str, ...] = ("pool_gpus", "pool_free_gpus", "pool_nodes", "pool_idle_nodes")


def raw_pool_values(views: SnapshotViews) -> npt.NDArray[np.float64]:
    """[jobs, len(RAW_COLUMNS)]: each job's pool totals, as ``compute_features`` sums them (one small
    [jobs, groups] x [groups, 4] product)."""
    cluster = views.cluster
    per_group = np.stack(
        (cluster.capacity_gpus, cluster.free_by_group, cluster.node_count, cluster.idle_by_group), axis=1
    ).astype(np.float64)
    out: npt.NDArray[np.float64] = views.queue.eligible.astype(np.float64) @ per_group
    return out


@dataclass(frozen=True)
class SnapshotViews:
    """The arrays of one snapshot: ``queue`` rows follow ``job_ids``; ``excluded`` jobs are left out.

    ``rows[i]`` is the position of job ``job_ids[i]`` in ``snapshot.pending``.
    """

    queue: QueueView
    cluster: ClusterView
    now: float
    job_ids: tuple[str, ...]
    excluded: tuple[ExcludedJob, ...]
    vc_names: tuple[str, ...]
    user_names: tuple[str, ...]
    rows: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class NodeLayout:
    """The snapshot's nodes laid out as the spec's groups (see the module docstring).

    ``names[g][i]`` is the name of node i of group g (``None`` for a slot no reported node fills);
    ``index[name]`` the (group, index) of a reported node; ``free_*`` per node slot, group 0's slots
    first (``ClusterView``'s layout), zero for unreported, drained and down nodes; ``offsets[g]`` is
    the first slot of group g. ``names``, ``index``, ``slot_of`` and ``offsets`` are shared by the
    layouts of every snapshot with the same nodes (``_NodeShape``): read them, never change them.
    """

    names: tuple[tuple[str | None, ...], ...]
    index: dict[str, tuple[int, int]]
    free_gpus: IntArray
    free_share_milli: IntArray
    free_cpus_milli: IntArray
    free_mem_mib: IntArray
    offsets: IntArray
    #: position of each reported node in the per-node arrays
    slot_of: dict[str, int]
    #: group of each reported node
    group_of: dict[str, int]
    #: per node slot: a reported node in state ``up`` (the others have nothing free)
    up: npt.NDArray[np.bool_]
    #: slot and group of each reported node, by its position in the snapshot's ``nodes`` (what a
    #: running job's ``node_index`` holds)
    node_slot: IntArray
    node_group: IntArray
    #: the reported nodes' names in the snapshot's order
    node_names: tuple[str, ...] = ()

    def slot(self, name: str) -> int:
        """Position of a reported node in the per-node arrays."""
        return self.slot_of[name]


@dataclass(frozen=True, eq=False)
class _NodeShape:
    """What ``node_layout`` derives from the node names and groups alone, kept per cluster spec.

    Why: a cluster reports the same nodes in the same order snapshot after snapshot; only their free
    resources change. Placing 1,213 names into the spec's groups (codes, slots, the name tables, a
    Python loop over the nodes) was most of ``node_layout``'s 0.5 ms, paid by the featurizer and the
    placer at every snapshot; comparing the two name columns with the last snapshot's costs about
    0.03 ms. The arrays are read-only: every layout built from the shape shares them.
    """

    name: tuple[str, ...]
    group: tuple[str, ...]
    #: [nodes, 4] the capacity of each reported node's group: GPUs, share, CPUs, memory
    caps: IntArray
    #: position of each reported node in the per-node arrays
    slot: IntArray
    offsets: IntArray
    names: tuple[tuple[str | None, ...], ...]
    index: dict[str, tuple[int, int]]
    slot_of: dict[str, int]
    group_of: dict[str, int]
    #: group of each reported node
    code: IntArray


#: the last node shape seen per cluster spec (by identity: specs are frozen and live as long as the
#: stage holding them), at most ``_SHAPES_KEPT`` specs
_SHAPES: dict[int, tuple[ClusterSpec, _NodeShape]] = {}
_SHAPES_KEPT = 64


def _node_shape(spec: ClusterSpec, nodes: NodeStates) -> _NodeShape:
    """The shape of ``nodes`` on ``spec``: the last one when the names and groups are the same."""
    kept = _SHAPES.get(id(spec))
    if kept is not None and kept[0] is spec:
        shape = kept[1]
        if shape.name == nodes.name and shape.group == nodes.group:
            return shape
    shape = _build_node_shape(spec, nodes)
    if len(_SHAPES) >= _SHAPES_KEPT:
        _SHAPES.clear()
    _SHAPES[id(spec)] = (spec, shape)
    return shape


def _build_node_shape(spec: ClusterSpec, nodes: NodeStates) -> _NodeShape:
    groups = spec.node_groups
    group_index = {g.name: k for k, g in enumerate(groups)}
    n_groups = len(groups)
    try:
        code = np.fromiter(map(group_index.__getitem__, nodes.group), dtype=np.int64, count=len(nodes))
    except KeyError:
        bad_at = next(i for i, g in enumerate(nodes.group) if g not in group_index)
        raise ValueError(
            f"node {nodes.name[bad_at]!r} is in group {nodes.group[bad_at]!r}, which the cluster spec lacks"
        ) from None
    reported = np.bincount(code, minlength=n_groups)
    for k, g in enumerate(groups):
        if reported[k] > g.count:
            raise ValueError(
                f"snapshot reports {reported[k]} nodes in group {g.name!r}, the spec has {g.count}"
            )
    gpus_cap = np.array([g.gpus for g in groups], dtype=np.int64)
    caps = np.stack(
        (
            gpus_cap,
            np.where(gpus_cap > 0, WHOLE, 0),
            np.array([g.cpus_milli for g in groups], dtype=np.int64),
            np.array([g.mem_mib for g in groups], dtype=np.int64),
        ),
        axis=1,
    )[code]

    # slot of each reported node: its group's offset + its position among the group's nodes
    count = np.array([g.count for g in groups], dtype=np.int64)
    offsets = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    order = np.argsort(code, kind="stable")
    first_of_group = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(reported, out=first_of_group[1:])
    within = np.empty(len(nodes), dtype=np.int64)
    within[order] = np.arange(len(nodes)) - first_of_group[code[order]]
    slot = offsets[code] + within

    names: list[list[str | None]] = [[None] * g.count for g in groups]
    index: dict[str, tuple[int, int]] = {}
    for name, k, i in zip(nodes.name, code.tolist(), within.tolist(), strict=True):
        names[k][i] = name
        index[name] = (k, i)
    slot_of = dict(zip(nodes.name, slot.tolist(), strict=True))
    group_of = dict(zip(nodes.name, code.tolist(), strict=True))
    for arr in (caps, slot, offsets, code):
        arr.flags.writeable = False
    return _NodeShape(
        name=nodes.name,
        group=nodes.group,
        caps=caps,
        slot=slot,
        offsets=offsets,
        names=tuple(tuple(n) for n in names),
        index=index,
        slot_of=slot_of,
        group_of=group_of,
        code=code,
    )


def running_node_index(running: RunningJobs, layout: NodeLayout) -> IntArray:
    """The flat nodes of the running jobs as positions in the snapshot's ``nodes``.

    A validated snapshot holds them (``RunningJobs.node_index``, what schema version 4 sends): one
    numpy conversion instead of a dictionary lookup per name (6,120 on openb). Columns built in
    Python outside a snapshot hold only names: those are looked up.
    """
    index = running.node_index
    if len(index) != len(running.nodes) and running.nodes:
        position = {name: i for i, name in enumerate(layout.node_names)}
        index = tuple(map(position.__getitem__, running.nodes))
    return column_array(index, np.int64)


def running_first_index(running: RunningJobs, layout: NodeLayout) -> IntArray:
    """Each running job's first node, as its position in the snapshot's ``nodes``."""
    flat = running_node_index(running, layout)
    if len(flat) == len(running.node_count):  # every job on one node (pods)
        return flat
    starts = np.zeros(len(running.node_count), dtype=np.int64)
    np.cumsum(column_array(running.node_count, np.int64)[:-1], out=starts[1:])
    return flat[starts]


def node_layout(spec: ClusterSpec, nodes: NodeStates) -> NodeLayout:
    """Validate the snapshot's nodes against ``spec`` and lay them out; ValueError names the node.

    The placement of the names into the groups is kept from the last snapshot of the same spec
    when its nodes are the same (``_NodeShape``); the free resources are read every time.
    """
    shape = _node_shape(spec, nodes)
    caps = shape.caps
    raw = np.stack(
        [
            column_array(c, np.int64)
            for c in (nodes.free_gpus, nodes.free_share_milli, nodes.free_cpus_milli, nodes.free_mem_mib)
        ],
        axis=1,
    ).reshape(len(nodes), 4)
    up = np.array(nodes.state, dtype=object) == "up"
    bad = (raw > caps).any(axis=1) | ((raw[:, 0] > 0) & (raw[:, 1] != WHOLE))
    if bad.any():
        _raise_capacity(nodes[int(np.flatnonzero(bad)[0])], caps[int(np.flatnonzero(bad)[0])])
    offsets = shape.offsets
    free = np.zeros((4, int(offsets[-1])), dtype=np.int64)
    free[:, shape.slot] = np.where(up[:, None], raw, 0).T
    up_slots = np.zeros(int(offsets[-1]), dtype=bool)
    up_slots[shape.slot[up]] = True
    return NodeLayout(
        names=shape.names,
        index=shape.index,
        free_gpus=free[0],
        free_share_milli=free[1],
        free_cpus_milli=free[2],
        free_mem_mib=free[3],
        offsets=offsets,
        slot_of=shape.slot_of,
        group_of=shape.group_of,
        up=up_slots,
        node_slot=shape.slot,
        node_group=shape.code,
        node_names=shape.name,
    )


def _raise_capacity(node: NodeState, cap: IntArray) -> None:
    for name, value, limit in zip(
        ("free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib"),
        (node.free_gpus, node.free_share_milli, node.free_cpus_milli, node.free_mem_mib),
        cap.tolist(),
        strict=True,
    ):
        if value > limit:
            raise ValueError(f"node {node.name!r}: {name} {value} exceeds its group's capacity {limit}")
    raise ValueError(f"node {node.name!r}: a node with a free whole GPU must report free_share_milli 1000")


# -- pending jobs: binding's rules ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PendingBinding:
    """Pending jobs bound to a spec: ``kept[i]`` indexes the input jobs; requests filled in."""

    kept: tuple[int, ...]
    cpus_milli: tuple[int, ...]
    mem_mib: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    excluded: tuple[ExcludedJob, ...]
    #: [len(kept), n_groups] the same groups as a boolean matrix
    eligible: npt.NDArray[np.bool_]


def _requests(job: PendingJob, spec: ClusterSpec) -> tuple[int, int]:
    d = spec.defaults
    demand = job.gpus * job.gpu_milli / WHOLE
    if job.gpus == 0:
        cpu_default, mem_default = round(d.cpus_cpu_only * 1000), round(d.mem_gib_cpu_only * 1024)
    else:
        cpu_default = math.ceil(demand * d.cpus_per_gpu * 1000)
        mem_default = math.ceil(demand * d.mem_gib_per_gpu * 1024)
    cpus = cpu_default if job.cpus_milli < 0 else job.cpus_milli
    mem = mem_default if job.mem_mib < 0 else job.mem_mib
    return cpus, mem


def _eligible(
    spec: ClusterSpec, job: PendingJob, cpus: int, mem: int, node_slack: int
) -> tuple[tuple[int, ...], str]:
    """Node groups the job may run on, or the reason there are none (binding's rules)."""
    if job.gpus == 0 and spec.cpu_only_jobs == "exclude":
        return (), "requests 0 GPUs (this cluster spec runs GPU jobs only: cpu_only_jobs = 'exclude')"
    groups = spec.node_groups
    allowed = set(job.gpu_types)
    typed = [k for k, g in enumerate(groups) if job.gpus == 0 or not allowed or g.gpu_type in allowed]
    if not typed:
        return (
            (),
            f"allowed GPU types {'|'.join(sorted(allowed))} not in cluster ({', '.join(spec.gpu_types)})",
        )
    in_vc = [k for k in typed if not groups[k].partitions or job.partition in groups[k].partitions]
    if not in_vc:
        return (), f"partition/VC {job.partition!r} has no node of an allowed GPU type"
    fitting = tuple(
        k for k in in_vc if fits_empty_group(groups[k], job.gpus, job.gpu_milli, cpus, mem, node_slack)
    )
    if fitting:
        return fitting, ""
    return (), "CPU/memory request or gang size does not fit any eligible node group"


def _fits_empty(
    spec: ClusterSpec, gpus: IntArray, milli: IntArray, cpus: IntArray, mem: IntArray, node_slack: int
) -> npt.NDArray[np.bool_]:
    """``fits_empty_group`` of every (job, group), vectorized: [Q, n_groups]."""
    groups = spec.node_groups
    cap_g = np.array([g.gpus for g in groups], dtype=np.int64)[None, :]
    cap_c = np.array([g.cpus_milli for g in groups], dtype=np.int64)[None, :]
    cap_m = np.array([g.mem_mib for g in groups], dtype=np.int64)[None, :]
    count = np.array([g.count for g in groups], dtype=np.int64)[None, :]
    g_, m_, c_, r_ = gpus[:, None], milli[:, None], cpus[:, None], mem[:, None]
    one_node = (c_ <= cap_c) & (r_ <= cap_m)
    share = m_ < WHOLE
    single = (g_ > 0) & (cap_g > 0) & (share | (g_ <= cap_g)) & one_node
    # a gang of whole GPUs: each node carries its share of the CPU and memory request
    safe_g = np.maximum(cap_g, 1)
    need = -(-g_ // safe_g)
    max_nodes = np.maximum(np.minimum(need + node_slack, count), 1)
    per_node = -(-g_ // max_nodes)
    safe_gpus = np.maximum(g_, 1)
    gang = (
        (g_ > 0)
        & (cap_g > 0)
        & ~share
        & (need <= count)
        & (per_node <= cap_g)
        & (-(-c_ * per_node // safe_gpus) <= cap_c)
        & (-(-r_ * per_node // safe_gpus) <= cap_m)
    )
    out: npt.NDArray[np.bool_] = np.where(g_ == 0, one_node, single | gang)
    return out


def _fits_distinct(
    spec: ClusterSpec, gpus: IntArray, milli: IntArray, cpus: IntArray, mem: IntArray, node_slack: int
) -> npt.NDArray[np.bool_]:
    """``_fits_empty`` computed once per distinct request (GPUs, share, CPUs, memory), gathered per job.

    Why: a queue repeats a few shapes (1,024 openb pods ask for about a hundred distinct requests),
    and the vectorized test over every (job, group) pair was 0.65 ms of each featurized snapshot.
    """
    n = len(gpus)
    if n < 64:
        return _fits_empty(spec, gpus, milli, cpus, mem, node_slack)
    order = np.lexsort((mem, cpus, milli, gpus))
    g, m, c, r = gpus[order], milli[order], cpus[order], mem[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (m[1:] != m[:-1]) | (c[1:] != c[:-1]) | (r[1:] != r[:-1])
    first = order[new]
    distinct = np.empty(n, dtype=np.int64)
    distinct[order] = np.cumsum(new) - 1
    fits = _fits_empty(spec, gpus[first], milli[first], cpus[first], mem[first], node_slack)
    return fits[distinct]


#: a pending job's request as binding's rules read it: GPUs, share, CPUs and memory as given (``-1``:
#: not given), allowed GPU types, partition. Two jobs with the same key bind alike.
RequestKey = tuple[int, int, int, int, tuple[str, ...], str]


@dataclass(frozen=True, eq=False)
class _RequestTable:
    """Binding's results per distinct request (``RequestKey``) of one spec and node slack.

    Why: the featurizer and the placer bind every pending job of every snapshot, and a queue repeats
    a few requests (1,024 openb pods: about 140 keys), mostly the same from one snapshot to the next.
    Filling defaults and testing every (request, group) pair cost 0.8 ms per snapshot in each
    service; looking each job's key up costs about a quarter of that. Rows are computed by the same
    vectorized rules (``_bind_rows``) the first time a key is seen, so a job binds exactly as
    before. Immutable: a table with new keys is a new object (a stage working in a thread may read
    the old one meanwhile).
    """

    index: dict[RequestKey, int]
    cpus: IntArray
    mem: IntArray
    #: [keys, n_groups]
    eligible: npt.NDArray[np.bool_]
    ok: npt.NDArray[np.bool_]
    groups: tuple[tuple[int, ...], ...]

    @classmethod
    def empty(cls, n_groups: int) -> _RequestTable:
        none = np.zeros(0, dtype=np.int64)
        return cls({}, none, none, np.zeros((0, n_groups), dtype=bool), np.zeros(0, dtype=bool), ())

    def extended(self, keys: Sequence[RequestKey], spec: ClusterSpec, node_slack: int) -> _RequestTable:
        """This table with the rows of ``keys`` (keys it lacks) added."""
        cpus, mem, eligible = _bind_rows(keys, spec, node_slack)
        index = dict(self.index)
        index.update(zip(keys, range(len(index), len(index) + len(keys)), strict=True))
        rows = [tuple(np.flatnonzero(row).tolist()) for row in eligible]
        return _RequestTable(
            index=index,
            cpus=np.concatenate((self.cpus, cpus)),
            mem=np.concatenate((self.mem, mem)),
            eligible=np.concatenate((self.eligible, eligible)),
            ok=np.concatenate((self.ok, eligible.any(axis=1))),
            groups=(*self.groups, *rows),
        )


#: per (spec identity, node slack): the spec and its request table; a table past ``_KEYS_KEPT`` keys
#: starts over: a workload whose requests never repeat must not grow it without bound, and adding
#: keys copies the table (about 0.03 ms at 4,096 keys)
_TABLES: dict[tuple[int, int], tuple[ClusterSpec, _RequestTable]] = {}
_TABLES_KEPT = 64
_KEYS_KEPT = 1 << 12


def _request_table(spec: ClusterSpec, node_slack: int) -> _RequestTable | None:
    """The table of ``spec`` and ``node_slack``, if there is one."""
    kept = _TABLES.get((id(spec), node_slack))
    return kept[1] if kept is not None and kept[0] is spec else None


def _extend_table(
    spec: ClusterSpec, node_slack: int, table: _RequestTable | None, keys: Sequence[RequestKey]
) -> _RequestTable:
    """``table`` (or a new one) with every key of ``keys``, kept as the table of ``spec``."""
    if table is None:
        table = _RequestTable.empty(len(spec.node_groups))
    new = [k for k in dict.fromkeys(keys) if k not in table.index]
    if len(table.index) + len(new) > _KEYS_KEPT:  # start over with this queue's keys only
        table = _RequestTable.empty(len(spec.node_groups))
        new = list(dict.fromkeys(keys))
    table = table.extended(new, spec, node_slack)
    if len(_TABLES) >= _TABLES_KEPT:
        _TABLES.clear()
    _TABLES[(id(spec), node_slack)] = (spec, table)
    return table


def _bind_rows(
    keys: Sequence[RequestKey], spec: ClusterSpec, node_slack: int
) -> tuple[IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Filled CPUs and memory, and eligible groups ([len(keys), n_groups]), of each request.

    Vectorized over the requests: GPU-type and partition rows are computed once per distinct value.
    """
    n = len(keys)
    groups = spec.node_groups
    n_groups = len(groups)
    d = spec.defaults
    gpus_of, milli_of, cpus_of, mem_of, types_of, parts_of = zip(*keys, strict=True) if n else ((),) * 6
    gpus = np.array(gpus_of, dtype=np.int64).reshape(n)
    milli = np.array(milli_of, dtype=np.int64).reshape(n)
    cpus_in = np.array(cpus_of, dtype=np.int64).reshape(n)
    mem_in = np.array(mem_of, dtype=np.int64).reshape(n)
    demand = gpus * milli / WHOLE
    cpu_only = gpus == 0
    cpu_default = np.where(
        cpu_only, round(d.cpus_cpu_only * 1000), np.ceil(demand * d.cpus_per_gpu * 1000)
    ).astype(np.int64)
    mem_default = np.where(
        cpu_only, round(d.mem_gib_cpu_only * 1024), np.ceil(demand * d.mem_gib_per_gpu * 1024)
    ).astype(np.int64)
    cpus = np.where(cpus_in < 0, cpu_default, cpus_in)
    mem = np.where(mem_in < 0, mem_default, mem_in)

    # allowed GPU types and partitions: one row per distinct value, gathered per request
    type_rows = _first_seen(types_of)
    part_rows = _first_seen(parts_of)
    type_of = np.fromiter(map(type_rows.__getitem__, types_of), np.int64, n)
    part_of = np.fromiter(map(part_rows.__getitem__, parts_of), np.int64, n)
    type_ok = np.array([[not t or g.gpu_type in t for g in groups] for t in type_rows], dtype=bool).reshape(
        len(type_rows), n_groups
    )
    part_ok = np.array(
        [[not g.partitions or p in g.partitions for g in groups] for p in part_rows], dtype=bool
    ).reshape(len(part_rows), n_groups)
    typed = type_ok[type_of] | cpu_only[:, None]  # a CPU-only job may use any group's CPUs
    eligible = typed & part_ok[part_of] & _fits_distinct(spec, gpus, milli, cpus, mem, node_slack)
    if spec.cpu_only_jobs == "exclude":
        eligible &= ~cpu_only[:, None]
    return cpus, mem, eligible


def _bind(jobs: PendingJobs, spec: ClusterSpec, node_slack: int) -> tuple[PendingBinding, IntArray, IntArray]:
    """``bind_pending``, with the kept jobs' filled CPUs and memory as arrays (what the views read)."""
    if node_slack < 0:
        raise ValueError("node_slack must be >= 0")
    n = len(jobs)
    keys = list(
        zip(
            jobs.gpus,
            jobs.gpu_milli,
            jobs.cpus_milli,
            jobs.mem_mib,
            jobs.gpu_types,
            jobs.partition,
            strict=True,
        )
    )
    table = _request_table(spec, node_slack)
    if table is None or not all(map(table.index.__contains__, keys)):
        table = _extend_table(spec, node_slack, table, keys)
    code = np.fromiter(map(table.index.__getitem__, keys), dtype=np.int64, count=n)
    ok = table.ok[code]
    kept = np.flatnonzero(ok)
    excluded = tuple(
        ExcludedJob(
            job_id=jobs[i].job_id,
            reason=_eligible(spec, jobs[i], int(table.cpus[code[i]]), int(table.mem[code[i]]), node_slack)[1]
            or "no eligible node group",
        )
        for i in np.flatnonzero(~ok).tolist()
    )
    kept_code = code[kept]
    cpus, mem = table.cpus[kept_code], table.mem[kept_code]
    binding = PendingBinding(
        kept=tuple(kept.tolist()),
        cpus_milli=tuple(cpus.tolist()),
        mem_mib=tuple(mem.tolist()),
        groups=pick(table.groups, kept_code.tolist()),
        excluded=excluded,
        eligible=table.eligible[kept_code],
    )
    return binding, cpus, mem


def bind_pending(jobs: PendingJobs, spec: ClusterSpec, node_slack: int = 0) -> PendingBinding:
    """Fill default requests and find each job's eligible node groups (``shared.scheduling.binding``'s rules).

    Jobs no group can ever hold are excluded with the reason; the rest keep their input order.
    Each distinct request is bound once per spec and node slack (``_RequestTable``) and looked up
    per job.
    """
    return _bind(jobs, spec, node_slack)[0]


def _first_seen(values: Iterable[H]) -> dict[H, int]:
    """Each distinct value -> its index in order of first appearance.

    Built from ``dict.fromkeys`` and looked up with ``map`` (C speed): a per-job ``setdefault``
    loop cost about 0.2 ms per column of a 1,024-job queue, at every featurized snapshot.
    """
    return {v: i for i, v in enumerate(dict.fromkeys(values))}


def _codes(names: Sequence[str], seed: Sequence[str]) -> tuple[list[int], tuple[str, ...]]:
    """Codes of ``names``: the (distinct) ``seed`` names first, then new names as they first appear."""
    table = _first_seen((*seed, *names))
    return list(map(table.__getitem__, names)), tuple(table)


def _predicted_columns(
    predictions: tuple[FloatArray, FloatArray, FloatArray] | None, base: list[int], rows: list[int], n: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The QueueView's predicted columns (point, low, high) for the kept jobs (``rows`` of the
    ``base`` jobs); all NaN (missing) without predictions."""
    if predictions is None:
        return np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    at = np.asarray(base, dtype=np.int64)[np.asarray(rows, dtype=np.int64)] if n else np.zeros(0, np.int64)
    point, low, high = (np.asarray(v, dtype=np.float64)[at] for v in predictions)
    return point, low, high


def snapshot_views(
    snapshot: QueueSnapshot,
    spec: ClusterSpec,
    node_slack: int = 0,
    only: Collection[str] | None = None,
    predictions: tuple[FloatArray, FloatArray, FloatArray] | None = None,
) -> SnapshotViews:
    """Build the featurizer's views of ``snapshot`` on ``spec``; raises ValueError naming what is wrong.

    ``only`` restricts the queue to the pending jobs with those ids (in snapshot order), as if the
    others were not queued: the learned prioritizer computes the features of the jobs its model sees
    this way when it sees only part of a long queue, as the simulator does. ``predictions``: the
    runtime predictor's (point, low, high) per pending job of the snapshot, in its order (the live
    predictor, ``shared.prediction.online``); without them the predicted columns are missing (NaN).
    """
    layout = node_layout(spec, snapshot.nodes)
    pending = snapshot.pending
    base = list(range(len(pending)))
    if only is not None:
        wanted = only if isinstance(only, set | frozenset | dict) else set(only)
        base = [i for i, j in enumerate(pending.job_id) if j in wanted]
        pending = pending.take(base)
    bound, bound_cpus, bound_mem = _bind(pending, spec, node_slack)
    rows = list(bound.kept)
    kept = pending.take(rows)

    eligible = bound.eligible
    spec_vcs = sorted({p for g in spec.node_groups for p in g.partitions} | set(spec.partitions))
    vc, vc_names = _codes(kept.partition, spec_vcs)
    user, user_names = _codes(kept.user, ())
    predicted = _predicted_columns(predictions, base, rows, len(eligible))
    queue = QueueView(
        gpus=column_array(kept.gpus, np.int64),
        gpu_milli=column_array(kept.gpu_milli, np.int64),
        cpus_milli=bound_cpus,
        mem_mib=bound_mem,
        est_runtime_s=column_array(kept.est_runtime_s, np.float64),
        submit_s=column_array(kept.submit_s, np.float64),
        user=np.array(user, dtype=np.int64),
        vc=np.array(vc, dtype=np.int64),
        eligible=eligible,
        n_vcs=max(1, len(vc_names)),
        # a snapshot carries no runtime predictions (its message schema has none): the caller's,
        # else missing, which the ``predicted`` feature set reads as such (``QueueView``: NaN = none)
        predicted_s=predicted[0],
        predicted_lo_s=predicted[1],
        predicted_hi_s=predicted[2],
    )
    # one pass over the running jobs (thousands of them on a big cluster): a job's group is its first
    # node's, found from the node's slot (groups' slots are consecutive)
    # (every job on one node, as pods are: the first nodes are the flat column itself)
    running = snapshot.running
    run_group = layout.node_group[running_first_index(running, layout)]
    run_milli = column_array(running.gpus, np.int64) * column_array(running.gpu_milli, np.int64)
    run_end = column_array(running.est_end_s, np.float64)
    cluster = ClusterView(
        gpu_type=np.array([spec.gpu_types.index(g.gpu_type) for g in spec.node_groups], dtype=np.int64),
        gpus_per_node=np.array([g.gpus for g in spec.node_groups], dtype=np.int64),
        node_count=np.array([g.count for g in spec.node_groups], dtype=np.int64),
        cpus_per_node_milli=np.array([g.cpus_milli for g in spec.node_groups], dtype=np.int64),
        mem_per_node_mib=np.array([g.mem_mib for g in spec.node_groups], dtype=np.int64),
        free_gpus=layout.free_gpus,
        free_share_milli=layout.free_share_milli,
        free_cpus_milli=layout.free_cpus_milli,
        free_mem_mib=layout.free_mem_mib,
        run_group=run_group,
        run_gpus=run_milli.astype(np.float64) / WHOLE,
        run_end_s=run_end,
        node_slack=node_slack,
        gpu_type_names=spec.gpu_types,
    )
    return SnapshotViews(
        queue=queue,
        cluster=cluster,
        now=snapshot.time,
        job_ids=kept.job_id,
        rows=tuple(rows) if only is None else pick(base, rows),
        excluded=bound.excluded,
        vc_names=vc_names,
        user_names=user_names,
    )
