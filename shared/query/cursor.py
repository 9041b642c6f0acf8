"""Opaque keyset cursors for paging through decisions.

Why keyset and not OFFSET: decisions arrive continuously; an offset shifts when new rows land, so a
client paging with OFFSET would see rows twice or skip them, and OFFSET n costs n rows of scanning.
The cursor is the (snapshot_time, id) of the last row served plus the order it was served in; the
next page starts strictly after it, on the (cluster, snapshot_time) index. It is base64url JSON:
opaque to clients, but nothing secret is in it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Literal

Order = Literal["asc", "desc"]


class CursorError(ValueError):
    """A cursor that this API did not issue, or that was issued for another order."""


@dataclass(frozen=True)
class Cursor:
    snapshot_time: float
    row_id: int
    order: Order

    def encode(self) -> str:
        doc = {"t": self.snapshot_time, "i": self.row_id, "o": self.order}
        raw = json.dumps(doc, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, order: Order) -> Cursor:
    """The cursor in ``text``; raises CursorError saying what is wrong with it."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        doc = json.loads(raw)
    except (binascii.Error, ValueError) as err:
        raise CursorError("expected a next_cursor value returned by this API (not decodable)") from err
    if not isinstance(doc, dict) or set(doc) != {"t", "i", "o"}:
        raise CursorError("expected a next_cursor value returned by this API (unknown layout)")
    t, i, o = doc["t"], doc["i"], doc["o"]
    if (
        not isinstance(t, int | float)
        or isinstance(t, bool)
        or not math.isfinite(t)
        or not isinstance(i, int)
        or isinstance(i, bool)
        or o not in ("asc", "desc")
    ):
        raise CursorError("expected a next_cursor value returned by this API (bad fields)")
    if o != order:
        raise CursorError(f"this cursor was issued for order={o}; repeat the request with order={o}")
    return Cursor(float(t), i, o)
