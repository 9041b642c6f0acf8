"""Message validation: round trips, and errors that name the field and what was expected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from shared.schemas import (
    DEFAULT_LIMITS,
    DeadLetter,
    FeatureMatrix,
    JobOutcome,
    JobPlacement,
    Limits,
    MessageError,
    NodeStates,
    PendingJob,
    PendingJobs,
    Placements,
    PriorityVector,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
    SubjectError,
    Subjects,
    decode,
    encode,
    validate_cluster_name,
)
from shared.schemas.jsonschema import DEFAULT_DIR, schema_documents
from tests.schemas.message_factories import array_form, every_message, features, outcome, priorities, snapshot


def snapshot_doc() -> dict[str, object]:
    doc: dict[str, object] = array_form(json.loads(encode(snapshot())))
    return doc


def reject(doc: object, model: type = QueueSnapshot, limits: Limits = DEFAULT_LIMITS) -> MessageError:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    with pytest.raises(MessageError) as info:
        decode(model, data, limits)
    return info.value


@pytest.mark.parametrize("message", every_message(), ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: object) -> None:
    model = type(message)
    data = encode(message)  # type: ignore[arg-type]
    assert decode(model, data) == message  # type: ignore[type-var]
    assert decode(model, data).message_id() == message.message_id()  # type: ignore[type-var, attr-defined]


def test_wrong_type_names_the_field_and_the_expected_type() -> None:
    doc = snapshot_doc()
    doc["pending"]["gpus"][1] = "2"  # type: ignore[index]
    err = reject(doc)
    assert "pending.gpus.1" in err.reason and "valid integer" in err.reason and "'2'" in err.reason
    assert err.errors[0].loc == "pending.gpus.1" and err.errors[0].type == "int_type"


def test_unknown_schema_version_is_refused_with_the_supported_ones() -> None:
    doc = snapshot_doc()
    doc["schema_version"] = 99
    err = reject(doc)
    assert (
        "schema_version" in err.reason
        and "unsupported schema_version 99" in err.reason
        and "[3, 4, 5, 6, 7, 8]" in err.reason
    )


def test_missing_and_extra_fields() -> None:
    doc = snapshot_doc()
    del doc["nodes"]
    doc["surprise"] = 1
    err = reject(doc)
    locs = {e.loc: e.type for e in err.errors}
    assert locs == {"nodes": "missing", "surprise": "extra_forbidden"}


def test_invalid_json_and_non_object() -> None:
    assert "Invalid JSON" in reject(b'{"cluster": ').reason
    assert "QueueSnapshot" in reject(b"[1, 2, 3]").reason


def test_non_finite_and_negative_values() -> None:
    doc = snapshot_doc()
    doc["pending"]["est_runtime_s"][0] = -1.0  # type: ignore[index]
    assert "pending.est_runtime_s.0" in reject(doc).reason
    with pytest.raises(ValueError, match="finite"):
        PendingJob(job_id="x", submit_s=float("nan"), gpus=1, est_runtime_s=1.0)


def test_fractional_share_needs_one_gpu() -> None:
    with pytest.raises(ValueError, match="requires gpus == 1"):
        PendingJob(job_id="x", submit_s=0.0, gpus=2, gpu_milli=500, est_runtime_s=1.0)


def test_job_count_limit_is_configurable() -> None:
    data = encode(snapshot(n_jobs=5))
    assert len(decode(QueueSnapshot, data).pending) == 5
    err = reject(data, limits=Limits(max_jobs=4))
    assert "pending holds 5 entries, more than the limit of 4" in err.reason


def test_byte_limit_is_checked_before_parsing_and_on_encode() -> None:
    limits = Limits(max_message_bytes=2048)
    err = reject(b"x" * 5000, limits=limits)
    assert "5000 bytes exceeds the limit of 2048" in err.reason
    with pytest.raises(MessageError, match="more than the limit of 2048 bytes"):
        encode(snapshot(n_jobs=40), limits)


def test_duplicates_and_unknown_nodes_are_refused() -> None:
    doc = snapshot_doc()
    doc["pending"]["job_id"][1] = "j0"  # type: ignore[index]
    assert "'j0' appears more than once" in reject(doc).reason
    doc = snapshot_doc()
    doc["running"]["node_index"][0] = 4  # type: ignore[index]
    assert "running job 'r0' is on node index 4, the snapshot has 4 nodes" in reject(doc).reason
    doc = version_3_running(snapshot_doc())
    doc["running"]["nodes"][0] = "ghost"  # type: ignore[index]
    assert "running job 'r0' is on node 'ghost', absent from nodes" in reject(doc).reason
    doc = snapshot_doc()
    doc["nodes"]["name"][1] = doc["nodes"]["name"][0]  # type: ignore[index]
    assert "node name must be unique" in reject(doc).reason


def test_running_jobs_and_nodes_travel_as_columns_of_equal_length() -> None:
    doc = snapshot_doc()
    assert isinstance(doc["running"], dict) and isinstance(doc["nodes"], dict)
    assert doc["running"]["job_id"] == ["r0"] and doc["nodes"]["name"] == ["v0", "v1", "t0", "t1"]
    doc["nodes"]["free_gpus"] = doc["nodes"]["free_gpus"][:3]  # type: ignore[index]
    assert "nodes.free_gpus has 3 entries, expected 4 (as nodes.name)" in reject(doc).reason
    doc = snapshot_doc()
    doc["nodes"]["free_gpus"][2] = 65  # type: ignore[index]
    err = reject(doc)
    assert err.errors[0].loc == "nodes.free_gpus.2" and "less than or equal to 64" in err.reason
    doc = snapshot_doc()
    doc["running"]["gpu_milli"] = [500]  # type: ignore[index]
    assert "running job 'r0' (entry 0): gpu_milli 500 < 1000 (a GPU share) requires gpus == 1" in (
        reject(doc).reason
    )


def test_pending_jobs_travel_as_columns_and_read_back_as_rows() -> None:
    snap = snapshot(n_jobs=3)
    doc = snapshot_doc()
    assert isinstance(doc["pending"], dict) and doc["pending"]["job_id"] == ["j0", "j1", "j2"]
    assert [j.job_id for j in snap.pending] == ["j0", "j1", "j2"] and snap.pending[-1].job_id == "j2"
    assert PendingJobs.of(list(snap.pending)) == snap.pending
    assert snap.pending.take([2, 0]).job_id == ("j2", "j0") and snap.pending.take([0, 1, 2]) is snap.pending
    with pytest.raises(IndexError, match="pending row 3 out of range"):
        snap.pending[3]
    doc["pending"]["qos"] = doc["pending"]["qos"][:1]  # type: ignore[index]
    assert "pending.qos has 1 entries, expected 3 (as pending.job_id)" in reject(doc).reason
    doc = snapshot_doc()
    doc["pending"]["gpu_milli"][0] = 500  # type: ignore[index]
    doc["pending"]["gpus"][0] = 2  # type: ignore[index]
    assert "pending job 'j0' (entry 0): gpu_milli 500 < 1000 (a GPU share) requires gpus == 1" in (
        reject(doc).reason
    )


def test_a_running_jobs_nodes_are_flat_with_a_count_per_job() -> None:
    rows = [
        RunningJob(job_id="a", nodes=("v0", "v1"), gpus=8, start_s=0.0, est_end_s=9.0),
        RunningJob(job_id="b", nodes=("t0",), gpus=1, gpu_milli=250, start_s=1.0, est_end_s=5.0),
    ]
    cols = RunningJobs.of(rows)
    assert cols.nodes == ("v0", "v1", "t0") and cols.node_count == (2, 1)
    assert cols.node_lists() == [("v0", "v1"), ("t0",)] and cols.first_nodes() == ("v0", "t0")
    assert list(cols) == rows and cols.take([1]).job_id == ("b",)
    with pytest.raises(
        ValueError, match=r"running.nodes has 2 entries, expected 3 \(the sum of running.node_count\)"
    ):
        RunningJobs(**{**cols.model_dump(), "nodes": ("v0", "v1")})


def version_3_running(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a snapshot's JSON) with its running jobs' nodes as names, version 3's form."""
    names, running = doc["nodes"]["name"], doc["running"]
    running["nodes"] = [names[i] for i in running.pop("node_index")]
    doc["schema_version"] = 3
    return doc


