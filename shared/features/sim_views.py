"""Building the feature views from the simulator's state, cheaply enough to do at every decision.

``SimViewBuilder`` precomputes everything that does not change during a run (the eligibility row
of every job class, per-group capacities); a decision then costs a few fancy-indexes and one
concatenation per node array. ``RunningJobs`` keeps the running jobs in numpy arrays sorted by
estimated end, so the simulator does not rebuild them from its allocation dict each decision.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba.core.errors import NumbaError

from shared.domain.jobs import WHOLE_GPU_MILLI
from shared.features.kernels_view import view_kernel
from shared.features.views import ClusterView, FloatArray, IntArray, QueueView
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.running import running_insert, running_remove
from shared.scheduling.state import ClusterState, GroupState

__all__ = ["RunningJobs", "SimViewBuilder"]


class RunningJobs:
    """The running jobs as arrays (job, group, estimated end), kept sorted by estimated end.

    Sorted because the future-availability feature bins sorted ends in O(R) instead of a binary
    search per job. Adding or removing a job finds its slot by binary search and shifts the tail
    of the three arrays, in one compiled call (``shared.scheduling.running``, with which the
    simulator's compiled core keeps its running jobs in the same layout: ~1 us, where the numpy
    calls and slice copies took ~8 us, three times per decision).
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._job = np.zeros(capacity, dtype=np.int64)
        self._group = np.zeros(capacity, dtype=np.int64)
        self._end = np.zeros(capacity, dtype=np.float64)
        self._end_of: dict[int, float] = {}  # job -> its estimated end (to find it on removal)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __contains__(self, job: int) -> bool:
        return job in self._end_of

    def add(self, job: int, group: int, est_end: float) -> None:
        if job in self._end_of:
            raise ValueError(f"job {job} is already running")
        n = self._n
        if n == len(self._job):
            grow = max(n, 16)
            self._job = np.concatenate((self._job, np.zeros(grow, dtype=np.int64)))
            self._group = np.concatenate((self._group, np.zeros(grow, dtype=np.int64)))
            self._end = np.concatenate((self._end, np.zeros(grow)))
        running_insert(self._job, self._group, self._end, n, int(job), int(group), float(est_end))
        self._end_of[job] = est_end
        self._n = n + 1

    def remove(self, job: int) -> None:
        est_end = self._end_of.pop(job)
        n = self._n
        running_remove(self._job, self._group, self._end, n, int(job), est_end)
        self._n = n - 1

    def buffers(self) -> tuple[IntArray, IntArray, FloatArray, int]:
        """The arrays behind ``jobs``, ``group`` and ``est_end`` (valid in their first entries,
        longer) and that count: what a compiled caller slices itself (``SimObserver``)."""
        return self._job, self._group, self._end, self._n

    @property
    def jobs(self) -> IntArray:
        return self._job[: self._n]

    @property
    def group(self) -> IntArray:
        return self._group[: self._n]

    @property
    def est_end(self) -> FloatArray:
        return self._end[: self._n]


