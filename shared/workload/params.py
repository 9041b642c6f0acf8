"""Every parameter of the synthetic workload generator, with defaults measured on public traces.

Why one pydantic model: a generated workload is only reproducible if the seed *and* every knob are
known, so the generator takes exactly one validated, frozen object, which can be dumped to JSON
next to a result (``GeneratorParams.fingerprint`` hashes it into the workload's ``TraceMeta``).

Sources of the defaults (re-measure them with ``python -m shared.workload.calibrate``):

- Philly = ``philly/pollux_philly.csv`` (82,247 jobs, 2017). Arrival statistics are taken over its
  *active window*, the longest run of days with >= 100 submissions (days 20-99, 80,702 jobs): the
  first 20 days hold a handful of jobs and a 3-day outage follows day 100, and both would otherwise
  dominate every inter-arrival statistic. GPU counts and durations use all jobs.
- openb = ``alibaba/openb_pod_list_gpuspec33.csv`` (Alibaba 2023), the 6,203 GPU pods that ran
  (the loader drops 897 never-scheduled pods and the CPU-only ones are not GPU jobs).
- HPC2N = ``swf/HPC2N-2002-2.2-cln.swf.gz``: neither GPU trace has user runtime estimates, so the
  over-estimation model is fitted on this HPC log's requested times (202,871 jobs, 257 users).
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOUR = 3600.0
DAY = 86400.0


class LogNormalComponent(BaseModel):
    """One lognormal bump of a duration mixture: ``weight`` (relative), median (s), log-sd."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(gt=0)
    median_s: float = Field(gt=0)
    sigma: float = Field(ge=0)


class DurationClass(BaseModel):
    """Runtime law of jobs with ``gpus >= min_gpus`` (up to the next class's ``min_gpus``).

    Why classes: in Philly a 1-GPU job runs 1,117 s at the median, a 2-GPU job 21 s (a flood of
    short test runs) and a 4-64-GPU job 20,991 s; one law for all would put the long runs on the
    wrong jobs and get the offered load (GPUs x runtime) wrong by a factor of two.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gpus: int = Field(ge=1)
    components: tuple[LogNormalComponent, ...] = Field(min_length=1)


class WeightedTypeSet(BaseModel):
    """An allowed-GPU-type set and its relative frequency; ``types == ()`` means any type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    types: tuple[str, ...]
    weight: float = Field(gt=0)


class RequestShape(BaseModel):
    """A CPU (milli-cores) and memory (MiB) request and its relative frequency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus_milli: int = Field(gt=0)
    mem_mib: int = Field(gt=0)
    weight: float = Field(gt=0)


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _clipped_lognormal_mean(median: float, sigma: float, lo: float, hi: float) -> float:
    """E[clip(X, lo, hi)] for X lognormal: what the generator's clipped runtimes average to."""
    mu = math.log(median)
    if sigma == 0.0:
        return min(max(median, lo), hi)
    a, b = math.log(lo), math.log(hi)
    p_lo = _normal_cdf((a - mu) / sigma)
    p_hi = 1.0 - _normal_cdf((b - mu) / sigma)
    body = math.exp(mu + sigma * sigma / 2.0) * (
        _normal_cdf((b - mu - sigma * sigma) / sigma) - _normal_cdf((a - mu - sigma * sigma) / sigma)
    )
    return lo * p_lo + body + hi * p_hi


def _lognormal_cdf(x: float, median: float, sigma: float) -> float:
    if sigma == 0.0:
        return 1.0 if x >= median else 0.0
    return _normal_cdf((math.log(x) - math.log(median)) / sigma)


# fmt: off
# Wall-time values users pick (Slurm/PBS habits): 5, 10, 15, 30 min, 1, 2, 4, 8, 12, 24, 48, 72 h.
DEFAULT_LADDER_S: tuple[float, ...] = (
    300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 43200.0, 86400.0, 172800.0, 259200.0,
)
# fmt: on