def test_running_jobs_nodes_travel_as_indices_into_the_node_table() -> None:
    rows = [
        RunningJob(job_id="a", nodes=("t1", "v0"), gpus=8, start_s=0.0, est_end_s=9.0),
        RunningJob(job_id="b", nodes=("t0",), gpus=1, gpu_milli=250, start_s=1.0, est_end_s=5.0),
    ]
    base = snapshot()
    snap = QueueSnapshot(
        cluster=base.cluster,
        correlation_id=base.correlation_id,
        time=base.time,
        sequence=base.sequence,
        pending=base.pending,
        nodes=base.nodes,
        running=RunningJobs.of(rows),
    )
    assert snap.nodes.name == ("v0", "v1", "t0", "t1")
    assert snap.running.node_index == (3, 0, 2) and snap.running.nodes == ("t1", "v0", "t0")
    doc = array_form(json.loads(encode(snap)))
    assert doc["running"]["node_index"] == [3, 0, 2] and "nodes" not in doc["running"]
    back = decode(QueueSnapshot, encode(snap))
    assert back == snap and list(back.running) == rows and back.running.first_node_index() == (3, 2)
    # version 3's names are read too, and give the same snapshot
    old = decode(QueueSnapshot, json.dumps(version_3_running(doc)).encode())
    assert old.running == snap.running and old.running.node_index == (3, 0, 2)
    # both forms given: they must agree
    both = array_form(json.loads(encode(snap)))
    both["running"]["nodes"] = ["t1", "v1", "t0"]
    assert "running.nodes entry 1 ('v1') is not node_index 0 ('v0')" in reject(both).reason
    both["running"]["nodes"] = ["t1", "v0", "t0"]
    assert decode(QueueSnapshot, json.dumps(both).encode()) == snap
    short = array_form(json.loads(encode(snap)))
    short["running"]["node_index"] = [3, 0]
    assert "running.node_index has 2 entries, expected 3 (the sum of running.node_count)" in (
        reject(short).reason
    )


