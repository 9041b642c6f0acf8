"""What every command shares: the console, a clean error exit, the progress bar, the report files,
the ``--database`` option.

Why the console is wide when output is piped: rich otherwise assumes 80 columns without a terminal
and folds or cuts tables (``hylo simulate | tee log`` lost the metric columns); piped, the lines
are as long as their content, which is what ``grep`` and a log file want. ``COLUMNS`` still wins.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.cli.errors import debug_enabled, one_line

if TYPE_CHECKING:
    from shared.domain.load import LoadDefinition
    from shared.metrics import PolicyComparison

#: the console's width when stdout is not a terminal (and ``COLUMNS`` is unset): wide enough that
#: no table is folded or cut
PIPED_WIDTH = 1000


def _make_console() -> Console:
    """The console: the terminal's width on a terminal, ``COLUMNS`` if set, else ``PIPED_WIDTH``."""
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS", "").isdigit()
    return Console(width=PIPED_WIDTH if piped else None)


console = _make_console()


def fail(message: str) -> typer.Exit:
    """Print ``message`` as a one-line error and return the exit to raise (code 2).

    Under ``hylo --debug`` the traceback of the exception being handled (if any) comes first.
    """
    if debug_enabled() and sys.exc_info()[0] is not None:
        traceback.print_exc()
    console.print(f"[bold red]error:[/] {escape(one_line(message))}", soft_wrap=True, highlight=False)
    return typer.Exit(code=2)


#: help of every ``--database`` option (``--database-url`` is the same option's other name)
DATABASE_HELP = (
    "the store: a SQLite file path, or a SQLAlchemy URL (sqlite:///PATH, postgresql://USER@HOST/DB; "
    "sync drivers are mapped to aiosqlite/asyncpg); default: HYLO_DATABASE_URL, else ./hylo.db"
)

DatabaseOpt = Annotated[str | None, typer.Option("--database", "--database-url", help=DATABASE_HELP)]


def database_option(value: str | None, option: str = "--database") -> str:
    """The async URL the store opens for ``--database`` (``HYLO_DATABASE_URL`` when not given);
    a one-line exit naming the supported databases when it is none of them."""
    from pydantic import ValidationError

    from shared.store.settings import StoreSettings
    from shared.store.urls import DatabaseUrlError, database_url

    source = option
    if value is None:
        source = "HYLO_DATABASE_URL"
        try:
            value = StoreSettings().database_url
        except ValidationError as err:
            raise fail(f"database settings: {err}") from None
    try:
        return database_url(value)
    except DatabaseUrlError as err:
        raise fail(f"{source}: {err}") from None


def existing_database(value: str | None, option: str = "--database") -> str:
    """``database_option`` for a command that only reads: a SQLite file that does not exist is an
    error, not a new empty store (aiosqlite would create it)."""
    from shared.store.urls import sqlite_file

    url = database_option(value, option)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        source = option if value is not None else "HYLO_DATABASE_URL"
        raise fail(
            f"{source}: no SQLite file at {path} (a command that reads the store creates none); pass "
            "--database PATH of an existing store, e.g. the hylo.db that `hylo run` printed"
        )
    return url


def follow_up_commands(database: str) -> str:
    """The commands to read a store afterwards, ready to paste (``hylo run`` prints them)."""
    where = shlex.quote(database)
    return (
        f"read it with: hylo report --database {where}; hylo models list --database {where}; "
        f"hylo jobs --database {where}"
    )


#: ``--load-definition``'s help: what the choices mean (the definitions are in shared.domain.load)
LOAD_DEFINITION_HELP = (
    "what --load means: in-span (each job's GPU work up to the last arrival over capacity x arrival "
    "span, the utilization if every job started on arrival) | capped (runtimes capped at the span, "
    "the definition before issue 18)"
)


def load_definition_option(value: str | None, default: str) -> LoadDefinition:
    """``--load-definition`` checked (``default`` when not given); a clean exit naming the choices."""
    from shared.domain.load import check_definition

    try:
        return check_definition(default if value is None else value)
    except ValueError as err:
        raise fail(f"--load-definition: {err}") from None


def progress_bar() -> Progress:
    """The progress bar of long commands: description, bar, done/total, elapsed time."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def write_comparison(
    comparison: PolicyComparison, report: dict[str, Any], out: Path, name: str, plots: bool
) -> None:
    """``out/<name>`` (the report as JSON) and, unless ``plots`` is off, the comparison's PNG plots
    (``hylo simulate`` and ``hylo evaluate`` write the same files)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {path}")
    if plots:
        for png in comparison.plot(out):
            console.print(f"wrote {png}")


async def migrated_engine(url: str) -> AsyncEngine:
    """An engine on ``url`` (any ``--database`` value), the store migrated to the newest schema; a
    clear exit if it cannot open."""
    from shared.store import create_engine, upgrade
    from shared.store.settings import safe_url
    from shared.store.urls import DatabaseUrlError, database_url

    try:
        url = database_url(url)
    except DatabaseUrlError as err:
        raise fail(f"--database: {err}") from None
    engine = create_engine(url)
    try:
        await upgrade(engine)
    except Exception as err:  # unreachable server, bad credentials, not a database file
        await engine.dispose()
        raise fail(f"cannot open the database {safe_url(url)}: {type(err).__name__}: {err}") from None
    return engine