class SimViewBuilder:
    """Views of a simulated decision: pass the queued job indices, the state and the running jobs.

    ``estimate`` is what the scheduler believes each job's runtime is (the simulator's ``est``:
    estimates, or true runtimes in the oracle setting), indexed like ``workload.jobs``. The views'
    value checks are off by default (the simulator's state is valid by construction; shapes are
    still checked); ``check_values=True`` turns them on, for tests.
    """

    def __init__(
        self,
        workload: BoundWorkload,
        estimate: npt.ArrayLike,
        node_slack: int | None = None,
        check_values: bool = False,
    ) -> None:
        spec = workload.spec
        jobs = workload.jobs
        groups = spec.node_groups
        n_groups = len(groups)
        est = np.asarray(estimate, dtype=np.float64)
        if est.shape != (len(jobs),):
            raise ValueError(f"estimate has shape {est.shape}, expected ({len(jobs)},)")
        if np.isnan(est).any():
            raise ValueError("estimate holds NaN: apply an estimate model or use true runtimes")
        class_elig = np.zeros((len(workload.class_groups), n_groups), dtype=bool)
        for c, members in enumerate(workload.class_groups):
            class_elig[c, list(members)] = True
        self.workload = workload
        self._elig = class_elig[workload.job_class]
        self._est = np.maximum(est, 0.0)
        self._demand = jobs.gpu_demand
        self._gpus, self._milli = jobs.gpus, jobs.gpu_milli
        self._cpus, self._mem = jobs.cpus_milli, jobs.mem_mib
        self._submit, self._user, self._vc = jobs.submit, jobs.user, jobs.vc
        # the runtime predictor's columns (NaN = none: a workload prepared without predictions)
        self._pred, self._pred_lo, self._pred_hi = jobs.predicted, jobs.predicted_lo, jobs.predicted_hi
        self._n_vcs = max(len(jobs.vcs), int(jobs.vc.max()) + 1 if len(jobs) else 1)
        types = spec.gpu_types
        self._type_names = types
        self._gpu_type = np.array([types.index(g.gpu_type) for g in groups], dtype=np.int64)
        self._gpn = np.array([g.gpus for g in groups], dtype=np.int64)
        self._count = np.array([g.count for g in groups], dtype=np.int64)
        self._cap_cpu = np.array([g.cpus_milli for g in groups], dtype=np.int64)
        self._cap_mem = np.array([g.mem_mib for g in groups], dtype=np.int64)
        self._slack = workload.node_slack if node_slack is None else node_slack
        self._check = check_values
        self._fixed: dict[str, object] | None = None  # see ``_fixed_fields``
        self._node_cap: tuple[IntArray, IntArray, IntArray] = (self._gpn, self._cap_cpu, self._cap_mem)
        #: first node of each group, in the state's node order (groups in order, nodes within)
        self._starts = np.concatenate(([0], np.cumsum(self._count)[:-1])).astype(np.int64)
        self._n_nodes = int(self._count.sum())
        self._demand_f = np.ascontiguousarray(self._demand, dtype=np.float64)
        #: the view's arrays from one compiled call (``kernels_view.view_kernel``); False: numpy's
        #: expressions (``_assemble``), for comparisons, and once a state's arrays could not go to
        #: the kernel
        self.compiled = True

    def queue_view(self, queued: npt.ArrayLike) -> QueueView:
        """The queue of a decision: ``queued`` are indices into ``workload.jobs``."""
        idx = np.asarray(queued, dtype=np.int64)
        return QueueView(
            gpus=self._gpus[idx],
            gpu_milli=self._milli[idx],
            cpus_milli=self._cpus[idx],
            mem_mib=self._mem[idx],
            est_runtime_s=self._est[idx],
            submit_s=self._submit[idx],
            user=self._user[idx],
            vc=self._vc[idx],
            eligible=self._elig[idx],
            n_vcs=self._n_vcs,
            predicted_s=self._pred[idx],
            predicted_lo_s=self._pred_lo[idx],
            predicted_hi_s=self._pred_hi[idx],
            check_values=self._check,
        )

    def cluster_view(
        self,
        state: ClusterState,
        running_jobs: npt.ArrayLike,
        running_group: npt.ArrayLike,
        running_est_end: npt.ArrayLike,
    ) -> ClusterView:
        """Free resources from ``state``; running jobs as indices, their group and estimated end.

        Without value checks the view is assembled directly (``_assemble``): the same fields,
        derived values included, as ``ClusterView``'s constructor gives, for half its cost; by
        default its arrays come from one compiled call (``_compiled_view``)."""
        groups = state.groups
        if self.compiled and not self._check:
            compiled = self._compiled_view(groups, running_jobs, running_group, running_est_end)
            if compiled is not None:
                return compiled
        if len(groups) == 1:
            gs = groups[0]
            free, cpu, mem = gs.whole.copy(), gs.cpu.copy(), gs.mem.copy()
        else:
            free = np.concatenate([gs.whole for gs in groups])
            cpu = np.concatenate([gs.cpu for gs in groups])
            mem = np.concatenate([gs.mem for gs in groups])
        # a node without a tracked share reports 1000 if it has a free whole GPU, else 0
        share = np.where(free > 0, WHOLE_GPU_MILLI, 0)
        for gs, start in zip(groups, self._starts, strict=True):
            if gs.maxfrac is not None:
                share[start : start + gs.n] = gs.maxfrac
        run = np.asarray(running_jobs, dtype=np.int64)
        run_group = np.asarray(running_group, dtype=np.int64)
        run_end = np.asarray(running_est_end, dtype=np.float64)
        if self._check:
            return ClusterView(
                gpu_type=self._gpu_type,
                gpus_per_node=self._gpn,
                node_count=self._count,
                cpus_per_node_milli=self._cap_cpu,
                mem_per_node_mib=self._cap_mem,
                free_gpus=free,
                free_share_milli=share,
                free_cpus_milli=cpu,
                free_mem_mib=mem,
                run_group=run_group,
                run_gpus=self._demand[run],
                run_end_s=run_end,
                node_slack=self._slack,
                gpu_type_names=self._type_names,
                check_values=True,
            )
        return self._assemble(free, share, cpu, mem, run_group, self._demand[run], run_end)

    def _compiled_view(
        self,
        groups: list[GroupState],
        running_jobs: npt.ArrayLike,
        running_group: npt.ArrayLike,
        running_est_end: npt.ArrayLike,
    ) -> ClusterView | None:
        """``_assemble``'s view with its per-state arrays from ``view_kernel`` (the same integers,
        Booleans and gathered GPUs), groups that track shares copying their ``maxfrac``; None
        (numpy's assembly then) for groups whose arrays numba cannot take as one tuple type (all
        are int64 in the simulator's states)."""
        fixed = self._fixed_fields()
        run = np.asarray(running_jobs, dtype=np.int64)
        run_group = np.asarray(running_group, dtype=np.int64)
        run_end = np.asarray(running_est_end, dtype=np.float64)
        if len(run_group) != len(run) or len(run_end) != len(run):
            raise ValueError("running jobs, their groups and their ends differ in length")
        n, n_groups = self._n_nodes, len(groups)
        ints = np.empty(4 * n + 3 * n_groups, dtype=np.int64)
        idle = np.empty(n, dtype=bool)
        run_gpus = np.empty(len(run))
        try:
            ok = view_kernel(
                tuple([gs.whole for gs in groups]),
                tuple([gs.cpu for gs in groups]),
                tuple([gs.mem for gs in groups]),
                self._gpn,
                self._cap_cpu,
                self._cap_mem,
                run,
                self._demand_f,
                ints,
                idle,
                run_gpus,
            )
        except NumbaError:  # e.g. groups of different integer types: not one tuple type
            self.compiled = False  # numpy's assembly from now on (no compilation tried per call)
            return None
        if not ok:
            raise ValueError(
                f"the state's groups do not hold the cluster's {n} nodes, or a running job is unknown"
            )
        share = ints[n : 2 * n]
        for gs, start in zip(groups, self._starts, strict=True):
            if gs.maxfrac is not None:
                share[start : start + gs.n] = gs.maxfrac
        view: ClusterView = object.__new__(ClusterView)
        fields = view.__dict__
        fields.update(fixed)
        fields.update(
            free_gpus=ints[:n],
            free_share_milli=share,
            free_cpus_milli=ints[2 * n : 3 * n],
            free_mem_mib=ints[3 * n : 4 * n],
            run_group=run_group,
            run_gpus=run_gpus,
            run_end_s=run_end,
            idle_node=idle,
            idle_by_group=ints[4 * n : 4 * n + n_groups],
            free_by_group=ints[4 * n + n_groups : 4 * n + 2 * n_groups],
            partial_free_by_group=ints[4 * n + 2 * n_groups :],
        )
        return view

    def _fixed_fields(self) -> dict[str, object]:
        """The fields every view of this cluster shares (its shape, and what ``ClusterView``
        derives from the shape alone), from one view built by its constructor; read-only, since
        every view holds the same arrays."""
        if self._fixed is None:
            empty = self.empty_cluster()
            self._fixed = {
                name: getattr(empty, name)
                for name in (
                    "gpu_type",
                    "gpus_per_node",
                    "node_count",
                    "cpus_per_node_milli",
                    "mem_per_node_mib",
                    "node_slack",
                    "gpu_type_names",
                    "node_offsets",
                    "group_of_node",
                    "capacity_gpus",
                )
            }
            for value in self._fixed.values():
                if isinstance(value, np.ndarray):
                    value.flags.writeable = False
            gon = empty.group_of_node
            self._node_cap = (self._gpn[gon], self._cap_cpu[gon], self._cap_mem[gon])
        return self._fixed

    def _assemble(
        self,
        free: IntArray,
        share: IntArray,
        cpu: IntArray,
        mem: IntArray,
        run_group: IntArray,
        run_gpus: FloatArray,
        run_end: FloatArray,
    ) -> ClusterView:
        """A ``ClusterView`` of valid arrays without its constructor: the fixed fields shared, the
        per-state derived ones with ``ClusterView._derive``'s expressions (integers: the same
        values). Why: the constructor re-derived the cluster's shape and converted every array at
        each decision, 30-40 us of a 0.5 ms decision. ``tests/features/test_fast_view.py``
        compares every field with the constructor's on simulated states."""
        fixed = self._fixed_fields()
        if len(run_group) != len(run_gpus) or len(run_end) != len(run_gpus):
            raise ValueError("running jobs, their groups and their ends differ in length")
        gpn_node, cpu_node, mem_node = self._node_cap
        idle = (free == gpn_node) & (cpu == cpu_node) & (mem == mem_node)
        idle_g = np.add.reduceat(idle, self._starts, dtype=np.int64)
        free_g = np.add.reduceat(free, self._starts, dtype=np.int64)
        view: ClusterView = object.__new__(ClusterView)
        fields = view.__dict__
        fields.update(fixed)
        fields.update(
            free_gpus=free,
            free_share_milli=share,
            free_cpus_milli=cpu,
            free_mem_mib=mem,
            run_group=run_group,
            run_gpus=run_gpus,
            run_end_s=run_end,
            idle_node=idle,
            idle_by_group=idle_g,
            free_by_group=free_g,
            partial_free_by_group=free_g - idle_g * self._gpn,
        )
        return view

    def all_jobs(self) -> QueueView:
        """Every job of the workload as one queue (for per-workload precomputation)."""
        return self.queue_view(np.arange(len(self._gpus)))

    def empty_cluster(self) -> ClusterView:
        """The cluster with every node free and nothing running (its fixed shape)."""
        return ClusterView.empty(
            self._gpu_type,
            self._gpn,
            self._count,
            self._cap_cpu,
            self._cap_mem,
            self._slack,
            self._type_names,
            self._check,
        )

    def views(
        self, state: ClusterState, queued: npt.ArrayLike, running: RunningJobs
    ) -> tuple[QueueView, ClusterView]:
        """Both views of a decision, with the running jobs kept in a ``RunningJobs``."""
        return self.queue_view(queued), self.cluster_view(state, running.jobs, running.group, running.est_end)
