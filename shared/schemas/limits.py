"""Size limits of messages, passed to validation through pydantic's validation context.

Why a context and not constants: a deployment on a 1,213-node cluster needs larger snapshots than the
embedded demo, and the limits must be enforced while parsing (a hostile 1,000,000-job snapshot must be
refused, not featurized). ``decode`` checks the byte size before parsing; the model validators read the
count limits from the context (``DEFAULT_LIMITS`` when validating without one).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo

LIMITS_KEY = "hylo_limits"

#: NATS' default max_payload: a bigger message could not be published on a default server anyway
NATS_DEFAULT_MAX_PAYLOAD = 1024 * 1024


class Limits(BaseModel):
    """Upper bounds on a message's size; every count is checked with a message naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_message_bytes: int = Field(default=NATS_DEFAULT_MAX_PAYLOAD, ge=1024)
    max_jobs: int = Field(default=4096, ge=1, description="pending jobs per snapshot (and rows downstream)")
    max_running: int = Field(default=16384, ge=1, description="running jobs per snapshot")
    max_nodes: int = Field(default=16384, ge=1, description="node states per snapshot")

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
