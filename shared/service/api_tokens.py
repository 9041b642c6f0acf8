"""The API token file: one bearer token per line, kept as its SHA-256 hash with a name and a scope.

Why hashes: the file sits on every host that serves an API (the query API, the trainer), in
backups and in config management; a leaked copy must not let anyone in. Tokens are 256 random
bits, so a plain SHA-256 (no salt, no slow KDF) cannot be reversed or guessed; only ``hylo tokens
create`` ever sees a token, and prints it once.

Why names: a request is rate-limited and logged by the token's name, never by the token, and a
token is rotated or revoked by name.

The format, one token per line (``#`` starts a comment; blank lines are ignored)::

    NAME SCOPE sha256:HEX [CREATED]

``NAME`` is 1-64 of letters, digits, ``.``, ``_``, ``@``, ``-``; ``SCOPE`` is ``read`` or
``admin``; ``HEX`` the 64 hex digits of the token's SHA-256; ``CREATED`` an optional ISO-8601 time.
A bad line is refused with the file and line number and what is wrong, never with the line's text
(a token pasted there by mistake must not reach a log).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

log = logging.getLogger("hylo.api")

Scope = Literal["read", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
#: what each scope allows: admin implies read
GRANTS: dict[Scope, frozenset[Scope]] = {"read": frozenset({"read"}), "admin": frozenset({"read", "admin"})}

TOKEN_PREFIX = "hylo_"  # makes a leaked token easy to spot for secret scanners
MAX_TOKEN_CHARS = 512
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
HASH_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
HEADER = (
    "# Hylo API tokens (docs/security.md): NAME SCOPE sha256:HASH [CREATED], one per line.\n"
    "# Only hashes are kept here; `hylo tokens create` prints each token once.\n"
)


class TokenFileError(ValueError):
    """The token file cannot be used; the message is one line naming the file (and line)."""


@dataclass(frozen=True)
class TokenEntry:
    name: str
    scope: Scope
    digest: bytes  # the token's SHA-256
    created: str | None = None

    def allows(self, scope: Scope) -> bool:
        return scope in GRANTS[self.scope]


def new_token() -> str:
    """A fresh bearer token: 256 random bits, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _entry(fields: list[str], where: str) -> TokenEntry:
    """One line's fields as an entry; a TokenFileError naming ``where`` (file:line) otherwise."""
    if len(fields) not in (3, 4):
        raise TokenFileError(
            f"{where}: expected NAME SCOPE sha256:HASH [CREATED] (3 or 4 fields), found {len(fields)} "
            "(the line is not shown: it may hold a secret)"
        )
    name, scope, hashed = fields[:3]
    if not NAME_PATTERN.match(name):
        raise TokenFileError(f"{where}: the name must be 1-64 letters, digits, '.', '_', '@' or '-'")
    if scope not in SCOPES:
        raise TokenFileError(f"{where}: the scope must be one of {', '.join(SCOPES)}")
    if not HASH_PATTERN.match(hashed):
        raise TokenFileError(
            f"{where}: the hash must be 'sha256:' and 64 lower-case hex digits (the file keeps hashes, "
            "never tokens: write it with `hylo tokens create`)"
        )
    created = fields[3] if len(fields) == 4 else None
    return TokenEntry(name, scope, bytes.fromhex(hashed.removeprefix("sha256:")), created)


def parse_tokens(text: str, path: Path) -> list[TokenEntry]:
    """The entries of a token file's ``text``; a TokenFileError naming ``path`` and the line."""
    entries: list[TokenEntry] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        entry = _entry(line.split(), where)
        if entry.name in seen:
            raise TokenFileError(
                f"{where}: the name {entry.name!r} is already used on line {seen[entry.name]}"
            )
        seen[entry.name] = number
        entries.append(entry)
    return entries


def read_tokens(path: Path) -> list[TokenEntry]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TokenFileError(f"{path}: cannot read the token file: {type(err).__name__}: {err}") from None
    return parse_tokens(text, path)


def find(entries: list[TokenEntry], token: str) -> TokenEntry | None:
    """The entry whose hash is ``token``'s; every entry is compared (in constant time each)."""
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    digest = token_digest(token)
    found = None
    for entry in entries:
        if hmac.compare_digest(entry.digest, digest):
            found = entry
    return found


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename: a reader never sees half a file (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def add_token(path: Path, name: str, scope: Scope) -> str:
    """Append a new token named ``name`` to the file (created if missing); return the token."""
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    entries = parse_tokens(text, path)  # refuse to extend a file that is already broken
    if not NAME_PATTERN.match(name):
        raise TokenFileError(f"the name {name!r} must be 1-64 letters, digits, '.', '_', '@' or '-'")
    if any(e.name == name for e in entries):
        raise TokenFileError(f"{path}: a token named {name!r} exists; revoke it first or pick another name")
    token = new_token()
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = f"{name} {scope} sha256:{token_digest(token).hex()} {created}\n"
    _write_atomically(path, text + ("" if text.endswith("\n") or not text else "\n") + line)
    return token


def remove_token(path: Path, name: str) -> bool:
    """Remove the token named ``name``; False when there was none. Other lines are kept as they are."""
    text = path.read_text(encoding="utf-8")
    parse_tokens(text, path)
    kept = [raw for raw in text.splitlines(keepends=True) if raw.split("#", 1)[0].split()[:1] != [name]]
    if len(kept) == len(text.splitlines(keepends=True)):
        return False
    _write_atomically(path, "".join(kept))
    return True


class TokenTable:
    """The token file's entries, re-read when the file changes: rotation needs no restart.

    A file that turns bad (or disappears) after start keeps the last good entries in force, with
    one error logged per change: a typo must neither lock every client out nor open the API.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self.entries = read_tokens(path)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def refresh(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            entries = read_tokens(self.path)
        except TokenFileError as err:
            log.error("API tokens not reloaded, the previous ones stay in force: %s", err)
            return
        self.entries = entries
        log.info("API tokens reloaded from %s: %d token(s)", self.path, len(entries))

    def lookup(self, token: str) -> TokenEntry | None:
        self.refresh()
        return find(self.entries, token)
