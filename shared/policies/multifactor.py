"""Slurm's multifactor priority, as Slurm defines it (not the reference code's two-term imitation).

priority = floor( W_age x age + W_size x size + W_fs x fairshare + W_part x partition + W_qos x qos )

- age = min(wait, PriorityMaxAge) / PriorityMaxAge
- size = requested GPUs / cluster GPUs (PriorityFavorSmall=NO), or 1 - that (FavorSmall=YES)
- fairshare (classic): 2^(-U/S), U = the user's decayed GPU-seconds over everyone's, S = the
  user's share (equal shares); usage decays with PriorityDecayHalfLife and running jobs accrue it
  continuously (the closed form of a decaying integral, so the result does not depend on how often
  the scheduler runs)
- partition = PriorityJobFactor of the job's partition / the largest one
- qos = the job's QOS priority / the largest one
Weights are integers, 1,000 each by default, as in the RLTune paper's Slurm setting.

From a snapshot (``snapshot_keys``, the prioritizer service) the fair-share factor needs each
user's decayed usage, which a snapshot does not carry (running jobs have no user): every user gets
the factor of no usage, 1 (as in a simulation before any job ran), so the order comes from age,
size, partition and QOS. Partition and QOS factors are then normalized by the largest value over
the spec's partitions / QOSes and the queue's (Slurm normalizes by the largest configured one); the
size factor by the spec's GPU count.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from shared.domain.cluster import ClusterSpec
from shared.domain.jobs import WHOLE_GPU_MILLI, FloatArray, IntArray
from shared.policies.base import Policy, PolicyContext, waited
from shared.policies.capabilities import (
    CompiledPolicy,
    PendingColumns,
    SnapshotContext,
    SnapshotPolicyError,
    float_column,
)
from shared.scheduling.partition import row_classes


class MultifactorWeights(BaseModel):
    """Slurm priority settings (slurm.conf names in the field descriptions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    age: int = Field(default=1000, ge=0, description="PriorityWeightAge")
    job_size: int = Field(default=1000, ge=0, description="PriorityWeightJobSize")
    fairshare: int = Field(default=1000, ge=0, description="PriorityWeightFairshare")
    partition: int = Field(default=1000, ge=0, description="PriorityWeightPartition")
    qos: int = Field(default=1000, ge=0, description="PriorityWeightQOS")
    max_age_s: float = Field(default=7 * 86400, gt=0, description="PriorityMaxAge")
    decay_half_life_s: float = Field(default=7 * 86400, gt=0, description="PriorityDecayHalfLife")
    favor_small: bool = Field(default=False, description="PriorityFavorSmall")


class SlurmMultifactor(Policy):
    """Slurm multifactor priority with fair-share from decayed GPU usage."""

    name = "multifactor"
    dynamic = True
    integer_keys = True

    def __init__(self, weights: MultifactorWeights | None = None) -> None:
        self.w = weights or MultifactorWeights()
        self._lambda = math.log(2.0) / self.w.decay_half_life_s

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        jobs = ctx.workload.jobs
        spec = ctx.workload.spec
        n_users = max(len(jobs.users), 1)
        self.usage = np.zeros(n_users)  # decayed GPU-seconds per user
        self.running = np.zeros(n_users)  # GPUs each user runs now
        self.share = 1.0 / n_users
        self.last = 0.0
        demand = jobs.gpu_demand
        size = demand / max(ctx.capacity_gpus, 1)
        self.size_factor = 1.0 - size if self.w.favor_small else size
        part = np.array(
            [spec.partitions[v].priority_job_factor if v in spec.partitions else 1 for v in jobs.vcs]
        )
        self.part_factor = (part / max(part.max(), 1))[jobs.vc]
        qos = np.array([spec.qos[q].priority if q in spec.qos else 0 for q in jobs.qoses], dtype=float)
        top = qos.max() if len(qos) else 0.0
        self.qos_factor = (qos / top if top > 0 else np.zeros_like(qos))[jobs.qos]
        self.demand = demand
        self._static: FloatArray | None = None
        self._usage_version = 0  # bumped whenever ``usage`` changes
        self._fs_cache: tuple[int, list[float]] = (-1, [])  # (version, weighted fair-share per user)
        # (usage version, the usage array, fair-share per user)
        self._fs_vec: tuple[int, FloatArray, FloatArray] = (-1, self.usage, np.ones(0))
        self._scalar: tuple[list[float], list[float], list[int]] | None = None

    def _advance(self, now: float) -> None:
        dt = now - self.last
        if dt > 0:
            decay = math.exp(-self._lambda * dt)
            self.usage = self.usage * decay + self.running * (1.0 - decay) / self._lambda
            self.last = now
            self._usage_version += 1

    def on_start(self, j: int, now: float) -> None:
        self._advance(now)
        self.running[self.ctx.workload.jobs.user[j]] += self.demand[j]

    def on_end(self, j: int, now: float) -> None:
        self._advance(now)
        self.running[self.ctx.workload.jobs.user[j]] -= self.demand[j]

    def fairshare(self, users: IntArray) -> FloatArray:
        return self._fairshare_by_user()[users]

    def _fairshare_by_user(self) -> FloatArray:
        """2^(-U/S) of every user (a handful), so a queue of thousands pays one gather.

        The power is the C library's ``pow`` per user (``math.pow``), not ``np.power``: numpy's
        may use a SIMD pow (AVX-512) whose last bit differs from other machines' and from the
        simulator's compiled core, which must compute the same priorities; cached per usage
        version and usage array (``_advance`` replaces the array; nothing edits it in place)."""
        usage = self.usage
        if self._fs_vec[0] == self._usage_version and self._fs_vec[1] is usage:
            return self._fs_vec[2]
        total = usage.sum()
        if total <= 0:
            factor: FloatArray = np.ones(len(usage))
        else:
            factor = np.array(
                [math.pow(2.0, v) for v in (-(usage / total) / self.share).tolist()], dtype=np.float64
            )
        self._fs_vec = (self._usage_version, usage, factor)
        return factor

    def priority(self, idx: IntArray, now: float) -> FloatArray:
        self._advance(now)
        w = self.w
        if self._static is None:
            # the factors that do not move with the clock, weighted once
            self._static = (
                w.job_size * self.size_factor + w.partition * self.part_factor + w.qos * self.qos_factor
            )
        age = np.minimum(waited(self.ctx, idx, now), w.max_age_s) * (w.age / w.max_age_s)
        fs = (w.fairshare * self._fairshare_by_user())[self.ctx.workload.jobs.user[idx]]
        out: FloatArray = np.floor(age + self._static[idx] + fs)
        return out

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return -self.priority(idx, now)

    def key(self, j: int, now: float) -> float:
        """``keys`` of one job in scalar arithmetic: the same operations in the same order as
        ``priority``, with the per-user fair-share factor from the same numpy expression."""
        cls = type(self)
        if cls.keys is not SlurmMultifactor.keys or cls.priority is not SlurmMultifactor.priority:
            return float(self.keys(np.array([j], dtype=np.int64), now)[0])
        self._advance(now)
        w = self.w
        if self._scalar is None:
            if self._static is None:
                self._static = (
                    w.job_size * self.size_factor + w.partition * self.part_factor + w.qos * self.qos_factor
                )
            jobs = self.ctx.workload.jobs
            self._scalar = (self.ctx.submit.tolist(), self._static.tolist(), jobs.user.tolist())
        if self._fs_cache[0] != self._usage_version:
            self._fs_cache = (self._usage_version, (w.fairshare * self._fairshare_by_user()).tolist())
        submit, static, user = self._scalar
        age = min(max(now - submit[j], 0.0), w.max_age_s) * (w.age / w.max_age_s)
        return -float(math.floor(age + static[j] + self._fs_cache[1][user[j]]))

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        """Minus ``snapshot_priority`` under ``ctx.weights`` (else this policy's weights)."""
        if ctx.spec is None:
            raise SnapshotPolicyError("multifactor needs the cluster spec (partitions, QOS, GPU count)")
        return -snapshot_priority(jobs, now, ctx.spec, ctx.weights or self.w)

    def compiled_form(self, lo: int, hi: int) -> CompiledPolicy | str:
        """``P_MULTIFACTOR``: the static factors weighted, each job's GPU demand, and the
        fair-share parameters; the core keeps the decayed usage itself, from no usage."""
        if type(self) is not SlurmMultifactor:
            return (
                f"{type(self).__name__} subclasses SlurmMultifactor "
                "(the compiled kind computes SlurmMultifactor's own keys)"
            )
        if self.last != 0.0 or self.usage.any() or self.running.any():
            return "the multifactor policy has usage from an earlier run"
        wt = self.w
        static = (
            wt.job_size * self.size_factor[lo:hi]
            + wt.partition * self.part_factor[lo:hi]
            + wt.qos * self.qos_factor[lo:hi]
        )
        fairshare = {
            "last": self.last,
            "lam": self._lambda,
            "share": self.share,
            "w_fairshare": float(wt.fairshare),
            "age_per_s": wt.age / wt.max_age_s,
            "max_age": wt.max_age_s,
            "two": 2.0,
        }
        return CompiledPolicy(
            "multifactor",
            {"mf_static": static, "mf_demand": self.demand[lo:hi]},
            fairshare,
            n_users=len(self.usage),
        )

    def order_classes(self) -> IntArray | None:
        cls = type(self)
        if cls.keys is not SlurmMultifactor.keys or cls.priority is not SlurmMultifactor.priority:
            return None  # a subclass with its own keys makes its own promise
        # same static factors and user (so the same fair-share factor): the priority only grows
        # with the wait, so the earlier arrival never has the smaller priority
        w = self.w
        static = w.job_size * self.size_factor + w.partition * self.part_factor + w.qos * self.qos_factor
        return row_classes(static, self.ctx.workload.jobs.user)


def snapshot_priority(
    jobs: PendingColumns,
    now: float,
    spec: ClusterSpec,
    w: MultifactorWeights,
    submit: FloatArray | None = None,
) -> FloatArray:
    """Slurm's integer multifactor priority of a snapshot's pending jobs, with the fair-share
    factor of no usage (module docstring)."""
    n = len(jobs)
    if submit is None:
        submit = float_column(jobs.submit_s, n)
    demand = float_column(jobs.gpus, n) * np.array(jobs.gpu_milli).reshape(n) / WHOLE_GPU_MILLI
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
