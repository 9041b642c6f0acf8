"""A running job's exact allocation (schema version 6): per-node GPUs, CPUs, memory, which GPUs and a
fractional job's GPU, optional columns of ``RunningJobs`` flat like its nodes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from shared.schemas import (
    SCHEMA_VERSION,
    MessageError,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
    decode,
    encode,
)
from shared.schemas.base import SUPPORTED_VERSIONS
from shared.schemas.numbers import pack_column
from tests.schemas.message_factories import array_form, snapshot

NEW_COLUMNS = ("node_gpus", "node_cpus_milli", "node_mem_mib", "node_gpu_mask", "share_gpu")


def rows() -> list[RunningJob]:
    """A gang of whole GPUs over two nodes, a fractional job and a CPU-only job."""
    return [
        RunningJob(
            job_id="a",
            nodes=("v0", "v1"),
            gpus=8,
            start_s=0.0,
            est_end_s=9.0,
            node_gpus=(6, 2),
            node_cpus_milli=(6000, 2000),
            node_mem_mib=(60000, 20000),
            node_gpu_mask=(0b00111111, 0b11000000),
        ),
        RunningJob(
            job_id="b",
            nodes=("t0",),
            gpus=1,
            gpu_milli=250,
            start_s=1.0,
            est_end_s=5.0,
            node_gpus=(0,),
            node_cpus_milli=(500,),
            node_mem_mib=(1024,),
            node_gpu_mask=(0,),
            share_gpu=2,
        ),
        RunningJob(
            job_id="c",
            nodes=("v1",),
            gpus=0,
            start_s=2.0,
            est_end_s=7.0,
            node_gpus=(0,),
            node_cpus_milli=(1000,),
            node_mem_mib=(10,),
            node_gpu_mask=(0,),
        ),
    ]


def bare(row: RunningJob) -> RunningJob:
    """``row`` without its allocation."""
    return RunningJob(**row.model_dump(exclude=set(NEW_COLUMNS)))


def snap_with(running: RunningJobs) -> QueueSnapshot:
    base = snapshot()
    return QueueSnapshot(
        cluster=base.cluster,
        correlation_id=base.correlation_id,
        time=base.time,
        sequence=base.sequence,
        pending=base.pending,
        nodes=base.nodes,
        running=running,
    )


def doc_of(snap: QueueSnapshot) -> dict[str, Any]:
    """``snap``'s JSON with every column as a JSON array (the form tests edit)."""
    doc: dict[str, Any] = array_form(json.loads(encode(snap)))
    return doc


def reject(doc: dict[str, Any]) -> str:
    with pytest.raises(MessageError) as info:
        decode(QueueSnapshot, json.dumps(doc).encode())
    return info.value.reason


# -- rows and columns ---------------------------------------------------------------------------------


def test_rows_build_flat_columns_and_iterate_back() -> None:
    cols = RunningJobs.of(rows())
    assert cols.allocations_given()
    assert cols.nodes == ("v0", "v1", "t0", "v1") and cols.node_count == (2, 1, 1)
    # the per-node columns are flat, aligned with the nodes; share_gpu is one per job
    assert cols.node_gpus == (6, 2, 0, 0)
    assert cols.node_cpus_milli == (6000, 2000, 500, 1000)
    assert cols.node_mem_mib == (60000, 20000, 1024, 10)
    assert cols.node_gpu_mask == (0b00111111, 0b11000000, 0, 0)
    assert cols.share_gpu == (-1, 2, -1) and cols.share_gpus() == (-1, 2, -1)
    assert list(cols) == rows()
    assert cols[0].node_gpus == (6, 2) and cols[1].share_gpu == 2 and cols[-1].node_mem_mib == (10,)
    assert type(cols[0].node_gpus) is tuple and type(cols[0].node_gpus[0]) is int


def test_take_keeps_the_allocation() -> None:
    cols = RunningJobs.of(rows())
    taken = cols.take([2, 0])
    assert list(taken) == [rows()[2], rows()[0]]
    assert taken.node_gpus == (0, 6, 2) and taken.node_gpu_mask == (0, 0b00111111, 0b11000000)
    assert taken.share_gpu == (-1, -1) and taken.allocations_given()
    assert cols.take([0, 1, 2]) is cols
    assert list(cols.take([])) == [] and not cols.take([]).allocations_given()


