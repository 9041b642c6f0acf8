"""DeadLetter: a message that could not be used, kept with the reason instead of being lost.

Why a record and not a log line: a hostile or buggy adapter can send thousands of bad messages; each
becomes one bounded record on ``<root>.v1.<cluster>.dead`` (a stream with its own retention) that an
operator can list, count by reason and replay. The payload is truncated (its size and sha256 are
kept) so a 100 MB message does not become a 100 MB dead letter.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, ClassVar

from pydantic import Field, StringConstraints, ValidationError

from shared.schemas.base import SCHEMA_VERSION, ClusterName, CorrelationId, Strict

MAX_EXCERPT_CHARS = 2048
MAX_ERRORS = 20
MAX_HEADERS = 32
MAX_HEADER_CHARS = 512
Text = Annotated[str, StringConstraints(max_length=4096)]


class FieldError(Strict):
    """One validation error: where (dotted path), what was expected, and the type of error."""

    loc: Text
    msg: Text
    type: Annotated[str, StringConstraints(max_length=128)]

    @staticmethod
    def from_validation(err: ValidationError) -> tuple[FieldError, ...]:
        """The first ``MAX_ERRORS`` errors of a pydantic ValidationError, with bounded texts."""
        out: list[FieldError] = []
        for e in err.errors(include_url=False)[:MAX_ERRORS]:
            loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
            msg = e["msg"]
            if "input" in e and e["type"] not in ("json_invalid", "missing"):
                msg = f"{msg} (got {_short_repr(e['input'])})"
            out.append(FieldError(loc=loc[:4096], msg=msg[:4096], type=str(e["type"])[:128]))
        return tuple(out)


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DeadLetter(Strict):
    """A rejected message: why, where it came from, its headers and a bounded excerpt of its payload."""

    kind: ClassVar[str] = "dead"

    schema_version: int = SCHEMA_VERSION
    cluster: ClusterName = Field(description="cluster token of the original subject")
    correlation_id: CorrelationId | None = Field(default=None, description="if it could be read")
    stage: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="the consumer (durable name) that rejected it"
    )
    reason: Text = Field(description="one line: why the message was rejected")
    errors: tuple[FieldError, ...] = Field(default=(), max_length=MAX_ERRORS)
    original_subject: Text
    stream: Annotated[str, StringConstraints(max_length=256)] = ""
    stream_seq: int = Field(default=0, ge=0)
    deliveries: int = Field(default=1, ge=0)
    headers: dict[Annotated[str, StringConstraints(max_length=256)], Text] = Field(
        default_factory=dict, max_length=MAX_HEADERS
    )
    payload_bytes: int = Field(ge=0)
    payload_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    payload_excerpt: Annotated[str, StringConstraints(max_length=4 * MAX_EXCERPT_CHARS)] = Field(
        description=f"the first {MAX_EXCERPT_CHARS} characters (undecodable bytes escaped)"
    )
    failed_at: datetime

    def message_id(self) -> str:
        """One dead letter per stored message: redelivering the bad message does not duplicate it."""
        return f"{self.kind}.{self.stream}.{self.stream_seq}.{self.stage}"

    @classmethod
    def build(
        cls,
        *,
        cluster: str,
        stage: str,
        reason: str,
        subject: str,
        payload: bytes,
        headers: dict[str, str] | None = None,
        errors: tuple[FieldError, ...] = (),
        correlation_id: str | None = None,
        stream: str = "",
        stream_seq: int = 0,
        deliveries: int = 1,
    ) -> DeadLetter:
        """Bound every part of a rejected message so the dead letter itself always validates."""
        hdrs = {
            str(k)[:256]: str(v)[:MAX_HEADER_CHARS] for k, v in list((headers or {}).items())[:MAX_HEADERS]
        }
        excerpt = payload[: MAX_EXCERPT_CHARS * 4].decode("utf-8", errors="backslashreplace")[
            :MAX_EXCERPT_CHARS
        ]
        return cls(
            cluster=cluster,
            correlation_id=correlation_id,
            stage=stage[:128],
            reason=(reason.replace("\n", "; ")[:4096]) or "rejected",
            errors=errors,
            original_subject=subject[:4096],
            stream=stream[:256],
            stream_seq=stream_seq,
            deliveries=deliveries,
            headers=hdrs,
            payload_bytes=len(payload),
            payload_sha256=hashlib.sha256(payload).hexdigest(),
            payload_excerpt=excerpt,
            failed_at=datetime.now(UTC),
        )
