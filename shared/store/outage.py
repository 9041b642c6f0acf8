"""Which database errors mean "the store is unavailable, try again later" and which mean "this write
is wrong".

Why it matters: the recorders retry a message for minutes when the database is down (restarting,
failing over, unreachable, locked), and dead-letter it after a few tries when the write itself fails
(a constraint it breaks, a value the column refuses), which no amount of waiting mends. Mistaking
the first for the second loses rows during every outage; mistaking the second for the first only
delays a dead letter by the retry window, so an error this module cannot place counts as an outage
when its cause chain shows a lost connection, and as a bad write otherwise.
"""

from __future__ import annotations

from sqlalchemy import exc

__all__ = ["store_unavailable"]

#: SQLSTATE classes and codes of a server that is there but cannot serve now: connection exceptions
#: (08), insufficient resources (53: disk full, too many connections), operator intervention (57:
#: shutting down, starting up, recovering), and the retryable transaction conflicts (40001, 40P01)
_TRANSIENT_CLASSES = ("08", "53", "57")
_TRANSIENT_CODES = ("40001", "40P01", "55P03")

#: SQLite's words for a file it cannot write now (another writer holds it, the disk is full or
#: read-only, the file is gone): all OperationalError, as is a wrong table, told apart by the text
_SQLITE_TRANSIENT = (
    "database is locked",
    "database table is locked",
    "disk i/o error",
    "database or disk is full",
    "readonly database",
    "unable to open database file",
)


def store_unavailable(err: BaseException) -> bool:
    """True if ``err`` (or what caused it) says the database cannot be reached or written now."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _unavailable(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _unavailable(err: BaseException) -> bool:
    if isinstance(err, (OSError, TimeoutError, exc.TimeoutError, exc.DisconnectionError)):
        return True  # refused, reset, unreachable, the pool's checkout timed out
    if isinstance(err, exc.DBAPIError) and err.connection_invalidated:
        return True
    if isinstance(err, exc.InterfaceError):
        return True  # the driver's connection is closed or broken
    sqlstate = getattr(err, "sqlstate", None) or getattr(getattr(err, "orig", None), "sqlstate", None)
    if isinstance(sqlstate, str) and (sqlstate[:2] in _TRANSIENT_CLASSES or sqlstate in _TRANSIENT_CODES):
        return True
    if type(err).__module__.startswith("asyncpg") and type(err).__name__ in (
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        "InterfaceError",
        "CannotConnectNowError",
        "TooManyConnectionsError",
    ):
        return True
    if isinstance(err, exc.OperationalError):
        text = str(err.orig if err.orig is not None else err).lower()
        if any(words in text for words in _SQLITE_TRANSIENT):
            return True
        # PostgreSQL's OperationalErrors without a SQLSTATE are lost connections
        return err.connection_invalidated or "connection" in text
    return False
