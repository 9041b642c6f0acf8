"""The feature pool: names, order and normalization constants, in one place.

Why a fixed, ordered catalog: a model checkpoint stores which features (and in which columns) it
was trained on, through the hash of a ``FeatureSchema`` built from this module. Reordering,
renaming or redefining a feature must change that hash, so ``FEATURES_VERSION`` is bumped whenever
a formula changes. ``docs/features.md`` documents every entry (formula, normalization, range, why).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CLUSTER_FEATURES",
    "FEATURES_VERSION",
    "JOB_FEATURES",
    "FeatureConfig",
    "cluster_index",
    "job_index",
]

#: bump when any formula or normalization below changes meaning
FEATURES_VERSION = 1

#: per-job features, in column order: the paper's visible job features (Table 3), the cluster
#: characteristics seen from the job's eligible pool, then the engineered ones
JOB_FEATURES: tuple[str, ...] = (
    # visible job features
    "gpus",
    "gpu_type",
    "vc",
    "requested_time",
    "submit_time",
    "wait",
    "cpus",
    "mem",
    # cluster characteristics, per job (its eligible pool)
    "free_nodes",
    "can_schedule_now",
    "num_ways",
    # engineered
    "demand_supply",
    "job_size",
    "urgency",
    "future_availability",
    "fragmentation",
    "user_share",
)

#: cluster-level features (one value per decision): the critic's pool
CLUSTER_FEATURES: tuple[str, ...] = (
    "free_gpus",
    "fragmentation",
    "queue_demand",
    "queue_length",
    "mean_urgency",
    "runnable",
    "future_availability",
)

_JOB_INDEX = {name: k for k, name in enumerate(JOB_FEATURES)}
_CLUSTER_INDEX = {name: k for k, name in enumerate(CLUSTER_FEATURES)}


def job_index(name: str) -> int:
    """Column of a per-job feature; raises ``KeyError`` naming the known ones."""
    try:
        return _JOB_INDEX[name]
    except KeyError:
        raise KeyError(f"unknown job feature {name!r}; known: {', '.join(JOB_FEATURES)}") from None


def cluster_index(name: str) -> int:
    """Position of a cluster-level feature; raises ``KeyError`` naming the known ones."""
    try:
        return _CLUSTER_INDEX[name]
    except KeyError:
        raise KeyError(f"unknown cluster feature {name!r}; known: {', '.join(CLUSTER_FEATURES)}") from None


class FeatureConfig(BaseModel):
    """Normalization constants. Part of the feature schema: changing one changes the hash.

    Times are log-scaled (``log1p(x / time_unit_s) / log1p(horizon_s / time_unit_s)``) because job
    runtimes and waits span five orders of magnitude: a linear scale against a 12-hour cap (the
    reference code's) makes every job under an hour look alike and saturates long ones.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    time_unit_s: float = Field(default=60.0, gt=0, description="time resolution of the log scale")
    horizon_s: float = Field(
        default=7 * 86400.0, gt=0, description="requested time / wait that maps to 1 (saturates beyond)"
    )
    near_horizon_s: float = Field(
        default=3600.0, gt=0, description="window of the cluster-level future availability"
    )
    queue_ref: int = Field(default=1024, ge=1, description="queue length that maps to 1 (log scale)")
    bsld_floor_s: float = Field(
        default=10.0, ge=0, description="runtime floor in urgency, as bounded slowdown's 10 s"
    )
