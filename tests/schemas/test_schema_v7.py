"""Schema version 7: the fields that record what happened travel, and version-6 messages still read.

The new fields are optional with "not given" defaults; a version-6 message (none of them, version
number 6) decodes as before, and a version-7 one round-trips with them, ``None`` scores included.
"""

from __future__ import annotations

import json

import pytest

from shared.schemas import JobOutcome, PlacementDecision, PriorityVector
from shared.schemas.codec import MessageError, decode, encode
from shared.schemas.messages import FeatureMatrix, JobPlacement, Placements
from tests.schemas.message_factories import decision, features, outcome, priorities

#: the fields version 7 added, wherever they appear (a vector nests its matrix, a decision its columns)
NEW_FIELDS = {"raw_columns", "raw_values", "scores", "score", "raw_feature_columns", "raw_features"}
OUTCOME_FIELDS = {"nodes", "node_gpus", "gpu_type"}


def _strip(doc: object, drop: set[str]) -> object:
    if isinstance(doc, dict):
        return {k: _strip(v, drop) for k, v in doc.items() if k not in drop}
    return doc


def _as_version_6(message: object) -> bytes:
    """``message`` as a version-6 writer sent it: none of the new keys, version number 6."""
    doc = json.loads(encode(message))  # type: ignore[arg-type]
    drop = NEW_FIELDS | (OUTCOME_FIELDS if isinstance(message, JobOutcome) else set())
    stripped = _strip(doc, drop)
    assert isinstance(stripped, dict) and not (drop & stripped.keys())
    stripped["schema_version"] = 6
    return json.dumps(stripped).encode()


def test_version_6_messages_read_as_before() -> None:
    for kind, message in (
        (FeatureMatrix, features()),
        (PriorityVector, priorities()),
        (PlacementDecision, decision()),
        (JobOutcome, outcome()),
    ):
        back = decode(kind, _as_version_6(message))
        assert back.schema_version == 6
    o = decode(JobOutcome, _as_version_6(outcome()))
    assert (o.nodes, o.node_gpus, o.gpu_type) == ((), (), None)
    v = decode(PriorityVector, _as_version_6(priorities()))
    assert v.scores == ()


def test_the_new_fields_round_trip() -> None:
    fm = features()
    fm = FeatureMatrix.model_validate(
        {**dict(fm), "raw_columns": ("pool_gpus",), "raw_values": tuple((8.0,) for _ in fm.job_ids)}
    )
    assert decode(FeatureMatrix, encode(fm)).raw_values == fm.raw_values
    v = priorities(fm).model_copy(update={"scores": (0.5, None, -1.25)})
    v = PriorityVector.model_validate(dict(v))
    assert decode(PriorityVector, encode(v)).scores == (0.5, None, -1.25)
    rows = [
        JobPlacement(job_id="a", rank=0, priority=2.0, score=1.5, raw_features={"pool_gpus": 8.0}),
        JobPlacement(job_id="b", rank=1, priority=1.0, score=None, raw_features={"pool_gpus": 4.0}),
    ]
    d = decision().model_copy(update={"placements": Placements.of(rows)})
    back = decode(PlacementDecision, encode(d))
    assert [(p.score, p.raw_features) for p in back.placements] == [
        (1.5, {"pool_gpus": 8.0}),
        (None, {"pool_gpus": 4.0}),
    ]
    unscored = Placements.of([JobPlacement(job_id="a", rank=0, priority=1.0)])
    assert unscored.score == () and unscored[0].score is None  # not given at all
    o = outcome().model_copy(update={"nodes": ("n1", "n2"), "node_gpus": (4, 4), "gpu_type": "V100"})
    o = JobOutcome.model_validate(dict(o))
    assert decode(JobOutcome, encode(o)) == o


def test_misaligned_new_fields_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="node_gpus has 1 entries, expected 2"):
        JobOutcome.model_validate({**dict(outcome()), "nodes": ("n1", "n2"), "node_gpus": (4,)})
    with pytest.raises(ValueError, match="scores has 1 entries, expected 3"):
        PriorityVector.model_validate({**dict(priorities()), "scores": (1.0,)})
    fm = features()
    with pytest.raises(ValueError, match="raw_values has 1 rows, expected one per job"):
        FeatureMatrix.model_validate({**dict(fm), "raw_columns": ("x",), "raw_values": ((1.0,),)})
    doc = json.loads(encode(outcome()))
    doc["node_gpus"] = [1]
    with pytest.raises(MessageError, match="node_gpus"):
        decode(JobOutcome, json.dumps(doc).encode())
