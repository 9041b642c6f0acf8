"""Encoding and decoding messages, with size limits and readable errors.

Why a function and not ``model_validate_json`` at every call site: the byte-size check must happen
before parsing (a 50 MB payload must not be parsed at all), the limits must reach the validators, and
every rejection must carry a one-line reason plus per-field errors for the dead-letter record.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from shared.schemas.deadletter import FieldError
from shared.schemas.limits import DEFAULT_LIMITS, Limits

M = TypeVar("M", bound=BaseModel)


class MessageError(ValueError):
    """A payload that is not a valid message: ``reason`` is one line, ``errors`` the per-field detail."""

    def __init__(self, reason: str, errors: tuple[FieldError, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.errors = errors


def encode(message: BaseModel, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """Compact JSON bytes; raises MessageError if the result exceeds ``limits.max_message_bytes``."""
    data = message.__pydantic_serializer__.to_json(message)
    if len(data) > limits.max_message_bytes:
        raise MessageError(
            f"{type(message).__name__} encodes to {len(data)} bytes, more than the limit of "
            f"{limits.max_message_bytes} bytes"
        )
    return data


def describe(model: type[BaseModel], err: ValidationError) -> MessageError:
    """A MessageError whose reason names the model, the error count and the first fields at fault."""
    errors = FieldError.from_validation(err)
    shown = "; ".join(f"{e.loc}: {e.msg}" for e in errors[:3])
    more = f" (+{err.error_count() - 3} more)" if err.error_count() > 3 else ""
    return MessageError(f"invalid {model.__name__}: {shown}{more}", errors)


def decode(model: type[M], data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> M:
    """Validate JSON ``data`` as ``model`` under ``limits``; raises MessageError with the reason."""
    size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
    if size > limits.max_message_bytes:
        raise MessageError(
            f"message of {size} bytes exceeds the limit of {limits.max_message_bytes} bytes "
            f"for {model.__name__}"
        )
    try:
        return model.model_validate_json(data, context=limits.context())
    except ValidationError as err:
        raise describe(model, err) from None
