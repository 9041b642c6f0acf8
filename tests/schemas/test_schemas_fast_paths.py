"""The decoding and encoding fast paths decide exactly as the slow checks they stand in for.

Each fast path (column-wide job id check, share check, row widths, the vector's matrix re-sent as
received, eligibility per distinct request, binding kept per request and node layouts kept per
spec across snapshots) is compared with the plain rule on inputs that pass and inputs that fail,
and a failure still names the row at fault.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec
from shared.schemas import (
    DEFAULT_LIMITS,
    FeatureMatrix,
    Limits,
    MessageError,
    PriorityVector,
    QueueSnapshot,
    decode,
    encode,
    views,
)
from shared.schemas.codec import RECEIVED, MissingReference, ReceivedJson
from shared.schemas.messages import ExcludedJob, MatrixRef
from shared.schemas.snapshot import NodeStates, PendingJob, PendingJobs
from shared.schemas.views import (
    PendingBinding,
    _eligible,
    _fits_distinct,
    _fits_empty,
    _requests,
    bind_pending,
    node_layout,
)
from shared.service.clusters import load_specs
from tests.schemas.message_factories import array_form, features, priorities, snapshot, tiny_spec


def snapshot_doc() -> dict[str, object]:
    doc: dict[str, object] = array_form(json.loads(encode(snapshot())))
    return doc


def reason(doc: object, model: type = QueueSnapshot) -> str:
    with pytest.raises(MessageError) as info:
        decode(model, json.dumps(doc).encode())
    return info.value.reason


@pytest.mark.parametrize("bad", ["a b", "a\tb", "a\x00", "a\x7f", "a\u2003b", "a\u2028b", "a\x85b"])
def test_job_ids_with_whitespace_or_control_characters_are_refused(bad: str) -> None:
    for where in ("pending", "running"):
        doc = snapshot_doc()
        doc[where]["job_id"][0] = bad  # type: ignore[index]
        assert f"{where}.job_id entry 0 ({bad!r}) contains whitespace or a control character" in reason(doc)


@pytest.mark.parametrize("good", ["job-é", "a\u200bb", "日本-1", "x\xadz"])
def test_job_ids_the_printable_shortcut_rejects_but_the_rule_allows_are_accepted(good: str) -> None:
    """Format characters and non-ASCII letters are valid job ids: the exact rule decides them."""
    doc = snapshot_doc()
    doc["pending"]["job_id"][0] = good  # type: ignore[index]
    assert decode(QueueSnapshot, json.dumps(doc).encode()).pending.job_id[0] == good


def test_a_share_on_several_gpus_is_refused_naming_the_row() -> None:
    doc = snapshot_doc()
    running = doc["running"]
    assert isinstance(running, dict)
    running["gpu_milli"][0], running["gpus"][0] = 500, 1  # a valid share
    decode(QueueSnapshot, json.dumps(doc).encode())
    running["gpus"][0] = 2
    assert "running job 'r0' (entry 0): gpu_milli 500 < 1000" in reason(doc)
    doc = snapshot_doc()
    pending = doc["pending"]
    assert isinstance(pending, dict)
    pending["gpu_milli"][2], pending["gpus"][2] = 250, 3
    assert "pending job 'j2' (entry 2): gpu_milli 250 < 1000 (a GPU share) requires gpus == 1" in reason(doc)
    pending["gpus"][2] = 0  # a share of no GPU is refused as well
    assert "requires gpus == 1, got gpus 0" in reason(doc)


def test_a_matrix_row_of_the_wrong_width_is_named() -> None:
    doc = json.loads(encode(features()))
    doc["values"] = [list(row) for row in features().values]  # the version-3 form: rows of numbers
    doc["values"][2] = [0.1]
    assert "values: Value error, float table row 2 has 1 entries, expected 2" in reason(doc, FeatureMatrix)
    doc["values"] = [[0.1]] * len(doc["values"])  # every row one entry short of the columns
    assert "values rows have 1 entries, expected 2 (columns)" in reason(doc, FeatureMatrix)


def test_a_vector_re_sends_its_received_matrix_byte_for_byte() -> None:
    sent = features()
    raw = encode(sent)
    received = decode(FeatureMatrix, raw)
    assert RECEIVED.of(received) == raw and RECEIVED.of(sent) is None
    vector = priorities(received)
    assert vector.matrix is received
    spliced = encode(vector)
    assert spliced.endswith(b',"matrix":' + raw + b"}")
    fresh = vector.__pydantic_serializer__.to_json(vector)
    assert json.loads(spliced) == json.loads(fresh)  # the same document, the matrix moved to the end
    assert decode(PriorityVector, spliced) == vector == decode(PriorityVector, fresh)


def test_a_copy_of_a_received_matrix_is_encoded_afresh() -> None:
    received = decode(FeatureMatrix, encode(features()))
    changed = received.model_copy(update={"latencies_ms": {"featurizer": 9.5}})
    assert RECEIVED.of(changed) is None
    data = encode(priorities(changed))
    assert decode(PriorityVector, data).matrix.latencies_ms == {"featurizer": 9.5}


def test_a_padded_received_matrix_over_the_limit_is_encoded_afresh() -> None:
    """A foreign publisher's whitespace is spliced in as received, unless that breaks the size limit."""
    raw = encode(features())
    padded = raw[:-1] + b" " * 4000 + b"}"
    received = decode(FeatureMatrix, padded)
    assert RECEIVED.of(received) == padded
    vector = priorities(received)
    spliced = encode(vector)
    assert padded in spliced  # under the default limit: the bytes as received
    fresh = vector.__pydantic_serializer__.to_json(vector)
    limit = Limits(max_message_bytes=max(1024, len(fresh) + 10))
    assert len(spliced) > limit.max_message_bytes >= len(fresh)
    tight = encode(vector, limit)
    assert padded not in tight and decode(PriorityVector, tight, limit) == vector


