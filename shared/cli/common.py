"""What every command shares: the console, a clean error exit, the progress bar, the report files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from shared.domain.load import LoadDefinition
    from shared.metrics import PolicyComparison

console = Console()


def fail(message: str) -> typer.Exit:
    """Print ``message`` as an error (no traceback) and return the exit to raise (code 2)."""
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    return typer.Exit(code=2)


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
    """An engine on ``url``, the store migrated to the newest schema; a clear exit if it cannot open."""
    from shared.store import create_engine, upgrade

    engine = create_engine(url)
    try:
        await upgrade(engine)
    except Exception as err:  # unreachable server, bad credentials, unknown driver
        await engine.dispose()
        raise fail(f"cannot open the database {url}: {type(err).__name__}: {err}") from None
    return engine
