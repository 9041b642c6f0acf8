"""Size limits of messages, passed to validation through pydantic's validation context.

Why a context and not constants: a deployment on a 1,213-node cluster needs larger snapshots than the
embedded demo, and the limits must be enforced while parsing (a hostile 1,000,000-job snapshot must be
refused, not featurized). ``decode`` checks the byte size before parsing; the model validators read the
count limits from the context (``DEFAULT_LIMITS`` when validating without one).

A message's byte size does not bound what decoding it allocates: a packed float table may be deflated
(``shared.schemas.packed``), and 1 MB of deflated zeros inflates to 1 GB. So a table's header (rows,
cols, dtype) is checked against ``max_jobs``, ``max_table_bytes`` and ``max_inflate_ratio`` before its
bytes are inflated or allocated, and inflating never produces more than the header declared: a lying
header costs at most the bound, never what it claims.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

LIMITS_KEY = "hylo_limits"

#: NATS' default max_payload: a bigger message could not be published on a default server anyway
NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024
#: deflate (RFC 1951) cannot expand its input more than 1032 times (a 258-byte match costs at least
#: two bits), so a deflated table whose header declares more is a lie, whatever the level it used
DEFLATE_MAX_RATIO = 1032


class Limits(BaseModel):
    """Upper bounds on a message's size; every count is checked with a message naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_message_bytes: int = Field(default=NATS_DEFAULT_MAX_PAYLOAD, ge=1024)
    max_jobs: int = Field(default=4096, ge=1, description="pending jobs per snapshot (and rows downstream)")
    max_running: int = Field(default=16384, ge=1, description="running jobs per snapshot")
    max_nodes: int = Field(default=16384, ge=1, description="node states per snapshot")
    max_table_bytes: int = Field(
        default=16 << 20,
        ge=1024,
        description="decoded bytes of one packed float table (rows x cols x itemsize, from its header, "
        "checked before inflating); the largest honest one under the default limits, 4,096 jobs x 64 "
        "features x 8 bytes, is 2 MiB",
    )
    max_inflate_ratio: int = Field(
        default=DEFLATE_MAX_RATIO,
        ge=1,
        description="declared bytes of a deflated table per deflated byte; Hylo's own level-1 tables "
        "stay under 230, and no deflate stream exceeds 1032",
    )

    def context(self) -> dict[str, Any]:
        """The validation context that makes models check against these limits."""
        return {LIMITS_KEY: self}


DEFAULT_LIMITS = Limits()


def limits_of(info: ValidationInfo) -> Limits:
    """The limits in effect for one validation call."""
    ctx = info.context
    if isinstance(ctx, dict):
        found = ctx.get(LIMITS_KEY)
        if isinstance(found, Limits):
            return found
    return DEFAULT_LIMITS


def check_count(name: str, count: int, limit: int) -> None:
    """Raise a ValueError naming the field when ``count`` exceeds ``limit``."""
    if count > limit:
        raise ValueError(f"{name} holds {count} entries, more than the limit of {limit}")