def test_received_json_keeps_only_the_newest_few() -> None:
    kept = [decode(FeatureMatrix, encode(features())) for _ in range(RECEIVED.keep + 1)]
    assert RECEIVED.of(kept[0]) is None
    assert all(RECEIVED.of(m) is not None for m in kept[1:])
    small = ReceivedJson(keep=8, max_bytes=2 * len(encode(features())))
    matrices = [features() for _ in range(3)]
    for m in matrices:
        small.remember(m, encode(m))
    assert [small.of(m) is not None for m in matrices] == [False, True, True]  # by bytes
    huge = features()
    small.remember(huge, b"x" * (small.max_bytes + 1))
    assert small.of(huge) is not None and all(small.of(m) is None for m in matrices)  # the newest stays


@pytest.mark.parametrize("spec_name", ["tiny", "alibaba-openb"])
def test_eligibility_per_distinct_request_is_the_per_job_rule(spec_name: str) -> None:
    spec = tiny_spec() if spec_name == "tiny" else load_specs({"k": "alibaba-openb"})["k"]
    rng = np.random.default_rng(7)
    for n in (0, 5, 63, 64, 300, 1500):
        gpus = rng.choice([0, 1, 2, 3, 4, 8, 16, 64], n).astype(np.int64)
        milli = np.where(gpus == 1, rng.choice([100, 500, 1000], n), 1000).astype(np.int64)
        cpus = rng.choice([0, 1000, 4000, 16000, 96000, 500000], n).astype(np.int64)
        mem = rng.choice([0, 1024, 65536, 400000, 10**7], n).astype(np.int64)
        for slack in (0, 1, 3):
            want = _fits_empty(spec, gpus, milli, cpus, mem, slack)
            got = _fits_distinct(spec, gpus, milli, cpus, mem, slack)
            assert got.shape == want.shape and (got == want).all()
            assert n < 64 or (want.any() and not want.all())  # the draws exercise both answers


def test_a_vector_ending_with_a_decoded_matrix_reuses_it() -> None:
    raw = encode(features())
    matrix = decode(FeatureMatrix, raw)  # as the placer decodes it ahead
    data = encode(priorities(decode(FeatureMatrix, raw)))  # as the prioritizer sends it
    vector = decode(PriorityVector, data)
    whole = PriorityVector.model_validate_json(data, context=DEFAULT_LIMITS.context())
    assert vector.matrix is matrix or RECEIVED.of(vector.matrix) == raw
    assert vector == whole and vector.model_fields_set == whole.model_fields_set
    # under other limits the remembered matrix does not count: the payload is decoded whole
    other = decode(PriorityVector, data, Limits(max_jobs=500))
    assert other == whole and RECEIVED.of(other.matrix) is None


def test_a_vector_that_differs_anywhere_is_decoded_whole() -> None:
    raw = encode(features())
    decode(FeatureMatrix, raw)
    data = encode(priorities(decode(FeatureMatrix, raw)))

    def head(row: tuple[float, float]) -> bytes:  # the packed values' first 15 bytes: 20 characters
        return b'"base64":"' + base64.b64encode(struct.pack("<2d", *row)[:15])

    assert head((0.0, 0.5)) in data
    changed = data.replace(head((0.0, 0.5)), head((0.25, 0.5)), 1)
    assert changed != data
    assert decode(PriorityVector, changed).matrix.values[0] == (0.25, 0.5)
    doc = json.loads(data)
    # the head is invalid: the whole decode names why
    doc["priorities"] = array_form(doc["priorities"])[:-1]
    head = json.dumps({k: v for k, v in doc.items() if k != "matrix"}).encode()
    bad = head[:-1] + b', "matrix":' + raw + b"}"
    with pytest.raises(MessageError, match="priorities has 2 entries, expected 3"):
        decode(PriorityVector, bad)
    doc = json.loads(data)
    doc["policy"] = ""
    head = json.dumps({k: v for k, v in doc.items() if k != "matrix"}, separators=(",", ":")).encode()
    with pytest.raises(MessageError, match="policy"):
        decode(PriorityVector, head[:-1] + b',"matrix":' + raw + b"}")


