"""The feature pool: names, order, named feature sets and normalization constants, in one place.

Why a fixed, ordered catalog: a model checkpoint stores which features (and in which columns) it
was trained on, through the hash of a ``FeatureSchema`` built from this module. Reordering,
renaming or redefining a feature must change that hash, so ``FEATURES_VERSION`` is bumped whenever
a formula changes. ``docs/features.md`` documents every entry (formula, normalization, range, why).

Why named *sets*: a feature can only join the pool by changing what every checkpoint's columns
mean, so new features come as a new set (``FEATURE_SETS``) that a model chooses at training time
and its card records. ``classic`` is the original 17 + 7 pool, unchanged, so every checkpoint
trained before sets existed keeps its schema hash; ``predicted`` adds the runtime predictor's
prediction and band (``PREDICTION_FEATURES``). Every set starts with the classic job features in
their order (the compiled featurizer writes them at fixed columns) and has the classic cluster
features.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CLASSIC",
    "CLUSTER_FEATURES",
    "DEFAULT_FEATURE_SET",
    "FEATURES_VERSION",
    "FEATURE_SETS",
    "JOB_FEATURES",
    "PREDICTED",
    "PREDICTION_CONSTANTS",
    "PREDICTION_FEATURES",
    "FeatureConfig",
    "FeatureSet",
    "UnknownFeatureSet",
    "cluster_index",
    "feature_set",
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
    band_ratio_ref: float = Field(
        default=1000.0,
        gt=1,
        description="prediction band high / low that maps predicted_band to 1 (log scale; "
        "prediction features only)",
    )


#: ``FeatureConfig`` fields only the prediction features read: part of a set's schema only when the
#: set has those features (so the classic schema, and every shipped checkpoint's hash, is unchanged)
PREDICTION_CONSTANTS: tuple[str, ...] = ("band_ratio_ref",)

#: the runtime predictor's per-job features (``predicted`` set), after the classic job features
PREDICTION_FEATURES: tuple[str, ...] = (
    "predicted_time",
    "predicted_band",
    "predicted_urgency",
    "predicted_known",
)

#: the sampling rule's base priorities of the classic pool (``SamplingConfig.priority``)
CLASSIC_PRIORITY: tuple[str, ...] = (
    "wait",
    "requested_time",
    "gpus",
    "can_schedule_now",
    "demand_supply",
    "future_availability",
    "fragmentation",
    "free_nodes",
    "urgency",
    "job_size",
    "num_ways",
    "cpus",
    "mem",
    "gpu_type",
    "user_share",
    "vc",
    "submit_time",
)

CLASSIC_CRITIC_PRIORITY: tuple[str, ...] = (
    "free_gpus",
    "queue_demand",
    "runnable",
    "future_availability",
    "queue_length",
    "fragmentation",
    "mean_urgency",
)


class UnknownFeatureSet(ValueError):
    """A feature set name this code does not know (a card from newer code, or a typo)."""


@dataclass(frozen=True)
class FeatureSet:
    """A named feature pool and its sampling defaults.

    ``n_observation`` and ``priority`` are the defaults of ``SamplingConfig`` for the set;
    ``reads_predictions`` says whether the workload needs the runtime predictor's columns
    (``JobTable.predicted``...; without them every prediction feature reads "missing").
    """

    name: str
    job_features: tuple[str, ...]
    cluster_features: tuple[str, ...]
    priority: tuple[str, ...]
    critic_priority: tuple[str, ...]
    n_observation: int
    n_critic: int
    reads_predictions: bool
    summary: str

    def job_index(self, name: str) -> int:
        """Column of a per-job feature of this set; ``KeyError`` naming the set's features."""
        try:
            return self.job_features.index(name)
        except ValueError:
            known = ", ".join(self.job_features)
            raise KeyError(
                f"unknown job feature {name!r} in feature set {self.name!r}; known: {known}"
            ) from None


CLASSIC = FeatureSet(
    name="classic",
    job_features=JOB_FEATURES,
    cluster_features=CLUSTER_FEATURES,
    priority=CLASSIC_PRIORITY,
    critic_priority=CLASSIC_CRITIC_PRIORITY,
    n_observation=8,
    n_critic=5,
    reads_predictions=False,
    summary="the 17 job and 7 cluster features of docs/features.md (every checkpoint before feature sets)",
)

# The prediction features are inserted right after ``wait`` in the priority list: with 12
# observation columns (8 + 4) the predicted set's observation is, in every state, the classic
# observation of that state plus the four prediction columns (the emphasized features come first
# in both, and the remaining slots then take the four new names and the classic's own picks).
PREDICTED = FeatureSet(
    name="predicted",
    job_features=(*JOB_FEATURES, *PREDICTION_FEATURES),
    cluster_features=CLUSTER_FEATURES,
    priority=(CLASSIC_PRIORITY[0], *PREDICTION_FEATURES, *CLASSIC_PRIORITY[1:]),
    critic_priority=CLASSIC_CRITIC_PRIORITY,
    n_observation=CLASSIC.n_observation + len(PREDICTION_FEATURES),
    n_critic=5,
    reads_predictions=True,
    summary="classic + the runtime predictor's prediction, band, predicted urgency and a known flag",
)

DEFAULT_FEATURE_SET = CLASSIC.name
FEATURE_SETS: dict[str, FeatureSet] = {s.name: s for s in (CLASSIC, PREDICTED)}


def _check_sets() -> None:
    """Every set starts with the classic job features (the compiled featurizer writes them at fixed
    columns), has the classic cluster features, and ranks each of its job features once."""
    for s in FEATURE_SETS.values():
        if s.job_features[: len(JOB_FEATURES)] != JOB_FEATURES or s.cluster_features != CLUSTER_FEATURES:
            raise RuntimeError(f"feature set {s.name!r} does not extend the classic pool")
        if sorted(s.priority) != sorted(s.job_features) or len(set(s.job_features)) != len(s.job_features):
            raise RuntimeError(f"feature set {s.name!r}: priority must rank each job feature once")


_check_sets()


def feature_set(name: str) -> FeatureSet:
    """The feature set called ``name``; ``UnknownFeatureSet`` (a ``ValueError``) naming the known ones."""
    found = FEATURE_SETS.get(name)
    if found is None:
        raise UnknownFeatureSet(f"unknown feature set {name!r}; known: {', '.join(FEATURE_SETS)}")
    return found
