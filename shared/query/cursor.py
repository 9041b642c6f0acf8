"""Opaque keyset cursors for paging through decisions (and the short lists: clusters, models).

Why keyset and not OFFSET: decisions arrive continuously; an offset shifts when new rows land, so a
client paging with OFFSET would see rows twice or skip them, and OFFSET n costs n rows of scanning.
The cursor is the (snapshot_time, id) of the last row served plus the order it was served in; the
next page starts strictly after it, on the (cluster, snapshot_time) index. It is base64url JSON:
opaque to clients, but nothing secret is in it. The short lists page the same way, on their sort key
(a cluster's name; a model version's creation time and name): ``encode_after``/``decode_after``.
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


def encode_after(values: list[str]) -> str:
    """The cursor of a short list (clusters, model versions): the sort key of the last item served."""
    raw = json.dumps({"a": values}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_after(text: str, fields: int) -> list[str]:
    """The sort key in a cursor of ``encode_after`` with ``fields`` strings; CursorError otherwise."""
    try:
        doc = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError) as err:
        raise CursorError("expected a next_cursor value returned by this API (not decodable)") from err
    values = doc.get("a") if isinstance(doc, dict) and set(doc) == {"a"} else None
    if not isinstance(values, list) or len(values) != fields or not all(isinstance(v, str) for v in values):
        raise CursorError("expected a next_cursor value returned by this API for this list")
    return values
