"""``hylo``: the command-line entry point. Each command lives in its own module.

The root group (``HyloGroup``) makes every usage error and unexpected exception one line;
``--debug`` shows the traceback instead, ``--version`` prints the installed package's version.
``run`` and ``up`` are registered with their inputs checked first (``pipeline_checks``).

Why the commands are imported lazily (``HyloRoot.lazy``): importing every command module pulls in
torch, the simulator, FastAPI, SQLAlchemy and the bus, 5.5 s of CPU before ``hylo status`` could say
anything; a command imports only what it needs.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, ClassVar

import typer

from shared.cli.common import console
from shared.cli.group import HyloGroup
from shared.cli.help_format import fold_defaults

fold_defaults()


class HyloRoot(HyloGroup):
    """``hylo``'s commands, each imported when it runs (or when ``hylo --help`` lists them)."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "run": ("shared.cli.pipeline_checks", "checked_run"),
        "up": ("shared.cli.pipeline_checks", "checked_up"),
        "simulate": ("shared.cli.simulate", "simulate_command"),
        "train": ("shared.cli.train", "train_command"),
        "evaluate": ("shared.cli.evaluate", "evaluate_command"),
        "serve": ("shared.cli.serve", "serve_command"),
        "report": ("shared.cli.report", "report_command"),
        "retrain": ("shared.cli.retrain", "retrain_command"),
        "jobs": ("shared.cli.jobs", "jobs_command"),
        "job": ("shared.cli.jobs", "job_command"),
        "status": ("shared.cli.status", "status_command"),
        "models": ("shared.cli.models", "models_app"),
        "deadletters": ("shared.cli.deadletters", "deadletters_app"),
        "tokens": ("shared.cli.tokens", "tokens_app"),
        "bus": ("shared.cli.bus", "bus_app"),
    }


app = typer.Typer(
    name="hylo",
    cls=HyloRoot,
    help="Hylo: learned prioritizer + optimizing placer for heterogeneous GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def package_version() -> str:
    """The installed ``hylo`` distribution's version (``unknown`` when run from an uninstalled tree)."""
    try:
        return version("hylo")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        console.print(f"hylo {package_version()}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            envvar="HYLO_DEBUG",
            help="show the traceback of an error (by default every error is one line)",
        ),
    ] = False,
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print Hylo's version and exit"
        ),
    ] = False,
) -> None:
    """Hylo command line."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
