"""Columns of numbers travel packed (schema version 5) and decode to exactly what the arrays gave.

A snapshot's and a matrix's numeric columns are written as ``{"dtype", "base64"}`` in the narrowest
type that holds every value exactly; the version-4 JSON arrays are still read. Both forms must give
the same messages (and the same features downstream), packed values must be checked against the
same bounds as array entries, and a malformed packed column must be refused with a reason, as
every invalid message is (the consumers dead-letter it with that reason).
"""

from __future__ import annotations

import base64
import json
import pickle

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from shared.schemas import FeatureMatrix, MessageError, QueueSnapshot, decode, encode
from shared.schemas.coded import code_column
from shared.schemas.numbers import NumberColumn, column_array, narrowest, pack_column
from shared.schemas.snapshot import NodeStates, PendingJobs
from tests.schemas.message_factories import array_form, features, snapshot, tiny_spec


def _packed(values: np.ndarray, dtype: str) -> dict[str, str]:
    return {"dtype": dtype, "base64": base64.b64encode(values.astype(dtype).tobytes()).decode()}


def _reason(doc: object, model: type = QueueSnapshot) -> str:
    with pytest.raises(MessageError) as info:
        decode(model, json.dumps(doc).encode())
    return info.value.reason


def test_every_column_of_numbers_is_packed_and_decodes_to_the_same_snapshot() -> None:
    snap = snapshot()
    doc = json.loads(encode(snap))
    for section, names in (
        ("pending", ("submit_s", "gpus", "gpu_milli", "cpus_milli", "mem_mib", "est_runtime_s")),
        ("running", ("node_count", "node_index", "gpus", "gpu_milli", "start_s", "est_end_s")),
        ("nodes", ("free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib")),
    ):
        for name in names:
            assert set(doc[section][name]) == {"dtype", "base64"}, (section, name)
    packed = decode(QueueSnapshot, encode(snap))
    arrays = decode(QueueSnapshot, json.dumps(array_form(doc)).encode())  # the version-4 form
    assert packed == snap and arrays == snap
    assert packed.running.start_s == arrays.running.start_s == snap.running.start_s
    assert all(type(v) is float for v in packed.pending.submit_s)
    assert all(type(v) is int for v in packed.nodes.free_mem_mib)


def test_both_forms_give_the_same_features() -> None:
    snap = snapshot()
    doc = json.loads(encode(snap))
    stage = FeaturizerStage({"c1": tiny_spec()})
    packed = stage.handle(decode(QueueSnapshot, json.dumps(doc).encode()))
    arrays = stage.handle(decode(QueueSnapshot, json.dumps(array_form(doc)).encode()))
    assert np.array_equal(packed.values.array, arrays.values.array)
    assert packed.cluster_values == arrays.cluster_values and packed.jobs == arrays.jobs


def test_the_narrowest_exact_type_is_written() -> None:
    assert narrowest(np.array([0, 1, 127])) == "<i1"
    assert narrowest(np.array([-1, 1000])) == "<i2"
    assert narrowest(np.array([0, 70_000])) == "<i4"
    assert narrowest(np.array([0, 2**40])) == "<i8"
    assert narrowest(np.array([0.0, 86_400.0])) == "<i4"  # whole seconds go as integers
    assert narrowest(np.array([0.5, 1.0])) == "<f8"
    assert narrowest(np.array([-0.0, 1.0])) == "<f8"  # the sign of zero survives
    assert narrowest(np.array([2.0**70])) == "<f8"
    assert pack_column((2**70,), "int") == [2**70]  # beyond int64: the JSON array
    for values in ([-0.0, 3.0], [1e-300, 2.5, -7.0], [3.0, 1e15]):
        doc = pack_column(tuple(values), "float")
        assert isinstance(doc, dict)
        back = np.frombuffer(base64.b64decode(doc["base64"]), dtype=doc["dtype"]).astype(np.float64)
        assert back.tolist() == values and np.array_equal(np.signbit(back), np.signbit(values))


def test_decoded_columns_carry_their_arrays() -> None:
    snap = decode(QueueSnapshot, encode(snapshot()))
    gpus = snap.running.gpus
    assert isinstance(gpus, NumberColumn) and gpus.array.dtype == np.int64
    assert column_array(gpus, np.int64) is gpus.array and not gpus.array.flags.writeable
    plain = tuple(gpus)
    assert np.array_equal(column_array(plain, np.int64), gpus.array)
    assert np.array_equal(column_array(snap.running.est_end_s, np.float64), snap.running.est_end_s)
    assert pickle.loads(pickle.dumps(gpus)) == gpus


def test_packed_values_are_checked_against_the_columns_bounds() -> None:
    doc = json.loads(encode(snapshot()))
    bad = json.loads(json.dumps(doc))
    bad["running"]["gpu_milli"] = _packed(np.array([1000, 0, 1000]), "<i2")
    assert (
        "running.gpu_milli" in (r := _reason(bad))
        and "entry 1 is 0, expected greater than or equal to 1" in r
    )
    bad = json.loads(json.dumps(doc))
    bad["nodes"]["free_gpus"] = _packed(np.array([8, 8, 4, 65]), "<i1")
    assert "entry 3 is 65, expected less than or equal to 64" in _reason(bad)
    bad = json.loads(json.dumps(doc))
    bad["pending"]["est_runtime_s"] = _packed(np.array([3600.0, np.inf, 1.0]), "<f8")
    assert "pending.est_runtime_s" in (r := _reason(bad)) and "entry 1 is inf, expected a finite number" in r
    bad = json.loads(json.dumps(doc))
    bad["pending"]["est_runtime_s"] = _packed(np.array([3600.0, -1.0, 1.0]), "<f8")
    assert "entry 1 is -1.0, expected greater than or equal to 0" in _reason(bad)


