"""Decompression bombs for the bounded-resource tests: small payloads that declare (or inflate to)
huge sizes, built without ever holding those sizes in memory.

Why hand-built: compressing a gigabyte of zeros to get a one-megabyte bomb takes seconds and the
gigabyte itself; a deflate stream of zeros is instead one flushed block repeated (see ``zlib_zeros``),
so a test builds a 1 GB bomb in milliseconds.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from shared.schemas import encode
from tests.schemas.message_factories import decision, features

#: the issue's probe: a FeatureMatrix declaring 10^6 rows of 4,096 values (32 GB as float64)
HUGE_ROWS, HUGE_COLS = 1_000_000, 4096
_MIB = 1 << 20


def zlib_zeros(mib: int) -> bytes:
    """A zlib stream (RFC 1950) that inflates to ``mib`` MiB of zeros, about 1 kB per MiB.

    One MiB of zeros is deflated once and flushed with ``Z_FULL_FLUSH`` (byte-aligned, and no later
    block refers back into it), so the same bytes can follow themselves ``mib`` times; then the final
    block and the Adler-32 of the zeros (a = 1, b = n mod 65521)."""
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = raw.compress(bytes(_MIB)) + raw.flush(zlib.Z_FULL_FLUSH)
    final = raw.flush(zlib.Z_FINISH)
    adler = ((mib * _MIB) % 65521) << 16 | 1
    return b"\x78\xda" + block * mib + final + adler.to_bytes(4, "big")


def packed_bomb(rows: int, cols: int, inflates_to_mib: int) -> dict[str, Any]:
    """A packed float table declaring ``rows`` x ``cols`` float64 values whose deflated bytes inflate
    to ``inflates_to_mib`` MiB of zeros."""
    data = zlib_zeros(inflates_to_mib)
    return {
        "dtype": "<f8",
        "rows": rows,
        "cols": cols,
        "codec": "zlib",
        "base64": base64.b64encode(data).decode("ascii"),
    }


def matrix_bomb(rows: int = HUGE_ROWS, cols: int = HUGE_COLS, inflates_to_mib: int = 1000) -> bytes:
    """A valid FeatureMatrix's JSON with its ``values`` replaced by ``packed_bomb``: by default the
    issue's 1 MB payload that declares 10^6 x 4096 and inflates to 1 GB."""
    doc = json.loads(encode(features()))
    doc["values"] = packed_bomb(rows, cols, inflates_to_mib)
    return json.dumps(doc).encode()


def decision_bomb(rows: int = HUGE_ROWS, cols: int = HUGE_COLS, inflates_to_mib: int = 1000) -> bytes:
    """A valid PlacementDecision's JSON with its ``placements.features`` replaced by ``packed_bomb``."""
    doc = json.loads(encode(decision()))
    doc["placements"]["features"] = packed_bomb(rows, cols, inflates_to_mib)
    return json.dumps(doc).encode()