def test_columns_without_allocations() -> None:
    cols = RunningJobs.of(bare(r) for r in rows())
    assert not cols.allocations_given()
    assert all(getattr(cols, c) == () for c in NEW_COLUMNS)
    assert cols.share_gpus() == (-1, -1, -1)
    assert list(cols) == [bare(r) for r in rows()] and cols[1].share_gpu == -1 and cols[1].node_gpus == ()
    assert not RunningJobs().allocations_given()


def test_mask_and_share_gpu_are_optional_with_the_allocation() -> None:
    no_mask = [r.model_copy(update={"node_gpu_mask": ()}) for r in rows()]
    cols = RunningJobs.of(no_mask)
    assert cols.allocations_given() and cols.node_gpu_mask == () and list(cols) == no_mask
    # share_gpu not given equals -1 for every job (its meaning: not known)
    full = RunningJobs.of(rows())
    fields = {f: getattr(full, f) for f in RunningJobs.model_fields}
    unknown = RunningJobs(**{**fields, "share_gpu": ()})
    minus_one = RunningJobs(**{**fields, "share_gpu": (-1, -1, -1)})
    assert unknown == minus_one and hash(unknown) == hash(minus_one)
    assert unknown != full and list(unknown)[1].share_gpu == -1
    assert unknown.take([1, 0]) == minus_one.take([1, 0])
    # an entry 0 of the mask means "which GPUs is not known", with any node_gpus
    unknown_gpus = rows()[0].model_copy(update={"node_gpu_mask": (0, 0b11000000)})
    assert RunningJob.model_validate(unknown_gpus.model_dump()) == unknown_gpus


def test_equality_and_hash_consider_the_allocation() -> None:
    a, b = RunningJobs.of(rows()), RunningJobs.of(rows())
    assert a == b and hash(a) == hash(b)
    other = rows()
    other[2] = other[2].model_copy(update={"node_mem_mib": (11,)})
    assert RunningJobs.of(other) != a
    assert RunningJobs.of(bare(r) for r in rows()) != a


# -- the wire -----------------------------------------------------------------------------------------


def test_allocations_round_trip_packed_on_the_wire() -> None:
    snap = snap_with(RunningJobs.of(rows()))
    assert snap.schema_version == SCHEMA_VERSION >= 6 and {3, 4, 5, 6} <= SUPPORTED_VERSIONS
    data = encode(snap)
    raw = json.loads(data)
    assert raw["schema_version"] == SCHEMA_VERSION
    for c in NEW_COLUMNS:  # packed like every column of numbers
        assert set(raw["running"][c]) == {"dtype", "base64"}, c
    assert raw["running"]["node_gpus"]["dtype"] == "<i1"
    back = decode(QueueSnapshot, data)
    assert back == snap and list(back.running) == rows() and back.running.allocations_given()
    assert back.running.node_index == (0, 1, 2, 1)
    # the JSON arrays (version 4's form of a column) are read too
    doc = doc_of(snap)
    assert doc["running"]["node_gpus"] == [6, 2, 0, 0] and doc["running"]["share_gpu"] == [-1, 2, -1]
    assert decode(QueueSnapshot, json.dumps(doc).encode()) == snap


def test_a_mask_naming_gpu_63_travels_as_a_json_array() -> None:
    big = rows()
    big[0] = big[0].model_copy(update={"node_gpu_mask": (0b00111111, (1 << 63) | (1 << 62))})
    big[0] = RunningJob.model_validate(big[0].model_dump())
    snap = snap_with(RunningJobs.of(big))
    data = encode(snap)
    assert json.loads(data)["running"]["node_gpu_mask"] == [63, (1 << 63) | (1 << 62), 0, 0]
    back = decode(QueueSnapshot, data)
    assert back == snap and back.running[0].node_gpu_mask == (63, (1 << 63) | (1 << 62))


