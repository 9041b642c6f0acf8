"""Tables of floats sent as packed little-endian binary (base64) inside the JSON of a message.

Why: a FeatureMatrix of a 1,024-job queue holds 18,432 feature values. As JSON numbers (schema
version 3) they cost the featurizer about 0.4 ms to turn into row tuples, 0.2 ms to validate and
0.6 ms to print, and every reader (the prioritizer, the placer decoding ahead) 0.9 ms to parse and
validate, each time on the way from snapshot to decision. Packed as float64 bytes they are printed
and parsed in a few hundredths of that (one ``base64`` call and one ``numpy.frombuffer``), and the
values are the very bits the featurizer computed: nothing is rounded (float64, "<f8", is what Hylo
writes; float32, "<f4", is read too, for writers that prefer half the bytes).

Wire form (schema version 4)::

    {"dtype": "<f8", "rows": 1024, "cols": 18, "base64": "AAAAAAAA8D8..."}

``base64`` is standard base64 (RFC 4648, with padding) of ``rows * cols`` values in row-major order.
Since schema version 5 the bytes may be deflated, ``"codec": "zlib"`` (level 1, when that saves at
least a tenth): a matrix's features repeat a few values per column (a queue's jobs share their
pools and requests), and deflating the 147 kB of a 1,024-job table left 10-20 kB, which the
featurizer, the prioritizer, the placer and the recorder otherwise pushed through the bus and base64
at every hop (the matrix and the decision carry one each); deflating costs about 0.5 ms, inflating
0.2 ms, less than the base64 and the socket work it saves. A reader also accepts the version-3 form,
a JSON array of rows of numbers, so messages written by an older build still decode. Every value
must be finite either way.

Bounded before it is allocated: a message's byte size does not bound a deflated table (1 MB of
deflated zeros inflates to 1 GB), and every placer replica decodes every matrix. So the header alone
is checked first, against the limits the message is validated under (``shared.schemas.limits``):
``rows`` (one per job) against ``max_jobs``, ``rows * cols * itemsize`` against ``max_table_bytes``
and, for deflated bytes, against ``max_inflate_ratio`` times their length; only then are the bytes
inflated, never to more than the header declared. A lying header is refused with a one-line reason
naming the key, its value and the limit, having cost at most the bound.

In Python the field holds a ``FloatRows``: a read-only sequence of rows, as the version-3 tuples of
tuples were (``len``, indexing and iteration yield tuples of floats, and it equals a tuple of tuples
with the same values), backed by a read-only float64 ``numpy`` array (``.array``, also what
``numpy.asarray`` returns) so numeric code never goes through Python floats. The row tuples are
built once, on first row access.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Annotated, Any, overload

import numpy as np
import numpy.typing as npt
from pydantic import PlainSerializer, PlainValidator, ValidationInfo, WithJsonSchema

from shared.schemas.limits import Limits, limits_of, limits_or_configured

__all__ = ["DTYPES", "FloatRows", "FloatTable", "empty_table", "pack", "unpack"]

#: the element types a packed table may declare (little-endian IEEE 754 binary64 and binary32)
DTYPES: dict[str, np.dtype[Any]] = {"<f8": np.dtype("<f8"), "<f4": np.dtype("<f4")}
#: the keys of the packed form, all required (plus ``codec`` for deflated bytes, schema version 5)
_KEYS = frozenset({"dtype", "rows", "cols", "base64"})
#: the one codec: zlib (RFC 1950) deflate of the bytes, level 1
CODEC = "zlib"
#: smaller tables are not worth deflating
_COMPRESS_FROM = 4096
#: bounds that hold whatever the configured limits say (rows: ``HARD_MAX_ITEMS``)
MAX_ROWS = 1_000_000
MAX_COLS = 4096
_NUMBERS = (float, int, np.floating, np.integer)
_NOT_NUMBERS = frozenset({bool, np.bool_})

FloatArray = npt.NDArray[np.float64]


class FloatRows(Sequence[tuple[float, ...]]):
    """A read-only table of finite floats: a sequence of row tuples backed by a float64 array."""

    __slots__ = ("_array", "_rows")

    def __init__(self, array: FloatArray) -> None:
        """Take ``array`` (2-D float64, already checked finite) as the table; it is made read-only."""
        if array.ndim != 2 or array.dtype != np.float64:
            raise ValueError(f"a float table is a 2-D float64 array, got {array.ndim}-D {array.dtype}")
        array.setflags(write=False)
        self._array = array
        self._rows: tuple[tuple[float, ...], ...] | None = None

    @property
    def array(self) -> FloatArray:
        """The values as a read-only (rows, cols) float64 array."""
        return self._array

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self._array.shape
        return int(rows), int(cols)

    def rows(self) -> tuple[tuple[float, ...], ...]:
        """The rows as tuples of Python floats (built once, then shared)."""
        if self._rows is None:
            self._rows = tuple(map(tuple, self._array.tolist()))
        return self._rows

    def __len__(self) -> int:
        return int(self._array.shape[0])

    @overload
    def __getitem__(self, i: int) -> tuple[float, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[float, ...], ...]: ...

    def __getitem__(self, i: int | slice) -> tuple[float, ...] | tuple[tuple[float, ...], ...]:
        return self.rows()[i]

    def __iter__(self) -> Iterator[tuple[float, ...]]:
        return iter(self.rows())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> FloatArray:
        if dtype is None or np.dtype(dtype) == self._array.dtype:
            return self._array.copy() if copy else self._array
        return self._array.astype(dtype)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FloatRows):
            return self.shape == other.shape and bool(np.array_equal(self._array, other._array))
        if isinstance(other, tuple):
            return self.rows() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.shape, self._array.tobytes()))

    def __repr__(self) -> str:
        return f"FloatRows({self.shape[0]} x {self.shape[1]})"


def empty_table() -> FloatRows:
    """A table of no rows (the default of an optional table field)."""
    return FloatRows(np.zeros((0, 0), dtype=np.float64))


def pack(table: FloatRows, dtype: str = "<f8", compress: bool = True) -> dict[str, Any]:
    """The packed wire form of ``table`` (``dtype``: one of ``DTYPES``), its bytes deflated
    (``"codec": "zlib"``) when ``compress`` and that saves at least a tenth of them."""
    rows, cols = table.shape
    data = table.array.astype(DTYPES[dtype], copy=False).tobytes()
    doc: dict[str, Any] = {"dtype": dtype, "rows": rows, "cols": cols}
    if compress and len(data) >= _COMPRESS_FROM:
        deflated = zlib.compress(data, 1)
        if len(deflated) * 10 <= len(data) * 9:
            doc["codec"] = CODEC
            data = deflated
    doc["base64"] = base64.b64encode(data).decode("ascii")
    return doc


def _inflate(data: bytes, size: int) -> bytes:
    """``data`` inflated, refused unless it is one complete zlib stream of exactly ``size`` bytes
    (never inflating more than that: a small payload must not expand without bound)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as err:
        raise ValueError(f"packed float table: 'base64' is not a zlib stream ({err})") from None
    if len(out) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise ValueError(
            f"packed float table: the zlib stream does not hold exactly rows * cols values ({size} bytes)"
        )
    return out


