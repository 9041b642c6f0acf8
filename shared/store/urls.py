"""One reading of a ``--database`` value: a plain file path or any SQLAlchemy URL, as an async URL.

Why one helper: every command that opens the store (``hylo report``, ``hylo models``, ``hylo jobs``,
``hylo retrain --local``, ``hylo deadletters``, ``hylo up``, the query API) must accept what users
type, and the store's engine is async only. A plain path means a SQLite file
(``sqlite+aiosqlite:///<absolute path>``: absolute, so the printed URL works from any directory and
in the services it is handed to); a URL naming a synchronous driver (``sqlite:///x.db``,
``postgresql://...``, ``postgresql+psycopg2://...``) is mapped to the async driver Hylo ships
(aiosqlite, asyncpg). A backend Hylo has no migrations for (``mysql://``) is refused with one line
that names the supported ones, before any driver import fails deep inside SQLAlchemy.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

#: backend (the part of the scheme before ``+``) -> the async driver the store uses for it
ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}

SUPPORTED = (
    "a SQLite file path, sqlite:///PATH or sqlite+aiosqlite:///PATH, "
    "postgresql://USER@HOST/DB or postgresql+asyncpg://USER@HOST/DB"
)


class DatabaseUrlError(ValueError):
    """A ``--database`` value that names no database Hylo can open (the message says what can)."""


#: ``scheme://``, the scheme SQLAlchemy's ``dialect+driver`` (``postgresql+psycopg2``, ``oracle+cx_oracle``)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+._-]*://")


def _is_url(value: str) -> bool:
    """``scheme://...``: anything else is a file path (``./hylo.db``, ``/data/hylo.db``, ``hylo.db``)."""
    return _SCHEME.match(value) is not None


def _absolute_sqlite(url: URL) -> URL:
    """A SQLite URL with its file made absolute (an in-memory or ``file:`` URI database unchanged)."""
    name = url.database
    if not name or name == ":memory:" or name.startswith("file:"):
        return url
    return url.set(database=str(Path(name).expanduser().absolute()))


def database_url(value: str) -> str:
    """``value`` (a path or a URL) as the async SQLAlchemy URL the store opens.

    Raises ``DatabaseUrlError`` for an empty value, a URL SQLAlchemy cannot parse, or a backend other
    than SQLite and PostgreSQL.
    """
    text = value.strip()
    if not text:
        raise DatabaseUrlError(f"an empty database; expected {SUPPORTED}")
    if not _is_url(text):
        path = Path(text).expanduser().absolute()
        if path.is_dir():
            raise DatabaseUrlError(f"{path} is a folder; expected {SUPPORTED}")
        return URL.create(ASYNC_DRIVERS["sqlite"], database=str(path)).render_as_string()
    try:
        url = make_url(text)
    except ArgumentError as err:
        raise DatabaseUrlError(f"{text!r} is not a database URL ({err}); expected {SUPPORTED}") from None
    backend = url.get_backend_name()
    driver = ASYNC_DRIVERS.get(backend)
    if driver is None:
        raise DatabaseUrlError(
            f"unsupported database {backend!r} in {url.drivername}://...; expected {SUPPORTED}"
        )
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        return f"{driver}:///:memory:"  # rendered by hand: SQLAlchemy would percent-encode the colons
    url = url.set(drivername=driver)
    if backend == "sqlite":
        url = _absolute_sqlite(url)
    return url.render_as_string(hide_password=False)


def sqlite_file(url: str) -> Path | None:
    """The file behind a SQLite URL (None for PostgreSQL, an in-memory database or a bad URL)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    name = parsed.database
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)