def test_a_version_5_message_without_the_columns_still_decodes() -> None:
    snap = snap_with(RunningJobs.of(bare(r) for r in rows()))
    doc = doc_of(snap)
    doc["schema_version"] = 5
    for c in NEW_COLUMNS:
        del doc["running"][c]
    old = decode(QueueSnapshot, json.dumps(doc).encode())
    assert old.schema_version == 5 and old.running == snap.running
    assert not old.running.allocations_given() and list(old.running) == [bare(r) for r in rows()]
    # and packed, as a version-5 writer sends it
    packed = json.loads(encode(snap))
    packed["schema_version"] = 5
    for c in NEW_COLUMNS:
        del packed["running"][c]
    assert decode(QueueSnapshot, json.dumps(packed).encode()).running == snap.running


# -- validation: rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "update", "message"),
    [
        (0, {"node_cpus_milli": (), "node_mem_mib": ()}, "running job 'a': node_cpus_milli, node_mem_mib "
         "not given with node_gpus (node_gpus, node_cpus_milli, node_mem_mib are given together)"),
        (0, {"node_gpus": (), "node_cpus_milli": (), "node_mem_mib": ()},
         "running job 'a': node_gpu_mask is given without node_gpus, node_cpus_milli, node_mem_mib"),
        (1, {"node_gpus": (), "node_cpus_milli": (), "node_mem_mib": (), "node_gpu_mask": ()},
         "running job 'b': share_gpu 2 is given without node_gpus, node_cpus_milli, node_mem_mib"),
        (0, {"node_cpus_milli": (6000,)}, "running job 'a': node_cpus_milli has 1 entries, expected 2 (one per node)"),
        (0, {"node_gpu_mask": (63, 192, 0)}, "running job 'a': node_gpu_mask has 3 entries, expected 2 (one per node)"),
        (0, {"node_mem_mib": (60000, -5)}, "running job 'a': node_mem_mib entry 1 is -5, expected at least 0"),
        (0, {"node_cpus_milli": (-1, 2000)}, "running job 'a': node_cpus_milli entry 0 is -1, expected at least 0"),
        (0, {"node_gpus": (-6, 14)}, "running job 'a': node_gpus entry 0 is -6, expected 0 to 64"),
        (0, {"node_gpus": (6, 1)}, "running job 'a': node_gpus (6, 1) sum to 7, expected gpus 8"),
        (1, {"node_gpus": (1,)}, "running job 'b': node_gpus (1,) must be all 0 for a fractional job (gpu_milli 250)"),
        (0, {"node_gpu_mask": (0b111, 0b11000000)},
         "running job 'a': node_gpu_mask entry 0 (0x7) names 3 GPUs, expected node_gpus 6 (or 0: not known)"),
        (2, {"node_gpu_mask": (1,)}, "running job 'c': node_gpu_mask entry 0 (0x1) names 1 GPUs, expected node_gpus 0"),
        (0, {"share_gpu": 3}, "running job 'a': share_gpu 3 must be -1 for a job of whole GPUs (gpu_milli 1000)"),
        (1, {"share_gpu": 64}, "running job 'b': share_gpu is 64, expected -1 to 63"),
        (1, {"share_gpu": -2}, "running job 'b': share_gpu is -2, expected -1 to 63"),
    ],
)  # fmt: skip
def test_a_row_names_the_job_and_the_field(row: int, update: dict[str, Any], message: str) -> None:
    doc = rows()[row].model_dump() | update
    with pytest.raises(ValidationError) as info:
        RunningJob(**doc)
    assert message in str(info.value)


def test_rows_give_a_column_all_or_none() -> None:
    mixed = rows()
    mixed[1] = bare(mixed[1])
    with pytest.raises(
        ValueError,
        match=r"running job 'b' \(entry 1\) does not give node_gpus while job 'a' \(entry 0\) does: a "
        r"column is given for every row or for none",
    ):
        RunningJobs.of(mixed)
    no_mask = rows()
    no_mask[0] = no_mask[0].model_copy(update={"node_gpu_mask": ()})
    with pytest.raises(ValueError, match=r"running job 'a' \(entry 0\) does not give node_gpu_mask"):
        RunningJobs.of(no_mask)


