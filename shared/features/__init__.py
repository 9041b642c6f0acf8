"""Scheduling features: the per-job and cluster-level inputs of the learned prioritizer.

Inputs are two neutral snapshots (``QueueView``, ``ClusterView``) that the simulator
(``SimViewBuilder``) and the production featurizer service both fill; ``compute_features`` turns
them into the feature pool, vectorized over the queue; ``FeatureSampler`` picks the 8 observation
and 5 critic features of a decision; ``FeatureSchema`` names them for model checkpoints. Every
feature is documented in ``docs/features.md``. A model's features are a named set
(``FEATURE_SETS``: ``classic``, the default, and ``predicted``), recorded in its schema.
"""

from shared.features.catalog import (
    CLUSTER_FEATURES,
    FEATURE_SETS,
    FEATURES_VERSION,
    JOB_FEATURES,
    FeatureConfig,
    FeatureSet,
)
from shared.features.compute import FeatureValues, compute_features
from shared.features.sampling import FeatureSampler, SamplingConfig, SamplingState, Selection
from shared.features.schema import FeatureSchema, FeatureSchemaMismatch
from shared.features.sim_views import RunningJobs, SimViewBuilder
from shared.features.views import ClusterView, QueueView
from shared.features.ways import Ways, placement_ways

__all__ = [
    "CLUSTER_FEATURES",
    "FEATURES_VERSION",
    "FEATURE_SETS",
    "JOB_FEATURES",
    "ClusterView",
    "FeatureConfig",
    "FeatureSampler",
    "FeatureSchema",
    "FeatureSchemaMismatch",
    "FeatureSet",
    "FeatureValues",
    "QueueView",
    "RunningJobs",
    "SamplingConfig",
    "SamplingState",
    "Selection",
    "SimViewBuilder",
    "Ways",
    "compute_features",
    "placement_ways",
]
