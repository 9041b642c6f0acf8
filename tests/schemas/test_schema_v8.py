"""Schema version 8: job ids joined into one string, a decision's and a vector's numbers packed, and a
coded column re-sent as received (``shared.schemas.joined``, ``shared.schemas.numbers``,
``shared.schemas.coded``).

What must hold: a message written in the new form decodes to what the version-7 form (JSON arrays)
decodes to, field for field, on random inputs; the version-7 form is still read; a malformed joined
column is refused with a reason naming the field and the entry; re-sending a coded column as
received gives the bytes a fresh encoding gives.
"""

from __future__ import annotations

import json
import random
import string

import numpy as np
import pytest
from pydantic import BaseModel

from shared.schemas import (
    SCHEMA_VERSION,
    FeatureMatrix,
    PlacementDecision,
    PriorityVector,
)
from shared.schemas.base import JOB_ID_MAX_LENGTH, SUPPORTED_VERSIONS
from shared.schemas.codec import MessageError, decode, encode
from shared.schemas.coded import CodedColumn, code_column
from shared.schemas.columns import is_identity
from shared.schemas.joined import join_column, split_column
from shared.schemas.numbers import NumberColumn
from shared.schemas.snapshot import PendingJob, PendingJobs, QueueSnapshot, RunningJob, RunningJobs
from tests.schemas.message_factories import array_form, decision, features, node, priorities, snapshot

ID_CHARS = string.ascii_letters + string.digits + "_-./:[]" + "éß日本" + "\u200b"


def random_id(rng: random.Random, k: int) -> str:
    return f"{k}-" + "".join(rng.choice(ID_CHARS) for _ in range(rng.randint(0, 12)))


def random_snapshot(seed: int) -> QueueSnapshot:
    """A snapshot with random ids (ASCII and not), requests and running jobs on the factories' nodes."""
    rng = random.Random(seed)
    nodes = [
        node("v0", "v100", 8, 32, 262144),
        node("v1", "v100", 8, 32, 262144),
        node("t0", "t4", 4, 16, 65536),
    ]
    pending = [
        PendingJob(
            job_id=random_id(rng, k),
            submit_s=float(rng.randint(0, 10**6)) + rng.choice([0.0, 0.25]),
            gpus=rng.choice([0, 1, 2, 8]),
            est_runtime_s=float(rng.randint(1, 10**5)),
            user=rng.choice(["u1", "u2"]),
            qos=rng.choice(["normal", "high"]),
        )
        for k in range(rng.randint(0, 60))
    ]
    running = [
        RunningJob(
            job_id=random_id(rng, 10_000 + k),
            nodes=(rng.choice(["v0", "v1", "t0"]),),
            gpus=1,
            gpu_milli=rng.choice([250, 1000]),
            start_s=float(rng.randint(0, 1000)),
            est_end_s=float(rng.randint(1000, 5000)),
        )
        for k in range(rng.randint(0, 40))
    ]
    base = snapshot()
    return base.model_copy(
        update={
            "pending": PendingJobs.of(pending),
            "running": RunningJobs.of(running).resolved([n.name for n in nodes]),
            "nodes": type(base.nodes).of(nodes),
        }
    )


def unversioned(message: object) -> object:
    """``message`` dumped field for field, without its (and its nested messages') schema version."""
    if isinstance(message, BaseModel):
        message = message.model_dump()
    if isinstance(message, dict):
        return {k: unversioned(v) for k, v in message.items() if k != "schema_version"}
    return message


def test_the_version_is_new_and_every_older_one_still_read() -> None:
    assert SCHEMA_VERSION == 8 and {3, 4, 5, 6, 7, 8} <= SUPPORTED_VERSIONS


@pytest.mark.parametrize("seed", range(12))
def test_a_joined_snapshot_decodes_as_its_array_form_does_field_for_field(seed: int) -> None:
    snap = random_snapshot(seed)
    data = encode(snap)
    doc = json.loads(data)
    if len(snap.pending):
        assert set(doc["pending"]["job_id"]) == {"joined"}
    old = array_form(doc) | {"schema_version": 7}  # what a version-7 writer sends
    new, before = decode(QueueSnapshot, data), decode(QueueSnapshot, json.dumps(old))
    assert new == snap and before == snap.model_copy(update={"schema_version": 7})
    for part in ("pending", "running", "nodes"):
        a, b = getattr(new, part), getattr(before, part)
        for field in type(a).model_fields:
            assert getattr(a, field) == getattr(b, field), (part, field)
    assert new.pending.job_id == tuple(j.job_id for j in snap.pending)


@pytest.mark.parametrize("seed", range(6))
def test_matrix_vector_and_decision_round_trip_in_both_forms(seed: int) -> None:
    snap = random_snapshot(seed)
    fm = features(snap)
    pv = priorities(fm)
    dec = decision(jobs=fm.jobs.job_id) if len(fm.jobs) else decision()
    for model, message in ((FeatureMatrix, fm), (PriorityVector, pv), (PlacementDecision, dec)):
        data = encode(message)
        old = array_form(json.loads(data)) | {"schema_version": 7}
        if model is PriorityVector:
            old["matrix"]["schema_version"] = 7
        new, before = decode(model, data), decode(model, json.dumps(old))
        assert new == message and unversioned(before) == unversioned(message)
    doc = json.loads(encode(dec))
    assert set(doc["placements"]["rank"]) == {"dtype", "base64"}
    assert set(doc["placements"]["priority"]) == {"dtype", "base64"}
    assert set(doc["placements"]["job_id"]) == {"joined"}
    assert set(json.loads(encode(pv))["priorities"]) == {"dtype", "base64"}
    got = decode(PlacementDecision, encode(dec))
    assert isinstance(got.placements.priority, NumberColumn)
    assert got.placements.priority == dec.placements.priority  # the very floats


