"""``hylo serve <name>``: run one replica of a service, as ``python -m services.<name>`` does, or the
query API (``hylo serve query``, as ``python -m shared.query``).

Why import by name: the CLI (in ``shared``) must not depend on every service's heavy imports (torch
for the prioritizer, OR-Tools for the placer, FastAPI for the query API) just to print its help; the
service module is loaded only when asked for.
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer

from shared.cli.common import DATABASE_HELP, fail
from shared.service import ServiceDefinition, run_service

#: the long-running services (the simulated cluster is a one-shot replay: ``hylo run``, or
#: ``python -m services.adapter_sim``)
SERVICES = ("featurizer", "prioritizer", "placer", "adapter_slurm", "trainer")
#: the read-only HTTP API over the decisions database (``shared.query``)
QUERY = "query"


def load_definition(name: str) -> ServiceDefinition:
    """The DEFINITION of ``services.<name>.service``; a clear error for unknown or unbuilt ones."""
    module_name = name.replace("-", "_")
    if module_name not in SERVICES:
        raise fail(f"unknown service {name!r}; expected one of {', '.join((*SERVICES, QUERY))}")
    try:
        module = importlib.import_module(f"services.{module_name}.service")
    except ModuleNotFoundError as err:
        raise fail(f"service {name!r} cannot be served from this build: {err}") from err
    definition = getattr(module, "DEFINITION", None)
    if not isinstance(definition, ServiceDefinition):
        raise fail(f"services.{module_name}.service has no DEFINITION")
    return definition


def _query_args(host: str | None, port: int | None, database: str | None) -> list[str]:
    """The options as ``python -m shared.query`` takes them."""
    args: list[str] = []
    for option, value in (("--host", host), ("--port", port), ("--database", database)):
        if value is not None:
            args += [option, str(value)]
    return args


def serve_command(
    name: Annotated[
        str,
        typer.Argument(
            help=f"service to run: {', '.join(SERVICES)}, or {QUERY} (the read-only query API over "
            "the database, docs/query-api.md)"
        ),
    ],
    host: Annotated[
        str | None, typer.Option(help="query only: bind address (default: HYLO_HTTP_HOST, else 127.0.0.1)")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(help="query only: port (default: HYLO_HTTP_PORT, else 8100)", min=0, max=65535),
    ] = None,
    database: Annotated[
        str | None, typer.Option("--database", "--database-url", help=f"query only: {DATABASE_HELP}")
    ] = None,
) -> None:
    """Run one service replica until SIGTERM/SIGINT (configured by HYLO_* env vars and hylo.toml)."""
    if name == QUERY:
        from shared.query.__main__ import main as serve_query

        raise typer.Exit(serve_query(_query_args(host, port, database)))
    if (host, port, database) != (None, None, None):
        raise fail(f"--host, --port and --database are the query API's; {name!r} reads HYLO_* settings")
    raise typer.Exit(run_service(load_definition(name)))
