"""``hylo serve <name>``: run one replica of a service, as ``python -m services.<name>`` does.

Why import by name: the CLI (in ``shared``) must not depend on every service's heavy imports (torch
for the prioritizer, OR-Tools for the placer) just to print its help; the service module is loaded
only when asked for.
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from shared.cli.common import fail
from shared.service import ServiceDefinition, run_service

#: the long-running services (the simulated cluster is a one-shot replay: ``hylo run``, or
#: ``python -m services.adapter_sim``)
SERVICES = ("featurizer", "prioritizer", "placer", "adapter_slurm", "trainer")


def load_definition(name: str) -> ServiceDefinition:
    """The DEFINITION of ``services.<name>.service``; a clear error for unknown or unbuilt ones."""
    module_name = name.replace("-", "_")
    if module_name not in SERVICES:
        raise fail(f"unknown service {name!r}; expected one of {', '.join(SERVICES)}")
    try:
        module = importlib.import_module(f"services.{module_name}.service")
    except ModuleNotFoundError as err:
        raise fail(f"service {name!r} cannot be served from this build: {err}") from err
    definition = getattr(module, "DEFINITION", None)
    if not isinstance(definition, ServiceDefinition):
        raise fail(f"services.{module_name}.service has no DEFINITION")
    return definition


def serve_command(
    name: Annotated[str, typer.Argument(help=f"service to run: {', '.join(SERVICES)}")],
) -> None:
    """Run one service replica until SIGTERM/SIGINT (configured by HYLO_* env vars and hylo.toml)."""
    raise typer.Exit(run_service(load_definition(name)))