def _random_jobs(rng: np.random.Generator, n: int, spec: ClusterSpec, start: int = 0) -> PendingJobs:
    types = [(), *((t,) for t in spec.gpu_types), tuple(spec.gpu_types[:2]), ("nope",)]
    parts = ["a", "b", "default", "elsewhere"]
    rows = []
    for i in range(n):
        gpus = int(rng.choice([0, 1, 1, 2, 4, 8, 16, 64]))
        rows.append(
            PendingJob(
                job_id=f"j{start + i}",
                submit_s=float(i),
                gpus=gpus,
                gpu_milli=int(rng.choice([100, 500, 1000])) if gpus == 1 else 1000,
                gpu_types=types[int(rng.integers(len(types)))],
                cpus_milli=int(rng.choice([-1, 0, 1000, 16000, 500000])),
                mem_mib=int(rng.choice([-1, 0, 1024, 65536, 10**7])),
                est_runtime_s=60.0,
                partition=parts[int(rng.integers(len(parts)))],
            )
        )
    return PendingJobs.of(rows)


def _bound_per_job(jobs: PendingJobs, spec: ClusterSpec, slack: int) -> PendingBinding:
    """Binding's rules job by job (``_requests`` and ``_eligible``), the reference of ``bind_pending``."""
    kept, cpus, mems, groups, excluded = [], [], [], [], []
    for i, job in enumerate(jobs):
        c, m = _requests(job, spec)
        on, why = _eligible(spec, job, c, m, slack)
        if on:
            kept.append(i)
            cpus.append(c)
            mems.append(m)
            groups.append(on)
        else:
            excluded.append(ExcludedJob(job_id=job.job_id, reason=why))
    eligible = np.zeros((len(kept), len(spec.node_groups)), dtype=bool)
    for row, on in enumerate(groups):
        eligible[row, list(on)] = True
    return PendingBinding(tuple(kept), tuple(cpus), tuple(mems), tuple(groups), tuple(excluded), eligible)