# -- validation: columns on the wire ------------------------------------------------------------------


def edited(**changes: Any) -> dict[str, Any]:
    doc = doc_of(snap_with(RunningJobs.of(rows())))
    for c, v in changes.items():
        doc["running"][c] = v
    return doc


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"node_cpus_milli": []}, "running.node_cpus_milli not given with running.node_gpus, "
         "running.node_mem_mib (node_gpus, node_cpus_milli, node_mem_mib are given together)"),
        ({"node_gpus": [], "node_cpus_milli": [], "node_mem_mib": []},
         "running.node_gpu_mask is given without running.node_gpus, running.node_cpus_milli, running.node_mem_mib"),
        ({"node_gpus": [], "node_cpus_milli": [], "node_mem_mib": [], "node_gpu_mask": []},
         "running.share_gpu is given without running.node_gpus"),
        ({"node_mem_mib": [60000, 20000, 1024]}, "running.node_mem_mib has 3 entries, expected 4 (one per node "
         "of every job, the sum of running.node_count): the entries of job 'c' (entry 2) onward are missing"),
        ({"node_gpu_mask": [63, 192, 0, 0, 0]}, "running.node_gpu_mask has 5 entries, expected 4 (one per node "
         "of every job, the sum of running.node_count): 1 more than the last job, 'c' (entry 2), needs"),
        ({"share_gpu": [-1, 2]}, "running.share_gpu has 2 entries, expected 3 (as running.job_id)"),
        ({"node_cpus_milli": [6000, -1, 500, 1000]},
         "running job 'a' (entry 0): node_cpus_milli entry 1 is -1, expected at least 0"),
        ({"node_mem_mib": [60000, 20000, 1024, -10]},
         "running job 'c' (entry 2): node_mem_mib entry 0 is -10, expected at least 0"),
        ({"node_gpus": [6, 2, 65, 0]}, "running job 'b' (entry 1): node_gpus entry 0 is 65, expected 0 to 64"),
        ({"node_gpu_mask": [63, -192, 0, 0]},
         "running job 'a' (entry 0): node_gpu_mask entry 1 is -192, expected 0 to 18446744073709551615"),
        ({"node_gpus": [6, 1, 0, 0]}, "running job 'a' (entry 0): node_gpus (6, 1) sum to 7, expected gpus 8"),
        ({"node_gpus": [6, 2, 1, 0]},
         "running job 'b' (entry 1): node_gpus (1,) must be all 0 for a fractional job (gpu_milli 250)"),
        ({"node_gpu_mask": [63, 0b11100000, 0, 0]},
         "running job 'a' (entry 0): node_gpu_mask entry 1 (0xe0) names 3 GPUs, expected node_gpus 2"),
        ({"share_gpu": [-1, 2, 0]},
         "running job 'c' (entry 2): share_gpu 0 must be -1 for a job of whole GPUs (gpu_milli 1000)"),
        ({"share_gpu": [-1, 64, -1]}, "running job 'b' (entry 1): share_gpu is 64, expected -1 to 63"),
    ],
)  # fmt: skip
def test_a_column_error_names_the_job_and_the_field(changes: dict[str, Any], message: str) -> None:
    assert message in reject(edited(**changes))


def test_packed_columns_are_checked_the_same_way() -> None:
    doc = edited(node_cpus_milli=pack_column([6000, -1, 500, 1000], "int"))
    assert "running job 'a' (entry 0): node_cpus_milli entry 1 is -1, expected at least 0" in reject(doc)
    doc = edited(node_gpus=pack_column([6, 1, 0, 0], "int"))
    assert "running job 'a' (entry 0): node_gpus (6, 1) sum to 7, expected gpus 8" in reject(doc)
    doc = edited(share_gpu=pack_column([-1, -3, -1], "int"))
    assert "running job 'b' (entry 1): share_gpu is -3, expected -1 to 63" in reject(doc)
