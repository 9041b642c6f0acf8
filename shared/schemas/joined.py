"""Columns of job ids sent as one string, the ids separated by single spaces.

Why: a snapshot of 50,000 pending jobs on a 10,000-node cluster carries 118,000 job ids (the queue
and 68,000 running jobs), and the feature matrix and the decision 50,000 more each. As JSON arrays
of strings (schema version 7) pydantic parses and checks them one by one: 10-15 ms per 50,000-68,000
ids (20 ms for a decision's, whose ids are checked against ``JobId``'s pattern one at a time), and
every stage decodes them (the featurizer, the prioritizer and the placer each the snapshot, the
prioritizer and the placer the matrix, the adapter and the recorder the decision). As one JSON
string the ids are parsed at once, split at C speed, and their lengths and characters checked in
a few passes over the whole string: about half the time (``bench/big_queues.py``,
``docs/results/big-queues.md``).

Wire form (schema version 8)::

    {"joined": "p512 p563 p688"}

A job id never contains whitespace (``shared.schemas.base.JobId``), so a space cannot be part of
one; ``""`` is no ids at all (an id is never empty). The writer falls back to the JSON array when
the values could not be split back (an entry that is empty or holds a space: never a valid job id),
and a reader accepts the array form of version 7 exactly as before.

Checked on read, before any id is used: each entry is 1 to the field's ``max_length`` characters
(``JOB_ID_MAX_LENGTH``), the column has at most ``MAX_ROWS`` entries, and, for a field whose ids
were checked one by one before (``check_ids``: a decision's ``JobId`` entries), no entry holds
whitespace or a control character (``check_job_ids``, the same rule). A column of snapshot or
matrix ids is checked that way by its model's validator, whichever form it arrived in. Errors name
the entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from shared.schemas.base import JOB_ID_MAX_LENGTH
from shared.schemas.columns import check_job_ids
from shared.schemas.numbers import json_tuple
from shared.schemas.packed import MAX_ROWS

__all__ = ["SEPARATOR", "Joined", "join_column", "split_column"]

#: what separates two ids in the joined string (never part of a job id)
SEPARATOR = " "
_KEY = "joined"


def join_column(values: Sequence[str]) -> dict[str, str] | list[str]:
    """The joined wire form of ``values``, or the JSON array when joining would not split back
    into the same entries (an empty entry, or one holding the separator)."""
    joined = SEPARATOR.join(values)
    n = len(values)
    if n and (
        joined.count(SEPARATOR) != n - 1
        or not joined
        or joined.startswith(SEPARATOR)
        or joined.endswith(SEPARATOR)
        or SEPARATOR * 2 in joined
    ):
        return list(values)
    return {_KEY: joined}


def _lengths(joined: str, parts: Sequence[str]) -> Any:
    """Each entry's length in characters: from the separators' positions for an ASCII string (the
    usual ids: one vectorized pass), else one ``len`` per entry."""
    if joined.isascii():
        raw = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        cuts = np.flatnonzero(raw == ord(SEPARATOR))
        bounds = np.concatenate(([-1], cuts, [len(raw)]))
        return np.diff(bounds) - 1
    return np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))


def split_column(
    doc: dict[str, Any],
    min_length: int = 1,
    max_length: int = JOB_ID_MAX_LENGTH,
    check_ids: str | None = None,
) -> tuple[str, ...]:
    """The entries of a joined column (``join_column``'s form); ValueError naming what is wrong."""
    if set(doc) != {_KEY}:
        missing, extra = sorted({_KEY} - set(doc)), sorted(set(doc) - {_KEY})
        raise ValueError(f"joined column: missing keys {missing}, unexpected keys {extra}")
    joined = doc[_KEY]
    if not isinstance(joined, str):
        raise ValueError(f"joined column: {_KEY!r} must be a string, got {type(joined).__name__}")
    if not joined:
        return ()
    if joined.count(SEPARATOR) >= MAX_ROWS:
        raise ValueError(f"joined column: more than {MAX_ROWS} entries")
    parts = tuple(joined.split(SEPARATOR))
    lengths = _lengths(joined, parts)
    bad = np.flatnonzero((lengths < min_length) | (lengths > max_length))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"joined column: entry {i} ({parts[i][:40]!r}) has {int(lengths[i])} characters, expected "
            f"{min_length} to {max_length} (two separators in a row, or one at either end, make an "
            "empty entry)"
        )
    if check_ids is not None:
        check_job_ids(check_ids, parts)
    return parts


class Joined:
    """Marks a ``tuple[<job id>, ...]`` field as joined on the wire (see the module docstring).

    Put it after the tuple's own constraints. ``max_length``: the longest entry (its type's);
    ``check_ids``: the owner to name in errors when the entries' characters are to be checked as
    ``JobId``'s pattern does (for a field whose model does not call ``check_job_ids`` itself). The
    JSON array form and Python tuples are validated by the tuple's own schema, as before.
    """

    def __init__(self, max_length: int = JOB_ID_MAX_LENGTH, check_ids: str | None = None) -> None:
        self.max_length = max_length
        self.check_ids = check_ids

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        inner = handler(source)
        max_length, check_ids = self.max_length, self.check_ids

        def validate(
            value: Any, nested: core_schema.ValidatorFunctionWrapHandler, info: core_schema.ValidationInfo
        ) -> Any:
            if isinstance(value, dict):
                return split_column(value, 1, max_length, check_ids)
            return nested(json_tuple(value, info))

        def serialize(value: Sequence[str]) -> dict[str, str] | list[str]:
            return join_column(value)

        return core_schema.with_info_wrap_validator_function(
            validate,
            inner,
            serialization=core_schema.plain_serializer_function_ser_schema(serialize, when_used="json"),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        array = handler(schema)
        joined = {
            "type": "object",
            "description": "the ids joined by single spaces ('' = none; schema version 8)",
            "properties": {_KEY: {"type": "string"}},
            "required": [_KEY],
            "additionalProperties": False,
        }
        return {"anyOf": [joined, array]}