def test_priorities_keep_their_exact_bits() -> None:
    fm = features()
    values = (0.1, -0.0, 2.0**60)
    pv = priorities(fm).model_copy(update={"priorities": values})
    got = decode(PriorityVector, encode(pv)).priorities
    assert got == values and [np.signbit(v) for v in got] == [False, True, False]
    assert [float(v).hex() for v in got] == [v.hex() for v in values]


@pytest.mark.parametrize(
    ("joined", "words"),
    [
        ("a  b", "entry 1 ('') has 0 characters, expected 1 to 128"),
        (" a", "entry 0 ('') has 0 characters"),
        ("a ", "entry 1 ('') has 0 characters"),
        (
            "a " + "x" * (JOB_ID_MAX_LENGTH + 1),
            f"entry 1 ('{'x' * 40}') has {JOB_ID_MAX_LENGTH + 1} characters",
        ),
        ("a é" + "x" * JOB_ID_MAX_LENGTH, f"has {JOB_ID_MAX_LENGTH + 1} characters"),
    ],
)
def test_a_malformed_joined_column_is_refused_naming_the_field_and_entry(joined: str, words: str) -> None:
    doc = json.loads(encode(snapshot()))
    doc["pending"] = array_form(doc["pending"])
    n = len(joined.split(" "))
    for column, values in list(doc["pending"].items()):
        doc["pending"][column] = (values * n)[:n]
    doc["pending"]["job_id"] = {"joined": joined}
    with pytest.raises(MessageError) as err:
        decode(QueueSnapshot, json.dumps(doc))
    assert "pending.job_id" in err.value.reason and words in err.value.reason


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"joined": 5}, "'joined' must be a string, got int"),
        ({"joined": "a", "n": 1}, "unexpected keys ['n']"),
        ({}, "missing keys ['joined']"),
    ],
)
def test_a_joined_column_of_the_wrong_shape_is_refused(value: object, words: str) -> None:
    doc = json.loads(encode(snapshot()))
    doc["running"]["job_id"] = value
    with pytest.raises(MessageError) as err:
        decode(QueueSnapshot, json.dumps(doc))
    assert "running.job_id" in err.value.reason and words in err.value.reason


@pytest.mark.parametrize("bad", ["a\tb", "a\x00", "a\u2003b", "a\x85b"])
def test_joined_ids_with_whitespace_or_control_characters_are_refused(bad: str) -> None:
    doc = json.loads(encode(snapshot()))
    doc["pending"]["job_id"] = {"joined": f"{bad} j1 j2"}
    with pytest.raises(MessageError, match=r"pending\.job_id entry 0 .* contains whitespace or a control"):
        decode(QueueSnapshot, json.dumps(doc))
    dec = json.loads(encode(decision()))
    n = len(array_form(dec["placements"]["job_id"]))
    dec["placements"]["job_id"] = {"joined": " ".join([bad] + [f"j{k}" for k in range(1, n)])}
    with pytest.raises(MessageError, match=r"placements\.job_id entry 0 .* contains whitespace or a control"):
        decode(PlacementDecision, json.dumps(dec))


def test_join_falls_back_to_the_array_when_it_would_not_split_back() -> None:
    assert join_column(()) == {"joined": ""} and split_column({"joined": ""}) == ()
    assert join_column(("a", "b")) == {"joined": "a b"}
    for values in (("",), ("a", ""), ("a b",), ("", "a"), (" ",)):
        assert join_column(values) == list(values)
    rng = random.Random(1)
    for _ in range(200):
        values = tuple(random_id(rng, k) for k in range(rng.randint(0, 30)))
        form = join_column(values)
        assert isinstance(form, dict) and split_column(form) == values


def test_a_coded_column_is_re_sent_as_received() -> None:
    rng = random.Random(3)
    for _ in range(50):
        values = tuple(rng.choice(["u1", "u2", "u3"]) for _ in range(rng.randint(2, 40)))
        fresh = code_column(values)
        if not isinstance(fresh, dict):
            continue
        pos = np.array([fresh["values"].index(v) for v in values], dtype=np.int64)
        received = CodedColumn(values, tuple(fresh["values"]), pos)
        assert received == values and code_column(received) == fresh
    snap = decode(QueueSnapshot, encode(snapshot()))
    assert isinstance(snap.nodes.group, CodedColumn)
    fm = decode(FeatureMatrix, encode(features()))
    assert encode(fm) == encode(features())  # the coded columns re-sent as received: the same bytes


def test_is_identity_on_every_kind_of_index() -> None:
    for index in ([0, 1, 2], (0, 1, 2), np.arange(3), range(3)):
        assert is_identity(index, 3)
    for index in ([0, 2, 1, 2][:3], (0, 1), np.array([0, 0, 2]), [1, 1, 2]):
        assert not is_identity(index, 3)
    assert is_identity((), 0) and not is_identity([0], 2)