@pytest.mark.parametrize("spec_name", ["tiny", "alibaba-openb"])
def test_binding_per_distinct_request_is_the_per_job_rule_whatever_was_bound_before(
    spec_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request table (kept per spec and slack, grown and restarted) binds as the per-job rules."""
    spec = tiny_spec() if spec_name == "tiny" else load_specs({"k": "alibaba-openb"})["k"]
    rng = np.random.default_rng(11)
    monkeypatch.setattr(views, "_KEYS_KEPT", 200)  # the table restarts along the way
    for round_ in range(6):
        jobs = _random_jobs(rng, [0, 5, 300, 80, 700, 1][round_], spec, start=1000 * round_)
        again = jobs.take(list(range(len(jobs)))[::-1])  # requests all known: looked up only
        for slack, batch in ((0, jobs), (2, jobs), (0, again), (2, again)):
            got, want = bind_pending(batch, spec, slack), _bound_per_job(batch, spec, slack)
            assert (got.kept, got.cpus_milli, got.mem_mib) == (want.kept, want.cpus_milli, want.mem_mib)
            assert got.groups == want.groups and got.excluded == want.excluded
            assert got.eligible.shape == want.eligible.shape and (got.eligible == want.eligible).all()
    assert 0 < len(views._TABLES[(id(spec), 0)][1].index) <= 200


def test_request_table_keeps_known_requests_while_the_new_ones_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table starts over only when its distinct requests would pass the cap, not its jobs."""
    spec = tiny_spec()
    monkeypatch.setattr(views, "_KEYS_KEPT", 50)
    monkeypatch.setattr(views, "_TABLES", {})
    first = _random_jobs(np.random.default_rng(3), 40, spec)
    bind_pending(first, spec, 0)
    known = dict(views._TABLES[(id(spec), 0)][1].index)
    assert 0 < len(known) < 50
    # many jobs of one known request plus one new request: 2 distinct keys, well under the cap
    unseen = first[0].model_copy(update={"job_id": "unseen", "gpus": 3})  # no random job asks for 3
    bind_pending(PendingJobs.of([first[0]] * 400 + [unseen]), spec, 0)
    kept = views._TABLES[(id(spec), 0)][1].index
    assert known.keys() <= kept.keys() and len(kept) >= len(known)


def test_node_layout_kept_from_the_last_snapshot_follows_changed_nodes() -> None:
    """Same names: the placement into groups is reused, free resources read anew; other names: rebuilt."""
    spec = tiny_spec()
    nodes = snapshot().nodes
    first = node_layout(spec, nodes)
    busier = NodeStates.of(n.model_copy(update={"free_gpus": 0, "free_share_milli": 0}) for n in nodes)
    again = node_layout(spec, busier)
    assert again.slot_of is first.slot_of and again.names is first.names
    assert again.free_gpus.tolist() == [0, 0, 0, 0] and first.free_gpus.tolist() == [8, 4, 0, 0]
    reordered = NodeStates.of([nodes[1], nodes[0], nodes[3]])  # v1 first, t0 unreported
    layout = node_layout(spec, reordered)
    views._SHAPES.clear()
    fresh = node_layout(spec, reordered)
    assert layout.names == fresh.names == (("v1", "v0"), ("t1", None))
    assert layout.slot_of == fresh.slot_of == {"v1": 0, "v0": 1, "t1": 2}
    assert layout.group_of == {"v1": 0, "v0": 0, "t1": 1}
    for name in ("free_gpus", "free_share_milli", "free_cpus_milli", "free_mem_mib", "offsets", "up"):
        assert getattr(layout, name).tolist() == getattr(fresh, name).tolist(), name
    assert layout.up.tolist() == [True, True, False, False]  # t1 drains, slot 3 unreported
    with pytest.raises(ValueError, match="the cluster spec lacks"):
        node_layout(spec, NodeStates.of([nodes[0].model_copy(update={"group": "zz"})]))
    with pytest.raises(ValueError, match="free_gpus 9 exceeds"):
        node_layout(
            spec,
            NodeStates.of(
                n.model_copy(update={"free_gpus": 9}) if i == 0 else n for i, n in enumerate(reordered)
            ),
        )


def test_a_vector_names_its_received_matrix_by_reference() -> None:
    sent = features()
    raw = encode(sent)
    received = decode(FeatureMatrix, raw)
    digest = RECEIVED.digest_of(received)
    assert digest == hashlib.sha256(raw).hexdigest() and RECEIVED.digest_of(sent) is None
    vector = priorities(received).model_copy(update={"matrix_ref": MatrixRef(seq=7, sha256=digest)})
    data = encode(vector)
    doc = json.loads(data)
    assert "matrix" not in doc and doc["matrix_ref"] == {"seq": 7, "sha256": digest}
    assert len(data) < 400 < len(raw)
    back = decode(PriorityVector, data)
    assert back == vector and RECEIVED.of(back.matrix) == raw and back.matrix_ref == vector.matrix_ref
    # the nested form (version 3's) is still read and written when there is no reference
    nested = encode(vector.model_copy(update={"matrix_ref": None}))
    assert nested.endswith(b',"matrix":' + raw + b"}") and decode(PriorityVector, nested).matrix == received


def test_a_vector_naming_a_matrix_not_at_hand_or_not_its_own_is_refused() -> None:
    received = decode(FeatureMatrix, encode(features()))
    vector = priorities(received)
    unknown = "ab" * 32
    data = encode(vector.model_copy(update={"matrix_ref": MatrixRef(seq=3, sha256=unknown)}))
    with pytest.raises(MissingReference, match="features stream sequence 3, sha256 abababab") as err:
        decode(PriorityVector, data)
    assert (err.value.kind, err.value.seq, err.value.sha256) == ("features", 3, unknown)
    # a matrix of another snapshot: the digest pairs it, the vector's own checks refuse it
    other = features().model_copy(update={"correlation_id": "other"})
    other_digest = RECEIVED.digest_of(decode(FeatureMatrix, encode(other)))
    assert other_digest is not None
    doc = json.loads(encode(vector.model_copy(update={"matrix_ref": MatrixRef(seq=4, sha256=other_digest)})))
    with pytest.raises(MessageError, match="belongs to cluster 'c1' / correlation 'other'"):
        decode(PriorityVector, json.dumps(doc, separators=(",", ":")).encode())
    doc = json.loads(data)
    del doc["matrix_ref"]
    with pytest.raises(MessageError, match="matrix: Field required"):
        decode(PriorityVector, json.dumps(doc).encode())
    doc = json.loads(data)
    doc["matrix_ref"]["seq"] = 0
    with pytest.raises(MessageError, match=r"matrix_ref\.seq: Input should be greater than or equal to 1"):
        decode(PriorityVector, json.dumps(doc).encode())
