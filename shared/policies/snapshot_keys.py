"""Base-policy keys and priorities for the pending jobs of a snapshot (production, no simulator).

Why a second implementation next to ``shared.policies``: the simulator's policies read a bound
workload (``PolicyContext``) and, for multifactor, usage accumulated over the simulation; the
prioritizer service only has a ``QueueSnapshot``. The formulas are the same (``classic.py``,
``multifactor.py``); ``tests/stages`` checks them against the simulator's policies on the same jobs.
What a snapshot cannot provide:

- ``sjf-oracle`` needs true runtimes: refused.
- ``f1`` uses submit times since the trace start; here since ``f1_origin_s`` on the cluster clock
  (default 0, which is the trace start for the simulated adapter, whose clock starts there).
- ``multifactor``'s fair-share factor needs each user's decayed usage, which a snapshot does not
  carry (running jobs have no user): every user gets the factor of no usage, 1 (as in a simulation
  before any job ran), so the order comes from age, size, partition and QOS. Partition and QOS
  factors are normalized by the largest value over the spec's partitions / QOSes and the queue's
  (Slurm normalizes by the largest configured one); the size factor by the spec's GPU count.

Keys follow ``Policy.keys``: smaller starts first. ``priorities_from_keys`` turns them into
integer priorities, higher first: the job first in (key, submit time, position) order gets Q, the
last 1, so ties are broken by submit time, then by the order of the input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI as WHOLE
from shared.policies.classic import sjf_keys
from shared.policies.multifactor import MultifactorWeights

__all__ = [
    "SNAPSHOT_POLICIES",
    "SnapshotPolicyError",
    "base_order",
    "check_policy",
    "multifactor_priority",
    "priorities_from_keys",
    "snapshot_keys",
]

FloatArray = npt.NDArray[np.float64]


class PendingColumns(Protocol):
    """The pending jobs' columns that base-policy keys read: what ``shared.schemas.snapshot.PendingJobs``
    holds. Why a protocol and not that class: policies sit below the messages in Hylo's layers
    (``tests/test_layers.py``), so they name what they read, and a snapshot's jobs fit it."""

    @property
    def submit_s(self) -> Sequence[float]: ...
    @property
    def est_runtime_s(self) -> Sequence[float]: ...
    @property
    def gpus(self) -> Sequence[int]: ...
    @property
    def gpu_milli(self) -> Sequence[int]: ...
    @property
    def partition(self) -> Sequence[str]: ...
    @property
    def qos(self) -> Sequence[str]: ...
    def __len__(self) -> int: ...


#: base policies computable from a snapshot (``multifactor`` needs the cluster spec)
SNAPSHOT_POLICIES: tuple[str, ...] = ("fcfs", "sjf", "wfp3", "unicep", "f1", "multifactor")


class SnapshotPolicyError(ValueError):
    """A policy that cannot be computed from a snapshot (or an unknown one)."""


def check_policy(name: str) -> None:
    """Raise ``SnapshotPolicyError`` unless base policy ``name`` can be computed from a snapshot."""
    if name == "sjf-oracle":
        raise SnapshotPolicyError("sjf-oracle needs true runtimes, which a snapshot does not carry")
    if name not in SNAPSHOT_POLICIES:
        raise SnapshotPolicyError(
            f"unknown base policy {name!r}; from a snapshot: {', '.join(SNAPSHOT_POLICIES)}"
        )


def snapshot_keys(
    policy: str,
    jobs: PendingColumns,
    now: float,
    spec: ClusterSpec | None = None,
    *,
    weights: MultifactorWeights | None = None,
    f1_origin_s: float = 0.0,
) -> FloatArray:
    """Sort keys (smaller first) of ``jobs`` under base policy ``policy`` at time ``now``."""
    check_policy(policy)
    n = len(jobs)
    submit = np.array(jobs.submit_s, dtype=np.float64).reshape(n)
    if policy == "fcfs":
        return submit
    est = np.array(jobs.est_runtime_s, dtype=np.float64).reshape(n)
    gpus = np.array(jobs.gpus, dtype=np.int64).reshape(n)
    if policy == "sjf":
        return sjf_keys(est, gpus)  # as ``SJF.keys``: exact integers, seconds then GPUs
    wait = np.maximum(now - submit, 0.0)
    est1 = np.maximum(est, 1.0)
    wide = np.maximum(gpus, 1)
    if policy == "wfp3":
        ratio = wait / est1
        return -(ratio * ratio * ratio) * wide  # as ``WFP3.keys`` (no SIMD pow)
    if policy == "unicep":
        key: FloatArray = -wait / (np.log2(wide + 1.0) * est1)
        return key
    if policy == "f1":
        sub = np.maximum(submit - f1_origin_s, 1.0)
        return np.log10(est1) * wide + 870.0 * np.log10(sub)
    # multifactor
    if spec is None:
        raise SnapshotPolicyError("multifactor needs the cluster spec (partitions, QOS, GPU count)")
    return -multifactor_priority(jobs, now, spec, weights or MultifactorWeights(), submit=submit)


def multifactor_priority(
    jobs: PendingColumns,
    now: float,
    spec: ClusterSpec,
    w: MultifactorWeights,
    submit: FloatArray | None = None,
) -> FloatArray:
    """Slurm's integer multifactor priority with the fair-share factor of no usage (module docstring)."""
    n = len(jobs)
    if submit is None:
        submit = np.array(jobs.submit_s, dtype=np.float64).reshape(n)
    demand = np.array(jobs.gpus, dtype=np.float64).reshape(n) * np.array(jobs.gpu_milli).reshape(n) / WHOLE
    size = demand / max(spec.total_gpus, 1)
    size_factor = 1.0 - size if w.favor_small else size
    part_of = {p: v.priority_job_factor for p, v in spec.partitions.items()}
    part = np.fromiter((part_of.get(p, 1) for p in jobs.partition), dtype=np.float64, count=n)
    part_top = max([*part_of.values(), *(part.tolist() or [1.0]), 1])
    qos_of = {q: v.priority for q, v in spec.qos.items()}
    qos = np.fromiter((qos_of.get(q, 0) for q in jobs.qos), dtype=np.float64, count=n)
    qos_top = max([*qos_of.values(), *(qos.tolist() or [0.0])])
    qos_factor = qos / qos_top if qos_top > 0 else np.zeros(n)
    age = np.minimum(np.maximum(now - submit, 0.0), w.max_age_s) * (w.age / w.max_age_s)
    static = w.job_size * size_factor + w.partition * (part / part_top) + w.qos * qos_factor
    fairshare = float(w.fairshare) * 1.0  # 2^(-0 / share): no usage known
    out: FloatArray = np.floor(age + static + fairshare)
    return out


def base_order(keys: FloatArray, submit: FloatArray) -> npt.NDArray[np.int64]:
    """Positions in base order: key ascending, ties by submit time, then position."""
    return np.lexsort((np.arange(len(keys)), submit, keys)).astype(np.int64)


def priorities_from_keys(keys: FloatArray, submit: FloatArray) -> FloatArray:
    """Integer priorities (higher first) from keys: Q for the first in base order, ..., 1 for the last."""
    order = base_order(keys, submit)
    prio = np.empty(len(keys), dtype=np.float64)
    prio[order] = np.arange(len(keys), 0, -1, dtype=np.float64)
    return prio
