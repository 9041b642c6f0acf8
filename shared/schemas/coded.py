"""Columns of few distinct values (node groups, users, partitions, GPU types) sent dictionary-coded.

Why: a snapshot of the openb cluster repeats a handful of node group names over its 1,213 nodes,
and one user, one partition, one QoS and a few GPU-type sets over its 1,024 queued jobs (and the
matrix repeats those jobs). As JSON arrays (schema version 4) every entry is parsed and checked
(a pattern per name), and the repetitions were about 110 of the 360 kB of a snapshot. Coded, the
distinct values are parsed and checked once, and the column is rebuilt from their positions at C
speed.

Wire form (schema version 5)::

    {"values": ["g2-8gpu", "g1-2gpu"], "index": {"dtype": "<i1", "base64": "AAEAAQ=="}}

``values`` are the distinct entries (each validated as an entry of the column), ``index`` the
position in ``values`` of every entry, packed as in ``shared.schemas.numbers`` (or a JSON array of
integers). A writer codes a column only when it repeats (at most half as many distinct values as
entries); otherwise, and in version 4, the column is the JSON array of its entries, still read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from shared.schemas.columns import pick
from shared.schemas.numbers import json_tuple, pack_column, unpack_column
from shared.schemas.packed import MAX_ROWS

__all__ = ["Coded", "CodedColumn", "code_column"]

_KEYS = frozenset({"values", "index"})


class CodedColumn(tuple):  # type: ignore[type-arg]  # a tuple of the column's entries
    """A column decoded from the coded form: the tuple of its entries, plus the ``distinct`` values
    and the ``positions`` (the wire's ``values`` and ``index``) it was decoded from, so that encoding
    it again (the featurizer sends the snapshot's pending jobs on in its matrix) reuses them instead
    of hashing every entry again: about 20 ms for the four coded columns of a 50,000-job queue, on
    the path to the decision. (Not ``values``/``index``: a tuple's ``index`` method stays.)"""

    distinct: tuple[Any, ...]
    positions: npt.NDArray[np.int64]

    def __new__(
        cls, entries: tuple[Any, ...], values: tuple[Any, ...], index: npt.NDArray[np.int64]
    ) -> CodedColumn:
        column = super().__new__(cls, entries)
        index.setflags(write=False)
        column.distinct, column.positions = values, index
        return column

    def __reduce__(self) -> tuple[Any, ...]:
        return (CodedColumn, (tuple(self), self.distinct, np.array(self.positions)))


def code_column(values: Sequence[Any]) -> dict[str, Any] | list[Any]:
    """The coded wire form of ``values`` (hashable entries; tuples become JSON arrays), or the plain
    JSON array when coding does not pay (more than half of the entries distinct).

    A ``CodedColumn`` is sent as it was received (its distinct values and positions)."""
    if isinstance(values, CodedColumn):
        return {"values": list(values.distinct), "index": pack_column(values.positions, "int")}
    table = {v: i for i, v in enumerate(dict.fromkeys(values))}
    if len(table) * 2 > len(values):
        return list(values)
    index = np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))
    return {"values": list(table), "index": pack_column(index, "int")}


class Coded:
    """Marks a ``tuple[X, ...]`` field as dictionary-coded on the wire (see the module docstring).

    Put it after the tuple's own constraints; the distinct values are validated by the tuple's own
    schema (so a bad entry is refused with the same error, its position being among ``values``),
    and the JSON array form and Python tuples exactly as before. ``depth``: how many levels of JSON
    arrays an entry has (2 for a column of tuples of names).
    """

    def __init__(self, depth: int = 1) -> None:
        self.depth = depth

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        inner = handler(source)
        depth = self.depth

        def validate(
            value: Any, nested: core_schema.ValidatorFunctionWrapHandler, info: core_schema.ValidationInfo
        ) -> Any:
            if not isinstance(value, dict):
                return nested(json_tuple(value, info, depth))
            if set(value) != _KEYS:
                missing, extra = sorted(_KEYS - set(value)), sorted(set(value) - _KEYS)
                raise ValueError(f"coded column: missing keys {missing}, unexpected keys {extra}")
            distinct = value["values"]
            if not isinstance(distinct, list):
                raise ValueError("coded column: 'values' must be an array")
            table = nested(json_tuple(distinct, info, depth))
            raw = value["index"]
            if isinstance(raw, dict):
                index = unpack_column(raw, "int")
            elif isinstance(raw, list) and all(type(i) is int for i in raw):
                index = np.array(raw, dtype=np.int64).reshape(len(raw))
            else:
                raise ValueError("coded column: 'index' must be a packed column or an array of integers")
            if len(index):
                bad = np.flatnonzero((index < 0) | (index >= len(table)))
                if len(bad):
                    raise ValueError(
                        f"coded column: index entry {int(bad[0])} is {int(index[bad[0]])}, "
                        f"not a position in its {len(table)} values"
                    )
            if len(index) > MAX_ROWS:
                raise ValueError(f"coded column: more than {MAX_ROWS} entries")
            return CodedColumn(pick(table, index.tolist()), table, index)

        def serialize(value: Sequence[Any]) -> dict[str, Any] | list[Any]:
            return code_column(value)

        return core_schema.with_info_wrap_validator_function(
            validate,
            inner,
            serialization=core_schema.plain_serializer_function_ser_schema(serialize, when_used="json"),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        array = handler(schema)
        coded = {
            "type": "object",
            "description": "dictionary-coded: the distinct values, and each entry's position among them "
            "(schema version 5)",
            "properties": {
                "values": array,
                "index": {
                    "anyOf": [
                        {"type": "object", "description": "packed integers (shared.schemas.numbers)"},
                        {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    ]
                },
            },
            "required": sorted(_KEYS),
            "additionalProperties": False,
        }
        return {"anyOf": [coded, array]}
