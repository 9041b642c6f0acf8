"""Signed messages: an HMAC-SHA256 over the subject, the signing time and the exact payload bytes.

Why: anyone who can publish on NATS could announce a model (issue 20, item 2); until every sender has
an identity of its own (NATS accounts, item 1), the prioritizer needs a way to tell the registry's
announcements from anyone else's. A key shared by the registry's processes and the prioritizers
(``HYLO_MODEL_SIGNING_KEY``) does that without new dependencies: ``hmac`` and ``hashlib`` from the
standard library (``cryptography``, for Ed25519, is not installed here; an asymmetric scheme would
let the prioritizers verify without being able to sign, and plugs in behind the same ``Signer``).

What is signed: ``<subject>\\n<signed-at ns>\\n`` followed by the payload as it travels, never a
re-encoding (two versions of the code may encode the same message differently). The subject binds
the signature to the cluster and kind; the signing time lets a receiver refuse an old signed message
replayed after a newer one (``services.prioritizer.trust``). The header is
``Hylo-Signature: v1:<key id>:<signed-at ns>:<hex digest>``; the key id (the first 8 hex digits of
the key's sha256) says which key signed, so a key can be rotated: a receiver accepts the current key
and ``HYLO_MODEL_SIGNING_KEY_PREVIOUS`` while senders move to the new one.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from shared.config import HyloBaseSettings
from shared.schemas.subjects import Kind

HEADER_SIGNATURE = "Hylo-Signature"
_SCHEME = "v1"


class SigningSettings(HyloBaseSettings):
    """The shared key model announcements are signed and verified with (``HYLO_MODEL_SIGNING_KEY``)."""

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    model_signing_key: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 key: the registry signs model announcements with it, and a prioritizer "
        "that has it refuses unsigned or badly signed ones",
    )
    model_signing_key_previous: SecretStr | None = Field(
        default=None, description="a key still accepted (not used to sign) while a key is rotated"
    )

    def signer(self) -> Signer | None:
        """The signer of these settings, or None when no key is set."""
        if self.model_signing_key is None:
            return None
        previous = self.model_signing_key_previous
        return Signer(
            self.model_signing_key.get_secret_value().encode(),
            previous=(previous.get_secret_value().encode(),) if previous is not None else (),
        )


def key_id(key: bytes) -> str:
    """A public name of a key (it reveals nothing usable about the key itself)."""
    return hashlib.sha256(key).hexdigest()[:8]


@dataclass(frozen=True)
class Signed:
    """A signature that verified: which key made it and when."""

    key_id: str
    signed_at_ns: int


class Signer:
    """Signs and verifies messages of ``kinds`` (model announcements by default)."""

    def __init__(self, key: bytes, *, previous: tuple[bytes, ...] = (), kinds: frozenset[Kind] | None = None):
        if len(key) < 16:
            raise ValueError("a signing key must be at least 16 bytes long")
        self._key = key
        self._keys = {key_id(k): k for k in (key, *previous)}
        self.kinds: frozenset[Kind] = kinds if kinds is not None else frozenset({"models"})

    @staticmethod
    def _digest(key: bytes, subject: str, signed_at_ns: int, payload: bytes) -> str:
        mac = hmac.new(key, f"{subject}\n{signed_at_ns}\n".encode(), hashlib.sha256)
        mac.update(payload)
        return mac.hexdigest()

    def sign(self, subject: str, payload: bytes, signed_at_ns: int | None = None) -> str:
        """The ``Hylo-Signature`` header value for ``payload`` published on ``subject``."""
        at = time.time_ns() if signed_at_ns is None else signed_at_ns
        return f"{_SCHEME}:{key_id(self._key)}:{at}:{self._digest(self._key, subject, at, payload)}"

    def verify(self, subject: str, headers: Mapping[str, str], payload: bytes) -> Signed | str:
        """The verified signature, or why the message is refused (a short reason for a dead letter)."""
        value = headers.get(HEADER_SIGNATURE)
        if not value:
            return f"unsigned (no {HEADER_SIGNATURE} header) while a signing key is configured"
        parts = value.split(":")
        if len(parts) != 4 or parts[0] != _SCHEME or not parts[2].isdigit():
            return f"malformed {HEADER_SIGNATURE} header"
        _, kid, at_text, digest = parts
        key = self._keys.get(kid)
        if key is None:
            return f"signed with an unknown key (id {kid[:8]!r}); known: {', '.join(sorted(self._keys))}"
        at = int(at_text)
        if not hmac.compare_digest(digest, self._digest(key, subject, at, payload)):
            return f"bad signature (key id {kid}): the payload or subject was changed after signing"
        return Signed(kid, at)


def signed_at(headers: Mapping[str, str]) -> int | None:
    """The signing time (ns) a ``Hylo-Signature`` header states, unverified; None without one."""
    parts = (headers.get(HEADER_SIGNATURE) or "").split(":")
    return int(parts[2]) if len(parts) == 4 and parts[2].isdigit() else None
