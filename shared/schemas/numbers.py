"""Columns of numbers sent as packed little-endian binary (base64) inside the JSON of a message.

Why: a snapshot of the openb cluster (6,120 running pods, 1,213 nodes, 1,024 queued jobs) holds
about 58,000 numbers in its columns. As JSON arrays (schema version 4) pydantic parses and checks
them one by one, about 2.5 of the 6.8 ms a service spends decoding the snapshot, paid by the
featurizer on the path to every decision and by the placer beside it; printing them was about a
third of the adapter's encoding. Packed, a column is one ``base64`` call and one
``numpy.frombuffer``, its bounds are checked in one vectorized pass, and the readers get the column
as a numpy array as well (``column_array``), so the featurizer's and the placer's views no longer
convert 6,000-entry tuples to arrays.

Wire form (schema version 5), for a column of ``n`` numbers::

    {"dtype": "<i2", "base64": "AQACAAMA..."}

``base64`` is standard base64 (RFC 4648, with padding) of ``n`` little-endian values of ``dtype``:
``<i1``, ``<i2``, ``<i4``, ``<i8`` (signed integers) or ``<f8`` (IEEE 754 binary64, float columns
only). The writer takes the narrowest type that holds every value exactly (a float column of whole
numbers, such as start times in whole seconds, goes as integers; ``-0.0`` and fractions as ``<f8``),
so the packed form is about as compact as the JSON numbers were. A reader also accepts the
version-4 form, a JSON array of numbers, validated exactly as before (the same per-entry errors).

In Python a column is a tuple (``NumberColumn`` when it was decoded from the packed form or
validated: a tuple subclass that also carries the values as a read-only int64 or float64 array).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any, Literal, get_args, get_origin

import annotated_types
import numpy as np
import numpy.typing as npt
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from shared.schemas.packed import MAX_ROWS

__all__ = [
    "DTYPES",
    "INT_DTYPES",
    "NumberColumn",
    "Packed",
    "column_array",
    "json_tuple",
    "max_of",
    "narrowest",
    "pack_column",
    "unpack_column",
]

#: the integer element types of the packed form, narrowest first
INT_DTYPES: tuple[str, ...] = ("<i1", "<i2", "<i4", "<i8")
#: every element type a packed column may declare
DTYPES: dict[str, np.dtype[Any]] = {d: np.dtype(d) for d in (*INT_DTYPES, "<f8")}
_KEYS = frozenset({"dtype", "base64"})
Kind = Literal["int", "float"]


class NumberColumn(tuple):  # type: ignore[type-arg]  # a tuple of ints or of floats
    """A validated column: the tuple of its numbers, plus the same values as ``array``.

    ``array`` is read-only, int64 for an integer column and float64 for a float column; it is what
    ``column_array`` hands to numeric code, and what the column is packed from.
    """

    array: npt.NDArray[Any]

    def __new__(cls, array: npt.NDArray[Any]) -> NumberColumn:
        array.setflags(write=False)
        column = super().__new__(cls, array.tolist())
        column.array = array
        return column

    def __reduce__(self) -> tuple[Any, ...]:
        return (NumberColumn, (np.array(self.array),))


def column_array(values: Sequence[Any], dtype: type[np.int64] | type[np.float64]) -> npt.NDArray[Any]:
    """``values`` as a 1-D numpy array of ``dtype``: a ``NumberColumn``'s own array when it has that
    type (read-only, shared: never write to it), else a conversion (columns built without
    validation, such as ``Columns.take``'s)."""
    array = getattr(values, "array", None)
    if isinstance(array, np.ndarray) and array.dtype == dtype:
        return array
    return np.fromiter(values, dtype=dtype, count=len(values))


def max_of(values: Sequence[Any]) -> Any:
    """The largest of ``values`` (not empty), from a ``NumberColumn``'s array when it has one."""
    array = getattr(values, "array", None)
    return array.max().item() if isinstance(array, np.ndarray) else max(values)


def narrowest(array: npt.NDArray[Any]) -> str | None:
    """The narrowest packed type holding every value of ``array`` exactly (``<f8`` for floats that
    are not all whole numbers, or include ``-0.0``); None when none does (an integer beyond int64)."""
    if array.dtype.kind == "f":
        whole = np.isfinite(array).all() and bool((array == np.floor(array)).all())
        if not whole or bool((np.signbit(array) & (array == 0)).any()):
            return "<f8"
        if len(array) and (array.min() < -(2**62) or array.max() > 2**62):
            return "<f8"
    if not len(array):
        return INT_DTYPES[0]
    lo, hi = array.min(), array.max()
    for name in INT_DTYPES:
        info = np.iinfo(DTYPES[name])
        if info.min <= lo and hi <= info.max:
            return name
    return None


def pack_column(values: Sequence[Any] | npt.NDArray[Any], kind: Kind) -> dict[str, str] | list[Any]:
    """The packed wire form of a column (``narrowest`` type); the JSON array for values no packed type
    holds (integers beyond int64)."""
    array = getattr(values, "array", None)
    if not isinstance(array, np.ndarray):
        try:
            array = np.array(values, dtype=np.int64 if kind == "int" else np.float64)
        except OverflowError:
            return list(values)
    dtype = narrowest(array)
    if dtype is None:
        return list(values)
    data = array.astype(DTYPES[dtype], copy=False).tobytes()
    return {"dtype": dtype, "base64": base64.b64encode(data).decode("ascii")}


def unpack_column(doc: dict[str, Any], kind: Kind) -> npt.NDArray[Any]:
    """The values of a packed column as int64 or float64; ValueError naming what is wrong."""
    if set(doc) != _KEYS:
        missing, extra = sorted(_KEYS - set(doc)), sorted(set(doc) - _KEYS)
        raise ValueError(f"packed column: missing keys {missing}, unexpected keys {extra}")
    name = doc["dtype"]
    allowed = INT_DTYPES if kind == "int" else tuple(DTYPES)
    if not isinstance(name, str) or name not in allowed:
        raise ValueError(f"packed {kind} column: dtype must be one of {list(allowed)}, got {name!r}")
    text = doc["base64"]
    if not isinstance(text, str):
        raise ValueError("packed column: 'base64' must be a string")
    try:
        data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as err:
        raise ValueError(f"packed column: 'base64' is not valid base64 ({err})") from None
    dtype = DTYPES[name]
    if len(data) % dtype.itemsize:
        raise ValueError(f"packed column: {len(data)} bytes is not a whole number of {name} values")
    if len(data) // dtype.itemsize > MAX_ROWS:
        raise ValueError(f"packed column: more than {MAX_ROWS} values")
    return np.frombuffer(data, dtype=dtype).astype(np.int64 if kind == "int" else np.float64)


class Packed:
    """Marks a ``tuple[<number>, ...]`` field as packed on the wire (see the module docstring).

    Put it after the tuple's own constraints (``Annotated[tuple[X, ...], Field(max_length=...),
    Packed()]``): the element type's bounds (``ge``, ``gt``, ``le``, ``lt``; floats must be finite)
    are read from it and checked on the packed values; the JSON array form and Python tuples are
    validated by the tuple's own schema, as before.
    """

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        kind, checks = _element_rules(source)
        dtype = np.dtype(np.int64 if kind == "int" else np.float64)
        inner = handler(source)

        def validate(
            value: Any, nested: core_schema.ValidatorFunctionWrapHandler, info: core_schema.ValidationInfo
        ) -> Any:
            if isinstance(value, NumberColumn) and value.array.dtype == dtype:
                for check in checks:  # a column of another field: its bounds may differ
                    check(value.array)
                return value
            if isinstance(value, dict):
                array = unpack_column(value, kind)
                for check in checks:
                    check(array)
                return NumberColumn(array)
            # the JSON array (parsed to a list) or a Python tuple: the tuple schema decides, as before
            out = nested(json_tuple(value, info))
            try:
                array = np.array(out, dtype=dtype)
            except OverflowError:  # an integer beyond int64: valid, kept as a plain tuple
                return out
            return NumberColumn(array.reshape(len(out)))

        def serialize(value: Sequence[Any]) -> dict[str, str] | list[Any]:
            return pack_column(value, kind)

        return core_schema.with_info_wrap_validator_function(
            validate,
            inner,
            serialization=core_schema.plain_serializer_function_ser_schema(serialize, when_used="json"),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        array = handler(schema)
        packed = {
            "type": "object",
            "description": "the numbers packed: base64 of little-endian values of dtype (schema version 5)",
            "properties": {
                "dtype": {"enum": list(DTYPES)},
                "base64": {"type": "string", "contentEncoding": "base64"},
            },
            "required": sorted(_KEYS),
            "additionalProperties": False,
        }
        return {"anyOf": [packed, array]}


def json_tuple(value: Any, info: core_schema.ValidationInfo, depth: int = 1) -> Any:
    """``value`` with the JSON arrays (Python lists, when validating JSON) of its first ``depth``
    levels as tuples: what a strict tuple schema accepts in Python mode. Python input is left as it
    is (a list is refused there, as before)."""
    if info.mode != "json" or not isinstance(value, list):
        return value
    if depth <= 1:
        return tuple(value)
    return tuple(json_tuple(v, info, depth - 1) for v in value)


def _element_rules(source: Any) -> tuple[Kind, list[Any]]:
    """The kind (int or float) of ``tuple[X, ...]``'s element and the checks of its bounds."""
    if get_origin(source) is not tuple or len(get_args(source)) != 2 or get_args(source)[1] is not Ellipsis:
        raise TypeError(f"Packed() marks a tuple[X, ...] field, not {source!r}")
    element = get_args(source)[0]
    base, meta = element, []
    if hasattr(element, "__metadata__"):
        base, *meta = get_args(element)
    if base not in (int, float):
        raise TypeError(f"Packed() columns hold int or float, not {base!r}")
    kind: Kind = "int" if base is int else "float"
    found: list[Any] = []
    for m in meta:
        found.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    checks: list[Any] = []
    finite = kind == "int"
    for m in found:
        if isinstance(m, annotated_types.Ge):
            checks.append(_bound(m.ge, np.greater_equal, "greater than or equal to"))
        elif isinstance(m, annotated_types.Gt):
            checks.append(_bound(m.gt, np.greater, "greater than"))
        elif isinstance(m, annotated_types.Le):
            checks.append(_bound(m.le, np.less_equal, "less than or equal to"))
        elif isinstance(m, annotated_types.Lt):
            checks.append(_bound(m.lt, np.less, "less than"))
        elif getattr(m, "allow_inf_nan", True) is False:
            finite = True
        else:
            raise TypeError(f"Packed() cannot check the constraint {m!r}")
    if not finite:
        raise TypeError("Packed() float columns must be finite (allow_inf_nan=False)")
    if kind == "float":
        checks.insert(0, _finite)
    return kind, checks


def _finite(array: npt.NDArray[Any]) -> None:
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        raise ValueError(f"packed column entry {int(bad[0])} is {array[bad[0]]}, expected a finite number")


def _bound(limit: Any, ok: Any, words: str) -> Any:
    def check(array: npt.NDArray[Any]) -> None:
        bad = np.flatnonzero(~ok(array, limit))
        if len(bad):
            value = array[bad[0]].item()
            raise ValueError(f"packed column entry {int(bad[0])} is {value}, expected {words} {limit}")

    return check