# fmt: off
# openb whole 1-GPU pods that ran: the 12 most frequent (cpu_milli, mem_mib, pods), 81.8% of pods
OPENB_SINGLE_GPU_SHAPES: tuple[tuple[int, int, int], ...] = (
    (11300, 49152, 801), (11400, 48128, 492), (3152, 5600, 463), (18708, 64512, 207),
    (9810, 41560, 159), (12000, 24576, 155), (15700, 58368, 136), (16000, 32768, 108),
    (4000, 24576, 104), (8000, 16384, 102), (12000, 16384, 99), (24200, 93184, 83),
)
# openb 2-8-GPU pods that ran: all 12 (cpu_milli, mem_mib) per GPU, with pods
OPENB_MULTI_GPU_SHAPES: tuple[tuple[int, int, int], ...] = (
    (11000, 40960, 18), (8025, 32896, 18), (8050, 33024, 9), (8100, 33280, 6), (8000, 32768, 6),
    (15000, 92160, 3), (3000, 32768, 3), (15100, 80384, 3), (15050, 80128, 3), (8700, 21504, 2),
    (15025, 80000, 2), (7000, 30000, 1),
)
# openb fractional pods that ran: the 12 most frequent (cpu_milli, mem_mib, pods), 98.7% of pods
OPENB_FRACTIONAL_SHAPES: tuple[tuple[int, int, int], ...] = (
    (3152, 5600, 1050), (11908, 47104, 457), (8000, 30517, 311), (4000, 15258, 159),
    (4000, 22888, 157), (4152, 10600, 149), (4000, 30517, 106), (6000, 6144, 51),
    (6000, 12288, 29), (6000, 22888, 27), (1000, 2048, 26), (6000, 18432, 18),
)
# fmt: on


def _shapes(rows: tuple[tuple[int, int, int], ...]) -> tuple[RequestShape, ...]:
    return tuple(RequestShape(cpus_milli=c, mem_mib=m, weight=float(w)) for c, m, w in rows)


