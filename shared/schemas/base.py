"""The common envelope of every message: schema version, cluster and correlation id.

Why strict models: messages cross process and machine boundaries and come from adapters that may be
written in other languages; coercing ``"8"`` to 8 or ignoring an unknown field would hide bugs that
surface later as wrong schedules. ``extra="forbid"`` plus ``strict=True`` make every mistake a
validation error that names the field, and ``frozen`` keeps a received message immutable.
"""

from __future__ import annotations

import uuid
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

#: the version written by this build; bump it when a field changes meaning or shape. Version 2 sent a
#: snapshot's running jobs and nodes as columns; version 3 sends every big collection as columns
#: (pending jobs, a running job's nodes flat, a decision's placements: ``shared.schemas.columns``).
#: Version 4 sends a FeatureMatrix's ``values`` and a decision's ``features`` as packed float64
#: (``shared.schemas.packed``), a running job's nodes as positions in the snapshot's node table
#: (``RunningJobs.node_index``) and a PriorityVector's matrix by reference (``matrix_ref``). Each
#: version-3 form (rows of JSON numbers, node names, the matrix nested) is still read, every other
#: field is the same, so version 3 is still read. Older versions are not: reading them would cost
#: the fast decoding they were replaced for. Version 5 sends the columns of numbers of a snapshot's
#: pending jobs, running jobs and nodes (and of a matrix's jobs) packed (``shared.schemas.numbers``)
#: and its columns of repeated names (groups, node states, users, partitions, QoS, GPU types)
#: dictionary-coded (``shared.schemas.coded``); the JSON arrays of version 4 are still read.
#: Version 6 adds optional columns to a snapshot's running jobs: each job's exact allocation per node
#: (``RunningJobs.node_gpus``, ``node_cpus_milli``, ``node_mem_mib``, ``node_gpu_mask``, flat like
#: ``node_index``) and a fractional job's GPU (``share_gpu``), so that the placer can rebuild the
#: cluster's state exactly; they are empty when not given, as in every version-5 message, which is
#: read as before. A version-5 reader refuses the new fields (strict models), hence the new number.
#: Version 7 adds optional fields that record what happened (issue 21): a FeatureMatrix's raw values
#: (``raw_columns``, ``raw_values``), a PriorityVector's model scores (``scores``), a decision's per-job
#: ``score`` and raw features, and where a finished job ran (``JobOutcome.nodes``, ``node_gpus``,
#: ``gpu_type``); all default to "not given", so a version-6 message is read as before.
#: Version 8 sends the big columns of long queues more cheaply to decode: the job ids of a
#: snapshot's pending and running jobs, of a matrix's jobs and of a decision's placements joined
#: into one string (``shared.schemas.joined``), and a decision's ranks, priorities and node counts
#: and a vector's priorities packed (``shared.schemas.numbers``). A version-7 reader refuses the new
#: forms (hence the new number); every version-7 form is still read, so older writers keep working.
SCHEMA_VERSION = 8
SUPPORTED_VERSIONS: frozenset[int] = frozenset({3, 4, 5, 6, 7, 8})

CLUSTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
ClusterName = Annotated[str, StringConstraints(pattern=CLUSTER_PATTERN)]
CorrelationId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
#: job ids as the cluster reports them (Slurm: "1234", "1234_7"); printable, no whitespace
#: what a job id may not contain (whitespace, control characters); ``shared.schemas.columns`` checks
#: a whole column of ids against the same class at once
JOB_ID_FORBIDDEN = r"\s\x00-\x1f\x7f"
JOB_ID_MAX_LENGTH = 128
JobId = Annotated[
    str, StringConstraints(min_length=1, max_length=JOB_ID_MAX_LENGTH, pattern=rf"^[^{JOB_ID_FORBIDDEN}]+$")
]
#: node, group, user, partition, GPU type, policy names
Name = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")]
FeatureName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
StageName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,32}$")]
#: milliseconds spent per stage so far (adapter, featurizer, prioritizer, placer, ...)
StageLatencies = Annotated[dict[StageName, NonNegFloat], Field(max_length=16)]


def new_correlation_id() -> str:
    """A fresh correlation id: one per snapshot, carried by every message derived from it."""
    return uuid.uuid4().hex


class Strict(BaseModel):
    """Base configuration of every message model and sub-model."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Message(Strict):
    """Fields every message on a ``hylo.v1.<cluster>.<kind>`` subject carries."""

    #: the subject kind this message travels on (``snapshots``, ``features``, ...)
    kind: ClassVar[str] = ""

    schema_version: int = Field(default=SCHEMA_VERSION, description="message schema version")
    cluster: ClusterName = Field(description="cluster name, also the subject's cluster token")
    correlation_id: CorrelationId = Field(description="id of the snapshot this message derives from")

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"unsupported schema_version {value}; this build reads {sorted(SUPPORTED_VERSIONS)}"
            )
        return value

    def message_id(self) -> str:
        """Deterministic id used as ``Nats-Msg-Id``: republishing the same message is a duplicate."""
        return f"{self.kind}.{self.cluster}.{self.correlation_id}"
