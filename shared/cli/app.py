"""``hylo``: the command-line entry point. Each command lives in its own module.

The root group (``HyloGroup``) makes every usage error and unexpected exception one line;
``--debug`` shows the traceback instead, ``--version`` prints the installed package's version.
``run`` and ``up`` are registered with their inputs checked first (``pipeline_checks``).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from shared.cli.bus import bus_app
from shared.cli.common import console
from shared.cli.deadletters import deadletters_app
from shared.cli.evaluate import evaluate_command
from shared.cli.group import HyloGroup
from shared.cli.help_format import fold_defaults
from shared.cli.jobs import job_command, jobs_command
from shared.cli.models import models_app
from shared.cli.pipeline_checks import checked_run, checked_up
from shared.cli.report import report_command
from shared.cli.retrain import retrain_command
from shared.cli.serve import serve_command
from shared.cli.simulate import simulate_command
from shared.cli.status import status_command
from shared.cli.tokens import tokens_app
from shared.cli.train import train_command

fold_defaults()

app = typer.Typer(
    name="hylo",
    cls=HyloGroup,
    help="Hylo: learned prioritizer + optimizing placer for heterogeneous GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


app.command("run")(checked_run)
app.command("up")(checked_up)
app.command("simulate")(simulate_command)
app.command("train")(train_command)
app.command("evaluate")(evaluate_command)
app.command("serve")(serve_command)
app.command("report")(report_command)
app.command("retrain")(retrain_command)
app.command("jobs")(jobs_command)
app.command("job")(job_command)
app.command("status")(status_command)
app.add_typer(models_app, name="models")
app.add_typer(deadletters_app, name="deadletters")
app.add_typer(tokens_app, name="tokens")
app.add_typer(bus_app, name="bus")


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
