"""Classic queue orders: FCFS, SJF, WFP3, UNICEP and F1.

Formulas follow the literature as the RLTune reference code meant them, with its bugs fixed
(``rltune-reference-notes.md`` section 3): WFP3 and UNICEP use the current wait (the reference used
``-1 - submit``), UNICEP guards ``log2(1) = 0``, F1 uses submit times rebased to the trace start.

Each class holds every form of its policy: ``keys`` (the simulator), ``snapshot_keys`` (the
prioritizer service, from a snapshot's pending columns; ``SnapshotForm``) and, for the
clock-dependent ones, ``compiled_form`` (the compiled core's kind and columns; ``CompiledForm``).
The formula itself is one function per policy (``wfp3_keys``, ...) that both ``keys`` and
``snapshot_keys`` call, so the two cannot drift apart; ``tests/stages/test_snapshot_keys.py``
checks them on the same jobs anyway.
"""

from __future__ import annotations

import numpy as np

from shared.domain.jobs import FloatArray, IntArray
from shared.policies.base import Policy, PolicyContext, nondecreasing_within, waited
from shared.policies.capabilities import (
    CompiledPolicy,
    PendingColumns,
    SnapshotContext,
    float_column,
    int_column,
)
from shared.scheduling.partition import row_classes


class FCFS(Policy):
    """First come, first served: by submit time."""

    name = "fcfs"

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return self.ctx.submit[idx]

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        return float_column(jobs.submit_s, len(jobs))

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not FCFS.keys:
            return None  # a subclass with its own keys makes its own promise
        # submit times never decrease with the index: one class
        return np.zeros(len(self.ctx.submit), dtype=np.int64)


#: SJF keys: whole seconds of the runtime take the bits above these, the GPU count these
SJF_GPU_BITS = 20
#: the largest GPU count SJF tells apart (wider jobs tie with it, then go by arrival)
SJF_MAX_GPUS = 2**SJF_GPU_BITS - 1
#: the largest whole-second runtime SJF tells apart (about 272 years; longer ones tie with it)
SJF_MAX_SECONDS = 2 ** (53 - SJF_GPU_BITS) - 1


def sjf_keys(runtime: FloatArray, gpus: IntArray) -> FloatArray:
    """SJF's keys: ``floor(runtime) x 2^20 + GPUs``, an exact integer in a float64.

    The order is lexicographic: whole seconds first, then fewer GPUs (ties then go to the earlier
    arrival, as for every key). Both parts are clamped, ``floor(runtime)`` to
    ``0 .. SJF_MAX_SECONDS`` (2^33 - 1 s) and GPUs to ``0 .. SJF_MAX_GPUS`` (2^20 - 1), so the key
    is an integer below 2^53 (``SJF_MAX_SECONDS x 2^20 + SJF_MAX_GPUS = 2^53 - 1``), which a
    float64 holds exactly: no rounding ever merges or swaps two keys, and a shorter job always
    precedes a longer one whatever their widths. (The earlier ``floor(runtime) + GPUs / 1000`` let
    a 101 s job on 53 GPUs, 101.053, go before a 100 s job on 1,100, 101.1.) A NaN runtime gives a
    NaN key, as before.
    """
    seconds = np.clip(np.floor(runtime), 0.0, float(SJF_MAX_SECONDS))
    width = np.clip(gpus, 0, SJF_MAX_GPUS).astype(np.float64)
    key: FloatArray = seconds * float(2**SJF_GPU_BITS) + width
    return key


class SJF(Policy):
    """Shortest (estimated) job first; ties (same whole seconds) go to fewer GPUs, then arrival.

    The keys are exact integers (``sjf_keys``): floor(estimate) x 2^20 + GPUs.
    ``oracle=True`` orders by the true runtime (the reference's clairvoyant SJF, ``clairvoyant``:
    no snapshot form, since a snapshot carries only estimates).
    """

    name = "sjf"

    def __init__(self, oracle: bool = False) -> None:
        self.oracle = oracle
        if oracle:
            self.name = "sjf-oracle"
            self.clairvoyant = True

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        jobs = self.ctx.workload.jobs
        runtime = jobs.runtime if self.oracle else self.ctx.estimate
        return sjf_keys(runtime[idx], jobs.gpus[idx])

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        # the estimates: a clairvoyant SJF is refused before (``snapshot_keys.check_policy``)
        n = len(jobs)
        return sjf_keys(float_column(jobs.est_runtime_s, n), int_column(jobs.gpus, n))

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not SJF.keys:
            return None
        # jobs with equal keys: ties go to the earlier arrival
        return row_classes(self.keys(np.arange(len(self.ctx.submit)), 0.0))


def wfp3_keys(wait: FloatArray, est: FloatArray, gpus: IntArray) -> FloatArray:
    """WFP3's keys: -(wait / max(estimate, 1))^3 x max(GPUs, 1).

    The cube is two multiplications, not ``ratio**3``: numpy's power may use a SIMD pow (AVX-512)
    whose last bit differs from other machines' and from compiled code, and the simulator's
    compiled core (``P_WFP3``) must order the queue exactly as this does."""
    ratio = wait / np.maximum(est, 1.0)
    key: FloatArray = -(ratio * ratio * ratio) * np.maximum(gpus, 1)
    return key


def _wait(submit: FloatArray, now: float) -> FloatArray:
    """Seconds each job has waited at ``now`` (as ``base.waited``)."""
    return np.maximum(now - submit, 0.0)