@pytest.mark.parametrize(
    ("column", "fragment"),
    [
        ({"dtype": "<f8", "base64": "AAAAAAAA8D8="}, "dtype must be one of ['<i1', '<i2', '<i4', '<i8']"),
        ({"dtype": "<u2", "base64": "AQA="}, "dtype must be one of"),
        ({"dtype": "<i2", "base64": "AQ=="}, "1 bytes is not a whole number of <i2 values"),
        ({"dtype": "<i2", "base64": "not base64!"}, "'base64' is not valid base64"),
        ({"dtype": "<i2", "base64": 5}, "'base64' must be a string"),
        ({"dtype": "<i2"}, "missing keys ['base64']"),
        ({"dtype": "<i2", "base64": "AQA=", "n": 1}, "unexpected keys ['n']"),
    ],
)
def test_malformed_packed_columns_are_refused_with_the_reason(column: object, fragment: str) -> None:
    doc = json.loads(encode(snapshot()))
    doc["nodes"]["free_gpus"] = column
    assert "nodes.free_gpus" in (r := _reason(doc)) and fragment in r


def test_a_packed_column_of_the_wrong_length_is_named() -> None:
    doc = json.loads(encode(snapshot()))
    doc["nodes"]["free_mem_mib"] = _packed(np.array([1, 2]), "<i4")
    assert "nodes.free_mem_mib has 2 entries, expected 4 (as nodes.name)" in _reason(doc)


def test_a_validated_column_of_another_field_is_checked_against_this_fields_bounds() -> None:
    """A column passed on in Python (a NumberColumn) is not trusted for bounds it was never held to."""
    snap = snapshot()
    minus_one = NumberColumn(np.array([-1, 0, 0], dtype=np.int64))  # valid as pending.cpus_milli
    PendingJobs(**{**{c: getattr(snap.pending, c) for c in PendingJobs.COLUMNS}, "cpus_milli": minus_one})
    fields = {c: getattr(snap.nodes, c) for c in NodeStates.COLUMNS if c != "free_cpus_milli"}
    nodes = NumberColumn(np.array([-1, 0, 0, 0], dtype=np.int64))
    with pytest.raises(ValueError, match="entry 0 is -1, expected greater than or equal to 0"):
        NodeStates(**fields, free_cpus_milli=nodes)


def test_a_matrix_sends_its_jobs_numbers_packed_and_reads_arrays_too() -> None:
    fm = features()
    doc = json.loads(encode(fm))
    assert set(doc["jobs"]["gpus"]) == {"dtype", "base64"}
    assert decode(FeatureMatrix, json.dumps(array_form(doc)).encode()) == fm
    assert decode(FeatureMatrix, encode(fm)) == fm


def test_repeated_names_are_dictionary_coded_and_decode_to_the_same_columns() -> None:
    snap = snapshot()
    doc = json.loads(encode(snap))
    groups = doc["nodes"]["group"]
    assert set(groups) == {"values", "index"} and groups["values"] == ["v100", "t4"]
    assert [groups["values"][i] for i in array_form(groups["index"])] == list(snap.nodes.group)
    back = decode(QueueSnapshot, encode(snap))
    assert back.nodes.group == snap.nodes.group and back.pending.gpu_types == snap.pending.gpu_types
    assert code_column(("a", "b", "c")) == ["a", "b", "c"]  # nothing repeats: the plain array
    coded = code_column((("T4",), ("T4",), ("T4",), ()))
    assert coded == {"values": [("T4",), ()], "index": pack_column((0, 0, 0, 1), "int")}


def test_coded_columns_are_refused_with_the_reason_when_malformed() -> None:
    doc = json.loads(encode(snapshot()))
    bad = json.loads(json.dumps(doc))
    bad["nodes"]["group"] = {"values": ["v100", "t4"], "index": [0, 0, 2, 1]}
    assert "nodes.group" in (r := _reason(bad)) and "index entry 2 is 2, not a position in its 2 values" in r
    bad["nodes"]["group"] = {"values": ["v100", "bad\x00name"], "index": [0, 0, 1, 1]}
    assert "nodes.group.1" in _reason(bad)  # the distinct value at fault, as an array entry would be
    bad["nodes"]["group"] = {"values": "v100", "index": [0]}
    assert "'values' must be an array" in _reason(bad)
    bad["nodes"]["group"] = {"values": ["v100"], "index": [0, 0.5]}
    assert "'index' must be a packed column or an array of integers" in _reason(bad)
    bad["nodes"]["group"] = {"values": ["v100"]}
    assert "missing keys ['index']" in _reason(bad)
    bad["nodes"]["state"] = {"values": ["up", "sleeping"], "index": [0, 0, 0, 1]}
    assert "nodes.state.1" in _reason(bad)


def test_python_lists_stay_refused_where_tuples_are_required() -> None:
    """Only JSON arrays become tuples; a Python list is refused in strict mode, as before."""
    snap = snapshot()
    fields = {c: getattr(snap.nodes, c) for c in NodeStates.COLUMNS}
    with pytest.raises(ValueError, match="valid tuple"):
        NodeStates(**{**fields, "group": list(snap.nodes.group)})
    with pytest.raises(ValueError, match="valid tuple"):
        NodeStates(**{**fields, "free_gpus": list(snap.nodes.free_gpus)})
