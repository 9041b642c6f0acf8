"""Packed float tables (``shared.schemas.packed``): a FeatureMatrix's values on the wire since version 4
(deflated when that pays since version 5)."""

from __future__ import annotations

import base64
import json
import math
import zlib

import numpy as np
import pytest

from shared.schemas import FeatureMatrix, MessageError, decode, encode
from shared.schemas.packed import FloatRows, pack, unpack
from tests.schemas.message_factories import features


def _doc_with_values(values: object) -> bytes:
    doc = json.loads(encode(features()))
    doc["values"] = values
    return json.dumps(doc).encode()


def test_values_travel_packed_and_come_back_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    m = features()
    table = rng.standard_normal((len(m.jobs), 2)) * np.array([1e-300, 1e300])
    table[0] = (-0.0, 5e-324)  # signed zero and the smallest subnormal survive too
    sent = m.model_copy(update={"values": FloatRows(table.copy())})
    raw = encode(sent)
    doc = json.loads(raw)
    assert set(doc["values"]) == {"dtype", "rows", "cols", "base64"} and doc["values"]["dtype"] == "<f8"
    got = decode(FeatureMatrix, raw)
    assert got.values.array.tobytes() == table.tobytes()
    assert math.copysign(1.0, got.values[0][0]) == -1.0
    assert got == sent


def test_the_version_3_form_rows_of_numbers_is_still_read() -> None:
    m = features()
    rows = [list(r) for r in m.values]
    rows[0][1] = 1  # a JSON integer is a number too
    got = decode(FeatureMatrix, _doc_with_values(rows))
    assert got.values[0] == (m.values[0][0], 1.0) and got.values[1:] == m.values[1:]


def test_float32_tables_are_read() -> None:
    m = features()
    f4 = pack(m.values, "<f4")
    got = decode(FeatureMatrix, _doc_with_values(f4))
    assert np.array_equal(got.values.array, m.values.array.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d | {"base64": "!!!!"}, "not valid base64"),
        (lambda d: d | {"rows": d["rows"] + 1}, "bytes, expected rows * cols * 8"),
        (lambda d: d | {"dtype": ">f8"}, "dtype must be one of ['<f4', '<f8']"),
        (lambda d: d | {"dtype": "<f8", "extra": 1}, "unexpected keys ['extra']"),
        (lambda d: {k: v for k, v in d.items() if k != "cols"}, "missing keys ['cols']"),
        (lambda d: d | {"rows": True}, "'rows' must be an integer"),
        (lambda d: d | {"cols": -1}, "'cols' must be an integer"),
        (
            lambda d: (
                d | {"base64": base64.b64encode(np.array([[np.nan, 0.5]] * d["rows"]).tobytes()).decode()}
            ),
            "row 0 column 0 is nan, expected a finite number",
        ),
    ],
)
def test_a_bad_packed_table_is_refused_with_the_reason(change: object, fragment: str) -> None:
    packed = pack(features().values)
    with pytest.raises(MessageError) as err:
        decode(FeatureMatrix, _doc_with_values(change(packed)))  # type: ignore[operator]
    assert fragment in err.value.reason and err.value.reason.startswith("invalid FeatureMatrix: values")


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ([[True, 0.5]], "entries must be numbers, found bool"),
        ([["0.5", 0.5]], "entries must be numbers, found str"),
        ([[None, 0.5]], "entries must be numbers, found NoneType"),
        ([0.5], "row 0 must be an array of numbers, got float"),
        ("rows", "expected a packed table or rows of numbers, got str"),
    ],
)
def test_rows_of_non_numbers_are_refused(rows: object, fragment: str) -> None:
    with pytest.raises(MessageError) as err:
        decode(FeatureMatrix, _doc_with_values(rows))
    assert fragment in err.value.reason


def test_non_finite_values_from_python_are_refused() -> None:
    m = features()
    bad = np.array(m.values.array)
    bad[1, 0] = np.inf
    with pytest.raises(ValueError, match="row 1 column 0 is inf"):
        FeatureMatrix.model_validate(m.model_dump() | {"values": bad})


def test_float_rows_read_as_row_tuples_and_stay_read_only() -> None:
    table = FloatRows(np.array([[0.25, 0.5], [1.0, 2.0]]))
    assert table == ((0.25, 0.5), (1.0, 2.0)) and table != ((0.25, 0.5),)
    assert table[1] == (1.0, 2.0) and list(table) == [(0.25, 0.5), (1.0, 2.0)] and len(table) == 2
    assert table.shape == (2, 2) and hash(table) == hash(FloatRows(np.array([[0.25, 0.5], [1.0, 2.0]])))
    assert np.asarray(table) is table.array
    with pytest.raises(ValueError):
        table.array[0, 0] = 9.0
    source = np.array([[1.0, 2.0]])
    m = FeatureMatrix.model_validate(features().model_dump() | {"values": np.repeat(source, 3, axis=0)})
    assert m.values.array.flags.writeable is False


def test_an_empty_table_round_trips() -> None:
    empty = unpack(pack(FloatRows(np.empty((0, 2)))))
    assert len(empty) == 0 and empty == () and empty.shape == (0, 2)


def _deflated_doc(table: np.ndarray) -> dict[str, object]:
    return pack(FloatRows(table.copy()))


def test_repetitive_tables_travel_deflated_and_come_back_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    table = rng.choice([0.0, 0.25, 1 / 3, -0.0, 1.0], size=(1024, 18))
    doc = _deflated_doc(table)
    assert doc["codec"] == "zlib" and len(str(doc["base64"])) < table.nbytes / 4
    got = unpack(doc)
    assert got.array.tobytes() == table.tobytes()
    noise = rng.standard_normal((1024, 18))  # deflating does not pay: plain bytes
    assert (
        "codec" not in _deflated_doc(noise)
        and unpack(_deflated_doc(noise)).array.tobytes() == noise.tobytes()
    )
    m = features()
    sent = m.model_copy(update={"values": FloatRows(np.zeros((len(m.jobs), 2)))})
    assert "codec" not in json.loads(encode(sent))["values"]  # small tables are not deflated


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d, z: d | {"codec": "gzip"}, "codec must be 'zlib' when given"),
        (lambda d, z: d | {"base64": base64.b64encode(z[:-5]).decode()}, "does not hold exactly"),
        (lambda d, z: d | {"base64": base64.b64encode(z + b"x").decode()}, "does not hold exactly"),
        (lambda d, z: d | {"base64": base64.b64encode(b"not zlib" * 64).decode()}, "is not a zlib stream"),
        (lambda d, z: d | {"rows": d["rows"] - 1}, "does not hold exactly"),  # inflates past the bound
    ],
)
def test_a_broken_deflated_table_is_refused_with_the_reason(change: object, fragment: str) -> None:
    doc = _deflated_doc(np.zeros((1024, 18)))
    assert doc["codec"] == "zlib"
    deflated = base64.b64decode(str(doc["base64"]))
    with pytest.raises(ValueError, match=fragment):
        unpack(change(doc, deflated))  # type: ignore[operator]


def test_a_deflated_table_never_inflates_past_its_declared_size() -> None:
    """A small payload that would inflate to gigabytes is refused after rows * cols values."""
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in about 64 kB
    doc = {"dtype": "<f8", "rows": 2, "cols": 2, "codec": "zlib", "base64": base64.b64encode(bomb).decode()}
    with pytest.raises(ValueError, match="does not hold exactly rows \\* cols values \\(32 bytes\\)"):
        unpack(doc)