def _finite(array: FloatArray, what: str) -> FloatArray:
    if not np.isfinite(array).all():
        row, col = (int(x) for x in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(f"{what}: row {row} column {col} is {array[row, col]}, expected a finite number")
    return array


def _count(value: Any, key: str, bound: int, limit: str = "") -> int:
    if type(value) is not int or not 0 <= value <= bound:
        why = f" ({limit})" if limit else ""
        raise ValueError(
            f"packed float table: {key!r} must be an integer in [0, {bound}]{why}, got {value!r}"
        )
    return value


def _declared_size(
    rows: int, cols: int, itemsize: int, limits: Limits, what: str = "packed float table"
) -> int:
    """The bytes the header declares, refused above ``limits.max_table_bytes`` (before any of them
    is decoded, inflated or allocated)."""
    size = rows * cols * itemsize
    if size > limits.max_table_bytes:
        raise ValueError(
            f"{what}: rows * cols * {itemsize} = {rows} * {cols} * {itemsize} = {size} bytes, "
            f"more than the limit of {limits.max_table_bytes} (max_table_bytes)"
        )
    return size


def _check_ratio(deflated: int, size: int, limits: Limits) -> None:
    """Refuse a deflated table whose header declares more bytes than ``limits.max_inflate_ratio``
    times its deflated length: no honest stream inflates that far, so it is refused uninflated."""
    if size > deflated * limits.max_inflate_ratio:
        raise ValueError(
            f"packed float table: declares {size} bytes from {deflated} deflated bytes, more than "
            f"{limits.max_inflate_ratio} times as many (max_inflate_ratio)"
        )


def unpack(doc: dict[str, Any], limits: Limits | None = None) -> FloatRows:
    """The table of a packed document (``pack``'s form); raises ValueError naming what is wrong.

    The header is checked against ``limits`` before the bytes are decoded: ``rows`` against
    ``max_jobs`` (a table has one row per job), the declared bytes against ``max_table_bytes`` and,
    when deflated, against ``max_inflate_ratio`` times the deflated bytes."""
    limits = limits_or_configured(limits)
    keys = set(doc) - {"codec"}
    if keys != _KEYS:
        missing, extra = sorted(_KEYS - keys), sorted(keys - _KEYS)
        raise ValueError(f"packed float table: missing keys {missing}, unexpected keys {extra}")
    codec = doc.get("codec")
    if codec is not None and codec != CODEC:
        raise ValueError(f"packed float table: codec must be {CODEC!r} when given, got {codec!r}")
    dtype = DTYPES.get(doc["dtype"]) if isinstance(doc["dtype"], str) else None
    if dtype is None:
        raise ValueError(f"packed float table: dtype must be one of {sorted(DTYPES)}, got {doc['dtype']!r}")
    max_rows = min(MAX_ROWS, limits.max_jobs)
    rows = _count(doc["rows"], "rows", max_rows, "max_jobs" if max_rows < MAX_ROWS else "")
    cols = _count(doc["cols"], "cols", MAX_COLS)
    size = _declared_size(rows, cols, dtype.itemsize, limits)
    text = doc["base64"]
    if not isinstance(text, str):
        raise ValueError("packed float table: 'base64' must be a string")
    try:
        data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as err:
        raise ValueError(f"packed float table: 'base64' is not valid base64 ({err})") from None
    if codec is not None:
        _check_ratio(len(data), size, limits)
        data = _inflate(data, size)
    if len(data) != rows * cols * dtype.itemsize:
        raise ValueError(
            f"packed float table: {len(data)} bytes, expected rows * cols * {dtype.itemsize} = "
            f"{rows * cols * dtype.itemsize}"
        )
    array = np.frombuffer(data, dtype=dtype).reshape(rows, cols).astype(np.float64)
    return FloatRows(_finite(array, "packed float table"))


def _from_rows(value: Sequence[Any], what: str, limits: Limits | None = None) -> FloatRows:
    """A table from rows of numbers (the version-3 JSON form, or tuples built in Python), under the
    same bounds as the packed form (its size is the message's, so they are checked as it is built)."""
    limits = limits_or_configured(limits)
    if len(value) > limits.max_jobs:
        raise ValueError(f"{what} has {len(value)} rows, more than the limit of {limits.max_jobs} (max_jobs)")
    rows = []
    for i, row in enumerate(value):
        if isinstance(row, np.ndarray):
            row = row.tolist()
        if not isinstance(row, (list, tuple)):
            raise ValueError(f"{what} row {i} must be an array of numbers, got {type(row).__name__}")
        rows.append(row)
    widths = set(map(len, rows))
    if len(widths) > 1:
        first = len(rows[0])
        i = next(i for i, r in enumerate(rows) if len(r) != first)
        raise ValueError(f"{what} row {i} has {len(rows[i])} entries, expected {first} (as row 0)")
    kinds = set(map(type, chain.from_iterable(rows)))  # at C speed; bools are ints to Python
    bad = [k for k in kinds if k in _NOT_NUMBERS or not issubclass(k, _NUMBERS)]
    if bad:
        raise ValueError(f"{what} entries must be numbers, found {bad[0].__name__}")
    width = widths.pop() if widths else 0
    _declared_size(len(rows), width, 8, limits, what)
    array = np.array(rows, dtype=np.float64).reshape(len(rows), width)
    return FloatRows(_finite(array, what))


def _validate(value: Any, info: ValidationInfo) -> FloatRows:
    if isinstance(value, FloatRows):
        return value
    if isinstance(value, np.ndarray):
        if value.ndim != 2 or value.dtype.kind != "f":
            raise ValueError(f"float table: expected a 2-D float array, got {value.ndim}-D {value.dtype}")
        array = np.array(value, dtype=np.float64, copy=True)  # our own read-only copy
        return FloatRows(_finite(array, "float table"))
    if isinstance(value, dict):
        return unpack(value, limits_of(info))
    if isinstance(value, (list, tuple)):
        return _from_rows(value, "float table", limits_of(info))
    raise ValueError(f"float table: expected a packed table or rows of numbers, got {type(value).__name__}")


def _serialize(value: FloatRows) -> dict[str, Any]:
    return pack(value)


_JSON_SCHEMA: dict[str, Any] = {
    "description": "rows of finite floats, packed: base64 of rows * cols little-endian values in row-major "
    "order (schema version 4; a JSON array of rows of numbers, version 3's form, is read too)",
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "dtype": {"enum": sorted(DTYPES)},
                "rows": {"type": "integer", "minimum": 0, "maximum": MAX_ROWS},
                "cols": {"type": "integer", "minimum": 0, "maximum": MAX_COLS},
                "base64": {"type": "string", "contentEncoding": "base64"},
                "codec": {"enum": [CODEC], "description": "the bytes are deflated (schema version 5)"},
            },
            "required": sorted(_KEYS),
            "additionalProperties": False,
        },
        {
            "type": "array",
            "maxItems": MAX_ROWS,
            "items": {"type": "array", "items": {"type": "number"}},
        },
    ],
}

#: a message field holding a table of finite floats (``FloatRows`` in Python, packed on the wire)
FloatTable = Annotated[
    FloatRows,
    PlainValidator(_validate),
    PlainSerializer(_serialize, when_used="json"),
    WithJsonSchema(_JSON_SCHEMA),
]