def test_placements_travel_as_columns_with_features_per_job() -> None:
    rows = [
        JobPlacement(
            job_id="a", rank=0, priority=2.0, nodes=("v0", "v1"), mode="spread", features={"x": 0.5}
        ),
        JobPlacement(job_id="b", rank=1, priority=1.0, reserved_s=30.0, features={"x": 0.25}),
    ]
    cols = Placements.of(rows)
    assert cols.node_count == (2, 0) and cols.feature_columns == ("x",) and cols.features == ((0.5,), (0.25,))
    assert list(cols) == rows and cols.placed() == rows[:1]
    with pytest.raises(ValueError, match=r"float table row 1 has 2 entries, expected 1 \(as row 0\)"):
        Placements(**{**cols.model_dump(), "features": ((0.5,), (0.25, 1.0))})
    with pytest.raises(
        ValueError, match=r"placements.features rows have 2 entries, expected 1 \(feature_columns\)"
    ):
        Placements(**{**cols.model_dump(), "features": ((0.5, 1.0), (0.25, 1.0))})
    with pytest.raises(ValueError, match=r"placements\.features has 1 rows, expected 2 or none"):
        Placements(**{**cols.model_dump(), "features": ((0.5,),)})
    bare = Placements.of([JobPlacement(job_id="c", rank=0, priority=1.0)])
    assert bare.features == () and bare[0].features == {}
    # on the wire the features are packed float64 (the very bits); version 3's rows are read too
    packed = json.loads(cols.model_dump_json())["features"]
    assert packed["dtype"] == "<f8" and (packed["rows"], packed["cols"]) == (2, 1)
    assert Placements.model_validate_json(cols.model_dump_json()) == cols
    rows_form = {**json.loads(cols.model_dump_json()), "features": [[0.5], [0.25]]}
    assert Placements.model_validate_json(json.dumps(rows_form)) == cols
    assert Placements.model_validate_json(bare.model_dump_json()) == bare