class WFP3(Policy):
    """Priority (wait / estimate)^3 x GPUs: long-waiting, short, wide jobs first."""

    name = "wfp3"
    dynamic = True

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return wfp3_keys(waited(self.ctx, idx, now), self.ctx.estimate[idx], self.ctx.gpus[idx])

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        n = len(jobs)
        wait = _wait(float_column(jobs.submit_s, n), now)
        return wfp3_keys(wait, float_column(jobs.est_runtime_s, n), int_column(jobs.gpus, n))

    def compiled_form(self, lo: int, hi: int) -> CompiledPolicy | str:
        """``P_WFP3``: the kernel computes the keys from the wait and these two columns."""
        if type(self) is not WFP3:
            return f"{type(self).__name__} subclasses WFP3 (the compiled kind computes WFP3's own keys)"
        est, gpus = self.ctx.estimate[lo:hi], self.ctx.gpus[lo:hi]
        return CompiledPolicy("wfp3", {"wfp3_est": np.maximum(est, 1.0), "wfp3_width": np.maximum(gpus, 1)})

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not WFP3.keys:
            return None
        # same estimate and width: the longer wait (earlier arrival) has the smaller key
        return row_classes(np.maximum(self.ctx.estimate, 1.0), np.maximum(self.ctx.gpus, 1))


def unicep_denominator(est: FloatArray, gpus: IntArray) -> FloatArray:
    """UNICEP's per-job divisor, log2(max(GPUs, 1) + 1) x max(estimate, 1) (elementwise: the
    scalar ``key`` and the compiled core take it from here, the same values bit for bit)."""
    width = np.log2(np.maximum(gpus, 1) + 1.0)
    out: FloatArray = width * np.maximum(est, 1.0)
    return out


def unicep_keys(wait: FloatArray, est: FloatArray, gpus: IntArray) -> FloatArray:
    """UNICEP's keys: -wait / (log2(max(GPUs, 1) + 1) x max(estimate, 1))."""
    key: FloatArray = -wait / unicep_denominator(est, gpus)
    return key


class UNICEP(Policy):
    """Priority wait / (log2(GPUs + 1) x estimate): log2(n + 1) keeps 1-GPU jobs finite."""

    name = "unicep"
    dynamic = True

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return unicep_keys(waited(self.ctx, idx, now), self.ctx.estimate[idx], self.ctx.gpus[idx])

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        n = len(jobs)
        wait = _wait(float_column(jobs.submit_s, n), now)
        return unicep_keys(wait, float_column(jobs.est_runtime_s, n), int_column(jobs.gpus, n))

    def compiled_form(self, lo: int, hi: int) -> CompiledPolicy | str:
        """``P_UNICEP``: the kernel divides minus the wait by this column."""
        if type(self) is not UNICEP:
            return f"{type(self).__name__} subclasses UNICEP (the compiled kind computes UNICEP's own keys)"
        denom = unicep_denominator(self.ctx.estimate[lo:hi], self.ctx.gpus[lo:hi])
        return CompiledPolicy("unicep", {"unicep_denom": denom})

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        self._scalar: tuple[list[float], list[float]] | None = None

    def key(self, j: int, now: float) -> float:
        if type(self).keys is not UNICEP.keys:
            return float(self.keys(np.array([j], dtype=np.int64), now)[0])
        if self._scalar is None:
            # per job: submit time, and width x estimate from the same numpy expression as
            # ``keys`` (elementwise, so the values are the same bit for bit)
            ctx = self.ctx
            self._scalar = (ctx.submit.tolist(), unicep_denominator(ctx.estimate, ctx.gpus).tolist())
        submit, denom = self._scalar
        key: float = -max(now - submit[j], 0.0) / denom[j]
        return key

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not UNICEP.keys:
            return None
        # same estimate and width: the longer wait (earlier arrival) has the smaller key
        return row_classes(np.maximum(self.ctx.estimate, 1.0), np.maximum(self.ctx.gpus, 1))


class F1(Policy):
    """Carastan-Santos & de Camargo's F1: log10(estimate) x GPUs + 870 x log10(submit).

    Submit times are seconds since the trace start (floored at 1 s), so the order does not depend
    on the trace's time origin, which the reference's absolute timestamps did.
    """

    name = "f1"

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return f1_keys(self.ctx.estimate[idx], self.ctx.gpus[idx], self.ctx.submit[idx])

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        """Submit times since ``ctx.f1_origin_s`` on the cluster clock (default 0, which is the
        trace start for the simulated adapter, whose clock starts there)."""
        n = len(jobs)
        since = float_column(jobs.submit_s, n) - ctx.f1_origin_s
        return f1_keys(float_column(jobs.est_runtime_s, n), int_column(jobs.gpus, n), since)

    def order_classes(self) -> IntArray | None:
        if type(self).keys is not F1.keys:
            return None
        # same estimate and width: the key grows with the submit time; checked on the keys
        # themselves, since log10 is not guaranteed monotone to the last bit
        classes = row_classes(np.maximum(self.ctx.estimate, 1.0), np.maximum(self.ctx.gpus, 1))
        keys = self.keys(np.arange(len(classes)), 0.0)
        return classes if nondecreasing_within(classes, keys) else None


def f1_keys(est: FloatArray, gpus: IntArray, submit: FloatArray) -> FloatArray:
    """F1's keys: log10(max(estimate, 1)) x max(GPUs, 1) + 870 x log10(max(submit, 1)), submit
    times in seconds since the trace start."""
    key: FloatArray = np.log10(np.maximum(est, 1.0)) * np.maximum(gpus, 1) + 870.0 * np.log10(
        np.maximum(submit, 1.0)
    )
    return key
