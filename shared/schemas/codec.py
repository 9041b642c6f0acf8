"""Encoding and decoding messages, with size limits and readable errors.

Why a function and not ``model_validate_json`` at every call site: the byte-size check must happen
before parsing (a 50 MB payload must not be parsed at all), the limits must reach the validators, and
every rejection must carry a one-line reason plus per-field errors for the dead-letter record.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from shared.schemas.deadletter import FieldError
from shared.schemas.limits import Limits, limits_or_configured

M = TypeVar("M", bound=BaseModel)


class MessageError(ValueError):
    """A payload that is not a valid message: ``reason`` is one line, ``errors`` the per-field detail."""

    def __init__(self, reason: str, errors: tuple[FieldError, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.errors = errors


class MissingReference(MessageError):
    """A message that names a nested message by reference (``REFERENCED``) which this process has not
    received: ``seq`` is where it is stored in the ``kind`` stream, ``sha256`` the digest of its bytes.
    A consumer may fetch it (``shared.bus.consumer``'s ``fetch_missing``) and decode again."""

    def __init__(self, reason: str, kind: str, seq: int, sha256: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.seq = seq
        self.sha256 = sha256


class ReceivedJson:
    """The JSON that recently decoded messages were decoded from, so that a message nested in another
    one is neither encoded again nor decoded twice.

    Why: the prioritizer's PriorityVector carries the FeatureMatrix it received, unchanged (the matrix
    is nine tenths of the vector). Encoding those 1,024 jobs and 18,000 feature values again cost the
    prioritizer about 1 ms per vector, and decoding them again cost the placer 2 ms, both on the
    path from snapshot to decision. A model class opts in with ``KEEP_RECEIVED_JSON = True``;
    ``decode`` then remembers the bytes of its last few instances (``keep`` of them, fewer when their
    bytes pass ``max_bytes``), by object identity, with the limits they were validated under. A
    message that nests one (``NESTED_RECEIVED`` names the fields) is encoded with the nested
    message's bytes spliced in as its last field, and decoded without re-reading them when they end
    the payload exactly as remembered (the placer decodes each matrix as it is published, while the
    prioritizer works: ``shared.bus.ahead``).

    Messages are frozen, so an instance always still matches its bytes, and a copy (``model_copy``)
    is a new object, encoded as usual. The bytes are what the sender's ``encode`` produced for the
    same values, so the receiver of the outer message decodes exactly what a fresh encoding holds.
    """

    def __init__(self, keep: int = 8, max_bytes: int = 32 << 20) -> None:
        self.keep = keep
        #: the newest message is always kept; older ones while their bytes stay under this
        self.max_bytes = max_bytes
        self._by_id: OrderedDict[int, tuple[BaseModel, bytes, Limits]] = OrderedDict()
        self._digests: dict[int, str] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def remember(self, message: BaseModel, data: bytes, limits: Limits | None = None) -> None:
        limits = limits_or_configured(limits)
        with self._lock:
            old = self._by_id.pop(id(message), None)
            self._bytes -= len(old[1]) if old is not None else 0
            self._by_id[id(message)] = (message, data, limits)
            self._bytes += len(data)
            self._digests.pop(id(message), None)
            while len(self._by_id) > 1 and (len(self._by_id) > self.keep or self._bytes > self.max_bytes):
                key, (_, dropped, _) = self._by_id.popitem(last=False)
                self._digests.pop(key, None)
                self._bytes -= len(dropped)

    def of(self, message: BaseModel) -> bytes | None:
        """The bytes ``message`` itself was decoded from, if it is one of the remembered objects."""
        with self._lock:
            found = self._by_id.get(id(message))
        return found[1] if found is not None and found[0] is message else None

    def digest_of(self, message: BaseModel) -> str | None:
        """The sha256 (hex) of the bytes ``message`` was decoded from (computed once), or None."""
        with self._lock:
            found = self._by_id.get(id(message))
            digest = self._digests.get(id(message))
        if found is None or found[0] is not message:
            return None
        if digest is None:
            digest = hashlib.sha256(found[1]).hexdigest()
            with self._lock:
                if self._by_id.get(id(message)) is found:
                    self._digests[id(message)] = digest
        return digest

    def with_digest(self, digest: str, model: type[BaseModel], limits: Limits) -> BaseModel | None:
        """A remembered ``model`` instance (validated under ``limits``) whose bytes have sha256
        ``digest``, newest first; None if there is none."""
        with self._lock:
            entries = list(self._by_id.values())
        for message, _, kept_under in reversed(entries):
            if type(message) is model and kept_under == limits and self.digest_of(message) == digest:
                return message
        return None

    def ending(self, data: bytes, name: str, limits: Limits) -> tuple[BaseModel, int] | None:
        """A remembered message (validated under ``limits``) whose bytes end ``data`` as its field
        ``name`` (``...,"name":<bytes>}``), and where that field starts; None if there is none."""
        key = b',"' + name.encode() + b'":'
        with self._lock:
            entries = list(self._by_id.values())
        end = len(data) - 1
        if end < 1 or data[end] != ord("}"):
            return None
        for message, raw, kept_under in reversed(entries):  # newest first
            start = end - len(raw) - len(key)
            if (
                start > 0
                and kept_under == limits
                and data.startswith(key, start)
                and data.endswith(raw, 0, end)
            ):
                return message, start
        return None


RECEIVED = ReceivedJson()


def _keeps_json(model: type[BaseModel]) -> bool:
    return bool(getattr(model, "KEEP_RECEIVED_JSON", False))


def _with_received(message: BaseModel) -> bytes | None:
    """``message``'s JSON with its nested fields that were received as JSON spliced in unchanged
    (``NESTED_RECEIVED``); None when none of them was."""
    names: tuple[str, ...] = getattr(message, "NESTED_RECEIVED", ())
    raw = {name: data for name in names if (data := RECEIVED.of(getattr(message, name))) is not None}
    if not raw:
        return None
    head = message.__pydantic_serializer__.to_json(message, exclude=set(raw))
    parts = [head[:-1]]
    sep = b"," if len(head) > 2 else b""
    for name, data in raw.items():
        parts.append(sep + b'"' + name.encode() + b'":' + data)
        sep = b","
    parts.append(b"}")
    return b"".join(parts)


def _splices_received(message: BaseModel) -> bool:
    """Whether ``message`` nests a message that would be spliced in as received."""
    return any(RECEIVED.of(getattr(message, n)) is not None for n in getattr(message, "NESTED_RECEIVED", ()))


def _referenced(message: BaseModel) -> set[str]:
    """The nested fields of ``message`` sent as a reference (``REFERENCED``: field -> reference field,
    the reference set), left out of its JSON."""
    refs: dict[str, str] = getattr(message, "REFERENCED", {})
    return {name for name, ref in refs.items() if getattr(message, ref) is not None}


def encode(message: BaseModel, limits: Limits | None = None) -> bytes:
    """Compact JSON bytes; raises MessageError if the result exceeds ``limits.max_message_bytes``.

    A nested message sent by reference (``REFERENCED``, its reference field set) is left out. A nested
    message that was itself received as JSON (``ReceivedJson``) is spliced in as received.
    """
    limits = limits_or_configured(limits)
    if referenced := _referenced(message):
        data = message.__pydantic_serializer__.to_json(message, exclude=referenced)
        if len(data) > limits.max_message_bytes:
            raise MessageError(
                f"{type(message).__name__} encodes to {len(data)} bytes, more than the limit of "
                f"{limits.max_message_bytes} bytes"
            )
        return data
    data = _with_received(message) or message.__pydantic_serializer__.to_json(message)
    if len(data) > limits.max_message_bytes and _splices_received(message):
        # the received bytes may be less compact than a fresh encoding (a foreign publisher's
        # whitespace): the limit applies to what Hylo itself would send
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


def decode(model: type[M], data: bytes | str, limits: Limits | None = None) -> M:
    """Validate JSON ``data`` as ``model`` under ``limits`` (the configured ones when None); raises
    MessageError with the reason."""
    limits = limits_or_configured(limits)
    size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
    if size > limits.max_message_bytes:
        raise MessageError(
            f"message of {size} bytes exceeds the limit of {limits.max_message_bytes} bytes "
            f"for {model.__name__} (raise it with HYLO_MAX_MESSAGE_BYTES)"
        )
    if isinstance(data, bytes) and (known := _decode_with_reference(model, data, limits)) is not None:
        return known
    if isinstance(data, bytes) and (known := _decode_with_received(model, data, limits)) is not None:
        return known
    try:
        message = model.model_validate_json(data, context=limits.context())
    except ValidationError as err:
        raise describe(model, err) from None
    if _keeps_json(model):
        RECEIVED.remember(message, data.encode("utf-8") if isinstance(data, str) else bytes(data), limits)
    return message


_HEADS: dict[tuple[type[BaseModel], str], type[BaseModel]] = {}


def _head_model(model: type[BaseModel], name: str) -> type[BaseModel]:
    """``model`` without its field ``name`` (same types and constraints), to validate the rest of a
    payload whose field ``name`` is a remembered message; built once per (model, field)."""
    head = _HEADS.get((model, name))
    if head is None:
        fields: dict[str, Any] = {
            f: (info.annotation, info) for f, info in model.model_fields.items() if f != name
        }
        head = create_model(f"{model.__name__}Head", __config__=model.model_config, **fields)
        _HEADS[(model, name)] = head
    return head


def _decode_with_received(model: type[M], data: bytes, limits: Limits) -> M | None:
    """``data`` decoded as ``model`` reusing a remembered message that ends it (``ReceivedJson``), or
    None: the caller then decodes the whole payload, which also reports any error."""
    for name in getattr(model, "NESTED_RECEIVED", ()):
        found = RECEIVED.ending(data, name, limits)
        if found is None:
            continue
        nested, start = found
        context = limits.context()
        try:
            head = _head_model(model, name).model_validate_json(data[:start] + b"}", context=context)
            fields = {f: getattr(head, f) for f in head.model_fields_set}
            # every validator of the whole model runs here (the nested message is not re-validated:
            # it was, under the same limits, when it was decoded)
            return model.model_validate({**fields, name: nested}, context=context)
        except ValidationError:
            return None
    return None


def _decode_with_reference(model: type[M], data: bytes, limits: Limits) -> M | None:
    """``data`` decoded as ``model`` with a nested message it names by reference (``REFERENCED``)
    taken from the remembered ones (``ReceivedJson.with_digest``); None when ``data`` does not use a
    reference (or is invalid: the caller then decodes the whole payload, which reports the error).
    ``MissingReference`` when the referenced message is not at hand."""
    refs: dict[str, str] = getattr(model, "REFERENCED", {})
    for name, ref_name in refs.items():
        if b'"' + ref_name.encode() + b'":{' not in data:
            continue
        context = limits.context()
        try:
            head = _head_model(model, name).model_validate_json(data, context=context)
        except ValidationError:
            return None
        ref = getattr(head, ref_name)
        if ref is None:
            continue
        nested_model = model.model_fields[name].annotation
        assert isinstance(nested_model, type) and issubclass(nested_model, BaseModel)
        nested = RECEIVED.with_digest(ref.sha256, nested_model, limits)
        if nested is None:
            kind = str(getattr(nested_model, "kind", name))
            raise MissingReference(
                f"invalid {model.__name__}: {ref_name}: the {nested_model.__name__} it ranks ({kind} stream "
                f"sequence {ref.seq}, sha256 {ref.sha256[:16]}...) is not at hand",
                kind,
                ref.seq,
                ref.sha256,
            )
        fields = {f: getattr(head, f) for f in head.model_fields_set}
        try:
            return model.model_validate({**fields, name: nested}, context=context)
        except ValidationError as err:
            raise describe(model, err) from None
    return None