def test_the_version_2_pending_rows_are_refused_with_the_field_named() -> None:
    doc = snapshot_doc()
    columns = doc["pending"]
    assert isinstance(columns, dict)
    doc["pending"] = [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    err = reject(doc)
    assert err.errors[0].loc == "pending" and "pending: Input should be an object" in err.reason


def test_the_version_1_row_format_is_refused_with_the_field_named() -> None:
    doc = snapshot_doc()
    columns = doc["nodes"]
    assert isinstance(columns, dict)
    doc["nodes"] = [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    err = reject(doc)
    assert err.errors[0].loc == "nodes" and "nodes: Input should be an object" in err.reason


def test_rows_round_trip_through_the_columns() -> None:
    snap = snapshot()
    rows = list(snap.nodes)
    assert [r.name for r in rows] == list(snap.nodes.name) and rows[3].state == "drain"
    assert NodeStates.of(rows) == snap.nodes
    assert RunningJobs.of(list(snap.running)) == snap.running and len(snap.running) == 1
    assert snap.running[0].nodes == ("v1",) and snap.running[0].gpu_milli == 1000


def test_derived_messages_check_their_shapes() -> None:
    fm = features()
    bad_rows = json.loads(encode(fm)) | {"values": [[0.1, 0.2]]}
    assert "values has 1 rows, expected one per job" in reject(bad_rows, FeatureMatrix).reason
    twice = array_form(json.loads(encode(fm)))
    twice["jobs"]["job_id"][1] = twice["jobs"]["job_id"][0]
    assert "jobs job_id must be unique" in reject(twice, FeatureMatrix).reason
    wrong_origin = json.loads(encode(priorities(fm)))
    wrong_origin["matrix"]["correlation_id"] = "other"
    assert "matrix belongs to cluster" in reject(wrong_origin, PriorityVector).reason
    pv = json.loads(encode(priorities(fm))) | {"priorities": [1.0]}
    assert "priorities has 1 entries, expected 3" in reject(pv, PriorityVector).reason


def test_outcome_metrics_are_derived_and_times_ordered() -> None:
    o = outcome()
    assert (o.wait_s, o.jct_s) == (101.0, 701.0)
    assert o.bsld() == pytest.approx(701.0 / 600.0)
    with pytest.raises(ValueError, match=r"end_s 1\.0 is before start_s 101\.0"):
        JobOutcome.model_validate(o.model_dump() | {"end_s": 1.0}, strict=False)


@pytest.mark.parametrize("name", ["a.b", "*", ">", "", " x", "x y", "a" * 64, "-a", "ü"])
def test_cluster_names_that_would_break_subjects(name: str) -> None:
    with pytest.raises(SubjectError, match="not usable in a subject"):
        validate_cluster_name(name)
    with pytest.raises(SubjectError):
        Subjects().of(name, "snapshots")
    doc = snapshot_doc() | {"cluster": name}
    assert "cluster" in reject(doc).errors[0].loc


def test_subjects_are_built_and_parsed_in_one_place() -> None:
    s = Subjects()
    assert s.of("alibaba-openb", "snapshots") == "hylo.v1.alibaba-openb.snapshots"
    assert s.all_clusters("dead") == "hylo.v1.*.dead"
    assert s.parse("hylo.v1.philly.outcomes") == ("philly", "outcomes")
    for bad in ("hylo.v1.philly", "other.v1.philly.outcomes", "hylo.v1.philly.nope"):
        with pytest.raises(SubjectError):
            s.parse(bad)
    with pytest.raises(SubjectError, match="subject root"):
        Subjects(root="a.b")
    assert Subjects(root="t123").of("c", "models") == "t123.v1.c.models"


def test_message_ids_are_deterministic() -> None:
    a, b = snapshot(), snapshot()
    assert a.message_id() == b.message_id() == "snapshots.c1.corr1"
    assert outcome().message_id() == outcome().message_id()
    assert outcome().message_id().startswith("outcomes.c1.j0.")
    # a different report of the same job gets another id: it reaches the recorder, which records it as
    # a conflict, instead of being dropped by the stream's duplicate window
    later = outcome().model_copy(update={"end_s": 702.0})
    assert later.message_id() != outcome().message_id()


def test_dead_letter_bounds_hostile_input() -> None:
    payload = b"\xff\xfe" + b"A" * 500_000
    headers = {f"h{i}": "v" * 5000 for i in range(100)}
    letter = DeadLetter.build(
        cluster="c1",
        stage="featurizer",
        reason="bad\nthing",
        subject="hylo.v1.c1.snapshots",
        payload=payload,
        headers=headers,
    )
    again = decode(DeadLetter, encode(letter))
    assert again.payload_bytes == len(payload) and len(again.payload_excerpt) <= 2048
    assert again.payload_excerpt.startswith("\\xff\\xfe") and len(again.headers) == 32
    assert again.reason == "bad; thing" and len(encode(letter)) < 64 * 1024


def test_json_schema_files_are_up_to_date() -> None:
    for name, text in schema_documents().items():
        path = DEFAULT_DIR / name
        assert path.exists(), f"{path} missing: run python -m shared.schemas.jsonschema"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is stale: run python -m shared.schemas.jsonschema"
        )


def test_docs_name_every_field_of_every_message() -> None:
    from shared.config import PROJECT_ROOT
    from shared.schemas import MESSAGE_TYPES, JobPlacement, NodeState, RunningJob
    from shared.schemas.messages import ExcludedJob

    doc = (PROJECT_ROOT / "docs" / "messages.md").read_text(encoding="utf-8")
    models: list[type[BaseModel]] = [
        *MESSAGE_TYPES.values(),
        DeadLetter,
        PendingJob,
        RunningJob,
        NodeState,
        JobPlacement,
        ExcludedJob,
    ]
    missing = [f"{m.__name__}.{f}" for m in models for f in m.model_fields if f"`{f}`" not in doc]
    assert not missing, f"docs/messages.md does not mention: {missing}"


def test_job_ids_in_columns_refuse_whitespace_and_control_characters() -> None:
    for where in ("pending", "running"):
        doc = snapshot_doc()
        doc[where]["job_id"][0] = "bad id"  # type: ignore[index]
        err = reject(doc)
        assert f"{where}.job_id entry 0 ('bad id') contains whitespace or a control character" in err.reason
    doc = version_3_running(snapshot_doc())
    doc["running"]["nodes"][0] = "v0\x00"  # type: ignore[index]
    assert "is on node 'v0\\x00', absent from nodes" in reject(doc).reason
