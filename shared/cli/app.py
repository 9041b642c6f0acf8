"""``hylo``: the command-line entry point. Each command lives in its own module."""

from __future__ import annotations

import typer

from shared.cli.bus import bus_app
from shared.cli.deadletters import deadletters_app
from shared.cli.evaluate import evaluate_command
from shared.cli.models import models_app
from shared.cli.report import report_command
from shared.cli.retrain import retrain_command
from shared.cli.run import run_command, up_command
from shared.cli.serve import serve_command
from shared.cli.simulate import simulate_command
from shared.cli.tokens import tokens_app
from shared.cli.train import train_command

app = typer.Typer(
    name="hylo",
    help="Hylo: learned prioritizer + optimizing placer for heterogeneous GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run")(run_command)
app.command("up")(up_command)
app.command("simulate")(simulate_command)
app.command("train")(train_command)
app.command("evaluate")(evaluate_command)
app.command("serve")(serve_command)
app.command("report")(report_command)
app.command("retrain")(retrain_command)
app.add_typer(models_app, name="models")
app.add_typer(deadletters_app, name="deadletters")
app.add_typer(tokens_app, name="tokens")
app.add_typer(bus_app, name="bus")


@app.callback()
def _root() -> None:
    """Hylo command line."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
