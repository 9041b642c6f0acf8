"""Versioned JSON messages that flow between Hylo's services, and the subjects they travel on.

Why a package of its own: every service (adapter, featurizer, prioritizer, placer, trainer) and the
store agree on these models and nothing else, so a message written by one build is validated the
same way by every other. ``docs/messages.md`` documents each model; ``docs/schemas/*.json`` are the
generated JSON Schemas (``python -m shared.schemas.jsonschema`` rewrites them).
"""

from shared.schemas.base import (
    SCHEMA_VERSION,
    ClusterName,
    CorrelationId,
    Message,
    StageLatencies,
    new_correlation_id,
)
from shared.schemas.codec import MessageError, MissingReference, decode, encode
from shared.schemas.deadletter import DeadLetter, FieldError
from shared.schemas.limits import DEFAULT_LIMITS, Limits, LimitSettings, configured_limits
from shared.schemas.messages import (
    MESSAGE_TYPES,
    FeatureMatrix,
    JobOutcome,
    JobPlacement,
    MatrixRef,
    ModelVersion,
    PlacementDecision,
    Placements,
    PriorityVector,
    ShadowPriorities,
)
from shared.schemas.snapshot import (
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
)
from shared.schemas.subjects import KINDS, Kind, SubjectError, Subjects, validate_cluster_name
from shared.schemas.views import SnapshotViews, snapshot_views

__all__ = [
    "DEFAULT_LIMITS",
    "KINDS",
    "MESSAGE_TYPES",
    "SCHEMA_VERSION",
    "ClusterName",
    "CorrelationId",
    "DeadLetter",
    "FeatureMatrix",
    "FieldError",
    "JobOutcome",
    "JobPlacement",
    "Kind",
    "LimitSettings",
    "Limits",
    "MatrixRef",
    "Message",
    "MessageError",
    "MissingReference",
    "ModelVersion",
    "NodeState",
    "NodeStates",
    "PendingJob",
    "PendingJobs",
    "PlacementDecision",
    "Placements",
    "PriorityVector",
    "QueueSnapshot",
    "RunningJob",
    "RunningJobs",
    "ShadowPriorities",
    "SnapshotViews",
    "StageLatencies",
    "SubjectError",
    "Subjects",
    "configured_limits",
    "decode",
    "encode",
    "new_correlation_id",
    "snapshot_views",
    "validate_cluster_name",
]
