"""The neutral inputs of the featurizer: a queue snapshot and a cluster snapshot, as numpy arrays.

Why not the simulator's own objects: the same features must be computed inside the simulator (for
training) and in the production featurizer service, which only has what Slurm reports (``squeue``,
``sinfo``/``scontrol show node``). Both sides fill these two views; ``compute_features`` never sees
anything else, so a model trained in simulation is fed identically defined numbers in production.

Conventions (as everywhere in Hylo): times in seconds, CPUs in milli-cores, memory in MiB, GPUs as a
whole count plus a per-GPU share in milli-GPUs (1000 = whole GPUs; only 1-GPU jobs may be
fractional). Requests must be filled in (no ``-1``): the simulator's binding fills defaults, the
production service must do the same from the cluster spec.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

import numpy as np
import numpy.typing as npt

from shared.domain.jobs import WHOLE_GPU_MILLI

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["BoolArray", "ClusterView", "FloatArray", "IntArray", "QueueView"]


def _ints(name: str, values: npt.ArrayLike, n: int | None = None) -> IntArray:
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} values, expected {n}")
    return arr


def _floats(name: str, values: npt.ArrayLike, n: int, check: bool) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
    if check and not np.isfinite(arr).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    return arr


#: a prediction column not given: all NaN (no prediction) for every job
_NOT_GIVEN: FloatArray = np.empty(0)


def _require(ok: bool | np.bool_, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True, eq=False)
class QueueView:
    """The Q queued jobs of one scheduling decision, one array entry per job.

    Fields:
        gpus: whole GPUs requested (1 for a fractional job, 0 for a CPU-only job).
        gpu_milli: per-GPU share in milli-GPUs; 1000 = whole GPUs, 1..999 = a share of one GPU.
        cpus_milli: CPUs requested in milli-cores (filled, >= 0).
        mem_mib: memory requested in MiB (filled, >= 0).
        est_runtime_s: requested / estimated runtime in seconds (what the scheduler believes; the
            true runtime only in an oracle setting). Must be finite: apply an estimate model first.
        submit_s: submit time in seconds, on the same clock as ``now`` and the running jobs' ends.
        user: user code (any non-negative integer; only equality matters).
        vc: virtual cluster / partition code in ``0 .. n_vcs - 1``.
        eligible: boolean matrix [Q, n_groups]: node groups each job may run on (allowed GPU type,
            partition, fits an empty node of the group). Every row needs at least one True.
        n_vcs: number of VC codes (for the VC feature's normalization).
        predicted_s, predicted_lo_s, predicted_hi_s: the runtime predictor's prediction and its
            band (seconds; ``JobTable.predicted``...), read only by the ``predicted`` feature set.
            NaN (or not given: all NaN) = no prediction, a value the features mark missing, never
            an error: a trace without predictions, a cold-start job without a band, and the
            production snapshots (which carry none) are all usable.

    Shapes are always checked; ``check_values=False`` skips the value checks, for callers whose
    arrays are valid by construction (the simulator) and pay for every microsecond.
    """

    gpus: IntArray
    gpu_milli: IntArray
    cpus_milli: IntArray
    mem_mib: IntArray
    est_runtime_s: FloatArray
    submit_s: FloatArray
    user: IntArray
    vc: IntArray
    eligible: BoolArray
    n_vcs: int = 1
    predicted_s: FloatArray = field(default_factory=lambda: _NOT_GIVEN)
    predicted_lo_s: FloatArray = field(default_factory=lambda: _NOT_GIVEN)
    predicted_hi_s: FloatArray = field(default_factory=lambda: _NOT_GIVEN)
    #: derived: GPUs used while running, a fractional share counting as its fraction
    gpu_demand: FloatArray = field(init=False, repr=False, compare=False)
    check_values: InitVar[bool] = True

    def __post_init__(self, check_values: bool) -> None:
        gpus = _ints("gpus", self.gpus)
        q = len(gpus)
        set_ = object.__setattr__
        set_(self, "gpus", gpus)
        for name in ("gpu_milli", "cpus_milli", "mem_mib", "user", "vc"):
            set_(self, name, _ints(name, getattr(self, name), q))
        for name in ("est_runtime_s", "submit_s"):
            set_(self, name, _floats(name, getattr(self, name), q, check_values))
        for name in ("predicted_s", "predicted_lo_s", "predicted_hi_s"):
            given = getattr(self, name)
            set_(self, name, np.full(q, np.nan) if given is _NOT_GIVEN else _floats(name, given, q, False))
        elig = np.asarray(self.eligible, dtype=bool)
        if elig.ndim != 2 or elig.shape[0] != q:
            raise ValueError(f"eligible must have shape ({q}, n_groups), got {elig.shape}")
        set_(self, "eligible", elig)
        set_(self, "gpu_demand", gpus * (self.gpu_milli / WHOLE_GPU_MILLI))
        if q == 0 or not check_values:
            return
        _require(gpus.min() >= 0, "gpus must be >= 0")
        milli = self.gpu_milli
        _require((milli >= 1).all() and (milli <= WHOLE_GPU_MILLI).all(), "gpu_milli must be in 1..1000")
        _require(((milli == WHOLE_GPU_MILLI) | (gpus == 1)).all(), "only 1-GPU jobs may be fractional")
        _require(self.cpus_milli.min() >= 0, "cpus_milli must be filled in (>= 0)")
        _require(self.mem_mib.min() >= 0, "mem_mib must be filled in (>= 0)")
        _require(self.est_runtime_s.min() >= 0, "est_runtime_s must be >= 0")
        for name in ("predicted_s", "predicted_lo_s", "predicted_hi_s"):
            values = getattr(self, name)
            given = values[~np.isnan(values)]
            _require(
                bool(np.isfinite(given).all()) and (len(given) == 0 or given.min() >= 0),
                f"{name} must be >= 0 and finite where given (NaN = no prediction)",
            )
        _require(self.user.min() >= 0, "user codes must be >= 0")
        _require(self.n_vcs >= 1, "n_vcs must be >= 1")
        _require(
            self.vc.min() >= 0 and self.vc.max() < self.n_vcs, f"vc codes must be in 0..{self.n_vcs - 1}"
        )
        _require(elig.any(axis=1).all(), "every queued job needs at least one eligible node group")

    def __len__(self) -> int:
        return len(self.gpus)


@dataclass(frozen=True, eq=False)
class ClusterView:
    """Free resources of every node and the running jobs, grouped by node group.

    A node group is ``node_count[g]`` identical nodes (one GPU type, same GPUs, CPUs and memory per
    node), so capacities are per group; free resources are per node, with the nodes of group 0
    first, then group 1, and so on (``node_offsets`` gives the slices). Per-group totals the
    features need (free GPUs, idle nodes, ...) are derived once, when the view is built.

    Fields:
        gpu_type: GPU type code of each group (index into ``gpu_type_names``).
        gpus_per_node, cpus_per_node_milli, mem_per_node_mib: per-node capacity of each group.
        node_count: nodes in each group (>= 1).
        free_gpus: whole GPUs free on each node (a GPU partly used by shares is not free).
        free_share_milli: the largest free share on any single GPU of each node (1000 when a whole
            GPU is free, 0 on a node without GPUs): what a fractional job can get there.
        free_cpus_milli, free_mem_mib: CPUs and memory free on each node.
        run_group, run_gpus, run_end_s: the running jobs: their node group, the GPUs they hold
            (a share counts as its fraction) and their *estimated* end time (start + estimate, on
            the clock of ``now``; a job past its estimate is expected to end at any moment).
        node_slack: extra nodes a gang may span beyond ``ceil(gpus / gpus_per_node)``, as the
            simulator's ``SimConfig.node_slack`` (0 by default).
        gpu_type_names: names of the GPU type codes (informative only).

    Shapes are always checked; ``check_values=False`` skips the value checks (see ``QueueView``).
    """

    gpu_type: IntArray
    gpus_per_node: IntArray
    node_count: IntArray
    cpus_per_node_milli: IntArray
    mem_per_node_mib: IntArray
    free_gpus: IntArray
    free_share_milli: IntArray
    free_cpus_milli: IntArray
    free_mem_mib: IntArray
    run_group: IntArray
    run_gpus: FloatArray
    run_end_s: FloatArray
    node_slack: int = 0
    gpu_type_names: tuple[str, ...] = field(default=())
    # derived in __post_init__ (every feature computation needs them; computed once per view)
    #: ``node_offsets[g]:node_offsets[g + 1]`` are the nodes of group g
    node_offsets: IntArray = field(init=False, repr=False, compare=False)
    group_of_node: IntArray = field(init=False, repr=False, compare=False)
    #: GPUs of each group (nodes x GPUs per node)
    capacity_gpus: IntArray = field(init=False, repr=False, compare=False)
    #: nodes with nothing running: every GPU, CPU and MiB free
    idle_node: BoolArray = field(init=False, repr=False, compare=False)
    #: per group: idle nodes, free whole GPUs, free whole GPUs on partially used (not idle) nodes
    idle_by_group: IntArray = field(init=False, repr=False, compare=False)
    free_by_group: IntArray = field(init=False, repr=False, compare=False)
    partial_free_by_group: IntArray = field(init=False, repr=False, compare=False)
    check_values: InitVar[bool] = True

    def __post_init__(self, check_values: bool) -> None:
        set_ = object.__setattr__
        count = _ints("node_count", self.node_count)
        n_groups = len(count)
        _require(n_groups >= 1, "a cluster needs at least one node group")
        _require(count.min() >= 1, "node_count must be >= 1 in every group")
        set_(self, "node_count", count)
        for name in ("gpu_type", "gpus_per_node", "cpus_per_node_milli", "mem_per_node_mib"):
            set_(self, name, _ints(name, getattr(self, name), n_groups))
        n_nodes = int(count.sum())
        for name in ("free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib"):
            set_(self, name, _ints(name, getattr(self, name), n_nodes))
        run_group = _ints("run_group", self.run_group)
        set_(self, "run_group", run_group)
        n_run = len(run_group)
        set_(self, "run_gpus", _floats("run_gpus", self.run_gpus, n_run, check_values))
        set_(self, "run_end_s", _floats("run_end_s", self.run_end_s, n_run, check_values))
        _require(self.node_slack >= 0, "node_slack must be >= 0")
        self._derive()
        if not check_values:
            return
        _require(self.gpus_per_node.min() >= 0, "gpus_per_node must be >= 0")
        group_of_node = self.group_of_node
        for free, cap, name in (
            (self.free_gpus, self.gpus_per_node, "free_gpus"),
            (self.free_cpus_milli, self.cpus_per_node_milli, "free_cpus_milli"),
            (self.free_mem_mib, self.mem_per_node_mib, "free_mem_mib"),
        ):
            _require(free.min() >= 0 and (free <= cap[group_of_node]).all(), f"{name} outside 0..capacity")
        share = self.free_share_milli
        has_gpu = self.gpus_per_node[group_of_node] > 0
        _require(
            share.min() >= 0 and (share <= np.where(has_gpu, WHOLE_GPU_MILLI, 0)).all(),
            "free_share_milli outside 0..1000 (0 on nodes without GPUs)",
        )
        _require(
            ((self.free_gpus == 0) | (share == WHOLE_GPU_MILLI)).all(),
            "a node with a free whole GPU must report free_share_milli = 1000",
        )
        if n_run:
            _require(run_group.min() >= 0 and run_group.max() < n_groups, "run_group outside the groups")
            _require(self.run_gpus.min() >= 0, "run_gpus must be >= 0")

    @property
    def n_groups(self) -> int:
        return len(self.node_count)

    @classmethod
    def empty(
        cls,
        gpu_type: npt.ArrayLike,
        gpus_per_node: npt.ArrayLike,
        node_count: npt.ArrayLike,
        cpus_per_node_milli: npt.ArrayLike,
        mem_per_node_mib: npt.ArrayLike,
        node_slack: int = 0,
        gpu_type_names: tuple[str, ...] = (),
        check_values: bool = True,
    ) -> ClusterView:
        """A cluster of these node groups with every node free and nothing running (its fixed shape)."""
        gpn, cpus, mem = (
            np.asarray(a, dtype=np.int64) for a in (gpus_per_node, cpus_per_node_milli, mem_per_node_mib)
        )
        count = np.asarray(node_count, dtype=np.int64)
        nodes = np.repeat(np.arange(len(count)), count)
        free = gpn[nodes]
        return cls(
            gpu_type=np.asarray(gpu_type, dtype=np.int64),
            gpus_per_node=gpn,
            node_count=count,
            cpus_per_node_milli=cpus,
            mem_per_node_mib=mem,
            free_gpus=free,
            free_share_milli=np.where(free > 0, WHOLE_GPU_MILLI, 0),
            free_cpus_milli=cpus[nodes],
            free_mem_mib=mem[nodes],
            run_group=np.zeros(0, dtype=np.int64),
            run_gpus=np.zeros(0),
            run_end_s=np.zeros(0),
            node_slack=node_slack,
            gpu_type_names=gpu_type_names,
            check_values=check_values,
        )

    def emptied(self) -> ClusterView:
        """This cluster with every node free and nothing running."""
        return ClusterView.empty(
            self.gpu_type,
            self.gpus_per_node,
            self.node_count,
            self.cpus_per_node_milli,
            self.mem_per_node_mib,
            self.node_slack,
            self.gpu_type_names,
        )

    def _derive(self) -> None:
        set_ = object.__setattr__
        count, gpn = self.node_count, self.gpus_per_node
        n_groups = len(count)
        offsets = np.zeros(n_groups + 1, dtype=np.int64)
        np.cumsum(count, out=offsets[1:])
        gon = np.repeat(np.arange(n_groups, dtype=np.int64), count)
        idle = (
            (self.free_gpus == gpn[gon])
            & (self.free_cpus_milli == self.cpus_per_node_milli[gon])
            & (self.free_mem_mib == self.mem_per_node_mib[gon])
        )
        idle_g = np.bincount(gon[idle], minlength=n_groups).astype(np.int64)
        free_g = np.add.reduceat(self.free_gpus, offsets[:-1]).astype(np.int64)
        set_(self, "node_offsets", offsets)
        set_(self, "group_of_node", gon)
        set_(self, "capacity_gpus", count * gpn)
        set_(self, "idle_node", idle)
        set_(self, "idle_by_group", idle_g)
        set_(self, "free_by_group", free_g)
        set_(self, "partial_free_by_group", free_g - idle_g * gpn)