class GeneratorParams(BaseModel):
    """All knobs of ``generate_workload``; each default's comment names the trace it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # ---- arrivals: diurnal x weekly x two-state Markov-modulated Poisson, in batches -------------
    mean_interarrival_s: float = Field(
        default=85.55,  # Philly active window: 80,702 jobs over 80 days
        gt=0,
        description="mean seconds between jobs; used when target_load is None",
    )
    target_load: float | None = Field(
        default=0.85,  # the embedded preset's design point (0.80-0.90)
        gt=0,
        description="if set, the arrival rate is scaled so that the expected offered load "
        "sum(gpu demand x runtime) / (capacity x span) equals this on target_capacity_gpus",
    )
    target_capacity_gpus: float = Field(
        default=320.0,  # GPUs of shared/presets/embedded.toml
        gt=0,
        description="GPU capacity that target_load refers to",
    )
    diurnal_amplitude: float = Field(
        default=0.283,  # Philly window: first Fourier harmonic of the hour-of-day submit profile
        ge=0,
        lt=1,
        description="rate x (1 + a cos(2 pi (hour - peak) / 24))",
    )
    diurnal_peak_hour: float = Field(
        default=4.55,  # Philly, UTC clock of its timestamps (the hour only matters relative to t=0)
        ge=0,
        lt=24,
    )
    weekend_factor: float = Field(
        default=0.525,  # Philly window: jobs per weekend day / per weekday (about 615 / 1,177)
        gt=0,
        description="rate on Saturday and Sunday relative to a weekday",
    )
    burst_multiplier: float = Field(
        default=24.0,  # Philly: grid search (calibrate --fit-arrivals) on the burstiness statistics
        ge=1,
        description="arrival rate inside a burst episode relative to outside",
    )
    burst_mean_duration_s: float = Field(
        default=0.75 * HOUR,  # Philly: same grid search (burst runs of 1.87 h at hour resolution)
        gt=0,
        description="mean length of a burst episode (exponential)",
    )
    burst_mean_gap_s: float = Field(
        default=7.0 * HOUR,  # Philly: same grid search (17% of hours are burst hours)
        gt=0,
        description="mean time between burst episodes (exponential)",
    )
    batch_continue_prob: float = Field(
        default=0.05,  # Philly: same grid search (8.1% of inter-arrivals are 0 s, bursts give ~40% of them)
        ge=0,
        lt=1,
        description="each job of an arrival brings one more job at the same second with this "
        "probability (geometric batches: hyper-parameter sweeps submitted by a script)",
    )

    # ---- GPU count and fractional GPUs ------------------------------------------------------------
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)  # Philly's counts, powers of two up to 64
    gpu_count_weights: tuple[float, ...] = Field(
        # Philly job counts; its 7 x 12, 7 x 24 and 3 x 128 GPU jobs are folded up to 16, 32 and 64.
        default=(76627.0, 1818.0, 1870.0, 1643.0, 206.0, 74.0, 9.0),
    )
    fractional_fraction: float = Field(
        default=0.4148,  # openb: 2,573 of the 6,203 GPU pods that ran ask for < 1000 milli-GPU
        ge=0,
        le=1,
        description="fraction of all jobs that use a share of one GPU (drawn among 1-GPU jobs)",
    )
    fractional_shares: tuple[int, ...] = (  # openb: every gpu_milli value < 1000 among pods that ran
        50, 110, 140, 160, 220, 230, 270, 290, 320, 330, 350, 370, 440, 460, 470, 480, 550, 590, 650, 810,
    )  # fmt: skip
    fractional_share_weights: tuple[float, ...] = (
        # openb: pods per gpu_milli value among fractional pods
        7.0, 18.0, 1.0, 70.0, 60.0, 94.0, 4.0, 1.0, 288.0, 7.0, 5.0, 46.0, 2.0, 128.0, 455.0, 19.0,
        71.0, 62.0, 218.0, 1017.0,
    )  # fmt: skip

    # ---- runtimes ---------------------------------------------------------------------------------
    duration_classes: tuple[DurationClass, ...] = Field(
        # Philly durations, one lognormal mixture per GPU class fitted by EM on log seconds
        default=(
            DurationClass(
                min_gpus=1,
                components=(
                    LogNormalComponent(weight=0.175, median_s=65.0, sigma=0.16),
                    LogNormalComponent(weight=0.144, median_s=163.0, sigma=0.98),
                    LogNormalComponent(weight=0.399, median_s=1956.0, sigma=0.74),
                    LogNormalComponent(weight=0.282, median_s=2735.0, sigma=2.16),
                ),
            ),
            DurationClass(
                min_gpus=2,
                components=(
                    LogNormalComponent(weight=0.644, median_s=18.0, sigma=0.34),
                    LogNormalComponent(weight=0.184, median_s=44.0, sigma=1.45),
                    LogNormalComponent(weight=0.172, median_s=88981.0, sigma=1.24),
                ),
            ),
            DurationClass(
                min_gpus=4,
                components=(
                    LogNormalComponent(weight=0.330, median_s=352.0, sigma=1.51),
                    LogNormalComponent(weight=0.218, median_s=12622.0, sigma=0.82),
                    LogNormalComponent(weight=0.453, median_s=133276.0, sigma=0.96),
                ),
            ),
        ),
    )
    max_runtime_s: float = Field(
        default=72 * HOUR,  # the wall-time limit = top of the estimate ladder; 0.98% of Philly is longer
        ge=1,
        description="runtimes are clipped here, as a scheduler kills jobs at the wall-time limit",
    )

    # ---- user runtime estimates -------------------------------------------------------------------
    estimate_ladder_s: tuple[float, ...] = DEFAULT_LADDER_S  # common wall-time requests, 5 min .. 72 h
    estimate_exact_fraction: float = Field(
        default=0.75,  # HPC2N (jobs >= 60 s): fitted so that the request / runtime deciles match
        ge=0,
        le=1,
        description="fraction of jobs whose estimate is the first ladder value >= runtime (factor 1)",
    )
    estimate_factor_sigma: float = Field(
        default=6.0,  # HPC2N, same fit (an interior optimum: the error rises again above 6)
        ge=0,
        description="the other jobs over-estimate by exp(sigma |Z|), Z standard normal, before rounding",
    )
    max_request_user_fraction: float = Field(
        default=0.072,  # HPC2N: 17 of 235 users (>= 10 jobs) ask their own maximum in >= 90% of jobs
        ge=0,
        le=1,
        description="fraction of users who always request the ladder's maximum",
    )

    # ---- GPU-type constraints ---------------------------------------------------------------------
    type_sets_whole: tuple[WeightedTypeSet, ...] = Field(
        # openb whole-GPU pods (1-8 GPUs) that ran: pods per gpu_spec, () = no constraint
        default=(
            WeightedTypeSet(types=(), weight=2271.0),
            WeightedTypeSet(types=("T4",), weight=634.0),
            WeightedTypeSet(types=("G2",), weight=300.0),
            WeightedTypeSet(types=("V100M16", "V100M32"), weight=147.0),
            WeightedTypeSet(types=("P100", "V100M16", "V100M32"), weight=94.0),
            WeightedTypeSet(types=("G3",), weight=77.0),
            WeightedTypeSet(types=("P100", "T4", "V100M16", "V100M32"), weight=30.0),
            WeightedTypeSet(types=("G2", "P100", "T4", "V100M16", "V100M32"), weight=24.0),
            WeightedTypeSet(types=("A10", "G2", "T4", "V100M16", "V100M32"), weight=19.0),
            WeightedTypeSet(types=("V100M32",), weight=15.0),
            WeightedTypeSet(types=("A10", "T4"), weight=6.0),
            WeightedTypeSet(types=("P100", "V100M16"), weight=4.0),
            WeightedTypeSet(types=("A10", "G2", "P100", "T4", "V100M16", "V100M32"), weight=3.0),
            WeightedTypeSet(types=("T4", "V100M16", "V100M32"), weight=3.0),
            WeightedTypeSet(types=("V100M16",), weight=3.0),
        ),
    )
    type_sets_fractional: tuple[WeightedTypeSet, ...] = Field(
        # openb fractional pods that ran: pods per gpu_spec
        default=(
            WeightedTypeSet(types=(), weight=1840.0),
            WeightedTypeSet(types=("T4",), weight=498.0),
            WeightedTypeSet(types=("P100",), weight=223.0),
            WeightedTypeSet(types=("G2", "P100", "T4", "V100M16", "V100M32"), weight=12.0),
        ),
    )
    max_constrained_gpus: int = Field(
        default=8,  # openb's largest pod asks for 8 GPUs: larger jobs have no measured constraint
        ge=1,
        description="jobs with more GPUs than this are never type-constrained",
    )
    unmatched_types: Literal["redraw", "drop"] = Field(
        default="redraw",  # a modelling choice: keeps openb's constrained fraction on any cluster
        description="a set naming none of the target cluster's types is replaced by a random set of "
        "the same size from the cluster's types (redraw, keeps the constrained fraction) or dropped",
    )

    # ---- CPU and memory ---------------------------------------------------------------------------
    single_gpu_requests: tuple[RequestShape, ...] = Field(
        # openb whole 1-GPU pods that ran: the 12 most frequent (cpu_milli, memory_mib), 81.8% of pods
        default=_shapes(OPENB_SINGLE_GPU_SHAPES),
    )
    multi_gpu_requests: tuple[RequestShape, ...] = Field(
        # openb 2-8-GPU pods that ran: all 12 distinct (cpu_milli, memory_mib) per GPU
        default=_shapes(OPENB_MULTI_GPU_SHAPES),
    )
    fractional_requests: tuple[RequestShape, ...] = Field(
        # openb fractional pods that ran: the 12 most frequent (cpu_milli, memory_mib), 98.7% of pods
        default=_shapes(OPENB_FRACTIONAL_SHAPES),
    )
    multi_gpu_cpus_per_gpu_cap_milli: int = Field(
        default=12000,  # openb 8-GPU nodes have 96 cores: a job asking more per GPU cannot fill a node
        gt=0,
    )
    multi_gpu_mem_per_gpu_cap_mib: int = Field(
        default=49152,  # 384 GiB per 8 GPUs (openb's T4 and G2 nodes; embedded V100M16 nodes)
        gt=0,
    )

    # ---- users and virtual clusters ---------------------------------------------------------------
    n_users: int = Field(default=257, ge=1)  # HPC2N: 257 users (the GPU traces have no user column)
    user_zipf_s: float = Field(default=1.085, ge=0)  # HPC2N: MLE of the Zipf exponent of jobs per user
    n_vcs: int = Field(default=15, ge=1)  # Philly: 15 virtual clusters
    vc_zipf_s: float = Field(default=1.747, ge=0)  # Philly: MLE of the Zipf exponent of jobs per VC

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorParams:
        if len(self.gpu_counts) != len(self.gpu_count_weights) or not self.gpu_counts:
            raise ValueError("gpu_counts and gpu_count_weights must be non-empty and of equal length")
        if min(self.gpu_counts) < 1 or min(self.gpu_count_weights) < 0 or sum(self.gpu_count_weights) <= 0:
            raise ValueError("gpu_counts must be >= 1 and their weights >= 0 with a positive sum")
        if len(self.fractional_shares) != len(self.fractional_share_weights) or not self.fractional_shares:
            raise ValueError("fractional_shares and fractional_share_weights must match in length")
        if not all(0 < s < 1000 for s in self.fractional_shares):
            raise ValueError("fractional_shares must lie in 1..999 milli-GPU")
        if min(self.fractional_share_weights) < 0 or sum(self.fractional_share_weights) <= 0:
            raise ValueError("fractional_share_weights must be >= 0 with a positive sum")
        if self.fractional_fraction > 0 and 1 not in self.gpu_counts:
            raise ValueError("fractional jobs need gpu_counts to include 1")
        mins = [c.min_gpus for c in self.duration_classes]
        if not mins or mins[0] != 1 or mins != sorted(set(mins)):
            raise ValueError("duration_classes must start at min_gpus=1, strictly increasing")
        ladder = self.estimate_ladder_s
        if not ladder or list(ladder) != sorted(set(ladder)):
            raise ValueError("estimate_ladder_s must be non-empty and strictly increasing")
        if self.max_runtime_s > ladder[-1]:
            raise ValueError(
                "max_runtime_s must not exceed the top of estimate_ladder_s (estimate >= runtime)"
            )
        for name in ("type_sets_whole", "type_sets_fractional"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for name in ("single_gpu_requests", "multi_gpu_requests", "fractional_requests"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        return self

    # ---- derived quantities (used by the generator and the tests) ---------------------------------

    @property
    def gpu_count_probs(self) -> tuple[float, ...]:
        total = sum(self.gpu_count_weights)
        return tuple(w / total for w in self.gpu_count_weights)

    @property
    def fractional_given_single(self) -> float:
        """P(fractional | 1 GPU): ``fractional_fraction`` is over all jobs, only 1-GPU jobs may share."""
        p1 = sum(p for g, p in zip(self.gpu_counts, self.gpu_count_probs, strict=True) if g == 1)
        return min(1.0, self.fractional_fraction / p1) if p1 > 0 else 0.0

    @property
    def mean_fractional_share(self) -> float:
        total = sum(self.fractional_share_weights)
        shares = zip(self.fractional_shares, self.fractional_share_weights, strict=True)
        return sum(s * w for s, w in shares) / total / 1000.0

    @property
    def type_universe(self) -> tuple[str, ...]:
        """Every GPU type named by the type-set tables: the target when no cluster is given."""
        names = {t for ws in (*self.type_sets_whole, *self.type_sets_fractional) for t in ws.types}
        return tuple(sorted(names))

    def duration_class_index(self, gpus: int) -> int:
        """Index of the duration class that governs a job with ``gpus`` GPUs."""
        k = 0
        for i, c in enumerate(self.duration_classes):
            if gpus >= c.min_gpus:
                k = i
        return k

    def mean_runtime(self, gpus: int) -> float:
        """Expected runtime (s) of a job with ``gpus`` GPUs, after clipping to [1, max_runtime_s]."""
        cls = self.duration_classes[self.duration_class_index(gpus)]
        total = sum(c.weight for c in cls.components)
        return sum(
            c.weight / total * _clipped_lognormal_mean(c.median_s, c.sigma, 1.0, self.max_runtime_s)
            for c in cls.components
        )

    def runtime_cdf(self, x: float, gpus: int | None = None) -> float:
        """P(runtime <= x) for a job of ``gpus`` GPUs, or over the whole GPU-count mix if None."""
        if x < 1.0:
            return 0.0
        if x >= self.max_runtime_s:
            return 1.0
        if gpus is not None:
            cls = self.duration_classes[self.duration_class_index(gpus)]
            total = sum(c.weight for c in cls.components)
            return sum(c.weight / total * _lognormal_cdf(x, c.median_s, c.sigma) for c in cls.components)
        mix = zip(self.gpu_counts, self.gpu_count_probs, strict=True)
        return sum(p * self.runtime_cdf(x, g) for g, p in mix)

    def runtime_quantile(self, q: float, gpus: int | None = None) -> float:
        """Inverse of ``runtime_cdf`` by bisection on log seconds (the mixture has no closed form)."""
        lo, hi = 0.0, math.log(self.max_runtime_s)
        for _ in range(100):
            mid = (lo + hi) / 2.0
            if self.runtime_cdf(math.exp(mid), gpus) < q:
                lo = mid
            else:
                hi = mid
        return math.exp(hi)

    def expected_gpu_seconds_per_job(self) -> float:
        """E[gpu demand x runtime] per job, fractional shares counted as their fraction."""
        f = self.fractional_given_single
        total = 0.0
        for g, p in zip(self.gpu_counts, self.gpu_count_probs, strict=True):
            demand = g if g != 1 else (1.0 - f) + f * self.mean_fractional_share
            total += p * demand * self.mean_runtime(g)
        return total

    def mean_arrival_rate(self) -> float:
        """Jobs per second averaged over diurnal, weekly and burst modulation."""
        if self.target_load is None:
            return 1.0 / self.mean_interarrival_s
        return self.target_load * self.target_capacity_gpus / self.expected_gpu_seconds_per_job()

    def for_capacity(self, gpus: float, load: float | None = None) -> GeneratorParams:
        """A copy whose arrival rate targets ``load`` (default: this ``target_load``) on ``gpus`` GPUs."""
        target = load if load is not None else self.target_load
        if target is None:
            raise ValueError("no target load: pass load= or set target_load")
        return self.replace(target_capacity_gpus=float(gpus), target_load=float(target))

    def replace(self, **changes: object) -> GeneratorParams:
        """A validated copy with some parameters changed (``model_copy`` would skip validation)."""
        return GeneratorParams.model_validate({**self.model_dump(), **changes})

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of every parameter, recorded in the workload's TraceMeta."""
        return hashlib.sha256(self.model_dump_json().encode("utf-8")).hexdigest()
