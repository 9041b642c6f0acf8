"""The policy interface: queue in, sort keys out (smaller key = starts first).

Why keys and not a comparator: one numpy expression computes the keys of 10,000 queued jobs at
once, and ``np.argsort(kind="stable")`` over a queue kept in arrival order breaks ties by arrival,
which is what every real scheduler does. A learned prioritizer is just another policy whose key is
minus its priority.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from shared.domain.jobs import FloatArray, IntArray
from shared.scheduling.binding import BoundWorkload


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

    The simulator's hooks are capabilities too: ``key(j, now)`` (``ScalarKey``: scalar code for
    one job, the same value bit for bit), ``attach(state, allocs)`` (``WatchesCluster``: the live
    cluster state and running jobs' allocations at the start of a run, read-only),
    ``on_start``/``on_end`` (``TracksJobs``) and ``order_classes()`` (``OrderClasses``: classes
    of jobs the policy always orders by arrival, the promise ``OrderClasses`` states). The simulator
    resolves them once per run (``capabilities.hooks``).
    """

    name: str = "policy"
    #: keys change with the clock (e.g. depend on waiting time): recomputed every cycle
    dynamic: bool = False
    #: keys are whole numbers (e.g. Slurm's integer priorities): the simulator may fold the
    #: arrival tie-break into them
    integer_keys: bool = False
    #: keys read the true runtimes (``sjf-oracle``): a clairvoyant policy for studies, which no
    #: production scheduler can compute (no snapshot carries true runtimes)
    clairvoyant: bool = False
    #: the runtimes ``ctx.estimate`` holds for this policy: ``"estimate"`` (what the scheduler
    #: plans and backfills with) or ``"predicted"`` (the runtime predictor's, the jobs'
    #: ``predicted`` column: ``sjf-pred`` and the like order by them while EASY still reserves
    #: with the estimates, the Helios QSSF idea)
    runtimes: str = "estimate"

    def bind(self, ctx: PolicyContext) -> None:
        self.ctx = ctx if self.runtimes == "estimate" else predicted_context(ctx, self.name)

    @abstractmethod
    def keys(self, idx: IntArray, now: float) -> FloatArray:
        """Sort keys of jobs ``idx`` at time ``now``; smaller starts first."""

    def describe(self) -> str:
        return self.name


class MissingPredictionsError(ValueError):
    """A predictor-based policy bound to jobs without runtime predictions."""


def predicted_context(ctx: PolicyContext, policy: str) -> PolicyContext:
    """``ctx`` with the jobs' predicted runtimes in place of the estimates (``Policy.runtimes``).

    Raises ``MissingPredictionsError`` naming the policy when some job has no prediction: the
    workload must be prepared with them (``shared.prediction.attach_predictions``;
    ``prepare_workload(predictions=True)``), never silently fall back to the estimates."""
    predicted = ctx.workload.jobs.predicted
    missing = int(np.count_nonzero(~np.isfinite(predicted)))
    if missing:
        raise MissingPredictionsError(
            f"policy {policy} orders by predicted runtimes, but {missing} of {len(predicted)} jobs have "
            "none: prepare the workload with runtime predictions (shared.prediction.attach_predictions)"
        )
    return PolicyContext(workload=ctx.workload, estimate=predicted, capacity_gpus=ctx.capacity_gpus)


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
