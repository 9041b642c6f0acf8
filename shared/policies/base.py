"""The policy interface: queue in, sort keys out (smaller key = starts first).

Why keys and not a comparator: one numpy expression computes the keys of 10,000 queued jobs at
once, and ``np.argsort(kind="stable")`` over a queue kept in arrival order breaks ties by arrival,
which is what every real scheduler does. A learned prioritizer is just another policy whose key is
minus its priority.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from shared.domain.jobs import FloatArray, IntArray
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc, ClusterState


@dataclass
class PolicyContext:
    """What a policy may look at: the bound workload and the runtimes the scheduler believes.

    ``estimate`` is what the scheduler knows of each job's runtime (user estimates or an estimate
    model; the true runtime only when the oracle is configured). Policies never see ``runtime``
    unless they are explicitly configured as clairvoyant.
    """

    workload: BoundWorkload
    estimate: FloatArray
    capacity_gpus: int

    @property
    def submit(self) -> FloatArray:
        return self.workload.jobs.submit

    @property
    def gpus(self) -> IntArray:
        return self.workload.jobs.gpus


class Policy(ABC):
    """A scheduling policy: ``keys`` is the one method it must write.

    What else it can do is optional and declared by writing the methods of a capability protocol
    (``shared.policies.capabilities``): ``snapshot_keys`` (``SnapshotForm``, the prioritizer
    service's keys from a snapshot), ``compiled_form`` (``CompiledForm``, the compiled core's
    kind and columns), ``external_hints``/``external_changed`` (``ExternalCompiled``). Callers
    check them with ``isinstance``; a policy with neither form still runs everywhere the Python
    loop does.

    The simulator's hooks ``key``, ``attach``, ``on_start``/``on_end`` and ``order_classes`` are
    protocols too (``ScalarKey``, ``WatchesCluster``, ``TracksJobs``, ``OrderClasses``), but keep
    no-op defaults here: the Python loop's hot paths (``shared.sim.run_state``, ``class_heads``,
    ``applied``) call them on every policy without a check, ``key`` per job of a cycle, and they
    move to hooks resolved once per run in their own change.
    """

    name: str = "policy"
    #: keys change with the clock (e.g. depend on waiting time): recomputed every cycle
    dynamic: bool = False
    #: wants ``on_start``/``on_end`` calls (e.g. fair-share usage)
    tracks_jobs: bool = False
    #: keys are whole numbers (e.g. Slurm's integer priorities): the simulator may fold the
    #: arrival tie-break into them
    integer_keys: bool = False
    #: keys read the true runtimes (``sjf-oracle``): a clairvoyant policy for studies, which no
    #: production scheduler can compute (no snapshot carries true runtimes)
    clairvoyant: bool = False

    def bind(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def keys(self, idx: IntArray, now: float) -> FloatArray:
        """Sort keys of jobs ``idx`` at time ``now``; smaller starts first."""

    def key(self, j: int, now: float) -> float:
        """``keys`` of one job. The simulator asks this for the next job of a class while a
        cycle runs; a policy whose keys are plain arithmetic overrides it with scalar code that
        gives the same value bit for bit (a one-element numpy call costs more than the visit)."""
        return float(self.keys(np.array([j], dtype=np.int64), now)[0])

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:  # noqa: B027
        """Called once at the start of a run with the simulator's live cluster state and the live
        map of running jobs to their allocations (read-only). A learned prioritizer builds its
        observation (free resources, running jobs) from these at each ``keys`` call; base policies
        ignore them."""

    def on_start(self, j: int, now: float) -> None:  # noqa: B027 - optional hook
        """Job ``j`` started at ``now``."""

    def on_end(self, j: int, now: float) -> None:  # noqa: B027 - optional hook
        """Job ``j`` ended at ``now``."""

    def describe(self) -> str:
        return self.name

    def order_classes(self) -> IntArray | None:
        """Classes of jobs that this policy always orders by arrival, or None (no such promise).

        The promise, for every class: at any time, the key of a job (``keys``) is non-decreasing in
        its index among the jobs of its class (jobs arrive in index order, ties go to the earlier
        arrival), and keys depend only on the job and the time (calling ``keys`` again at the same
        time gives the same values, with no side effect beyond the clock). The simulator then
        needs, per class, only the first queued job: with a long queue it orders a few hundred
        class heads instead of every queued job, and it may skip ``keys`` where a cycle would try
        a lone job. The base policies return None for a subclass that overrides ``keys`` (it
        must make its own promise). Called after ``bind``.
        """
        return None


def nondecreasing_within(classes: IntArray, keys: FloatArray) -> bool:
    """Whether ``keys`` never decrease with the job index inside each class (a static policy's
    order-class promise, checked instead of trusted)."""
    if len(keys) < 2:
        return True
    order = np.lexsort((np.arange(len(keys)), classes))
    same = classes[order][1:] == classes[order][:-1]
    return bool(np.all(np.diff(keys[order])[same] >= 0))


def waited(ctx: PolicyContext, idx: IntArray, now: float) -> FloatArray:
    """Seconds each job has waited so far (never negative)."""
    return np.maximum(now - ctx.submit[idx], 0.0)
