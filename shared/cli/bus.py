"""``hylo bus``: the bus' identities and streams (``credentials``, ``init``).

Why a command: NATS permissions are only as good as their generation. ``credentials`` writes every
identity of a deployment from ``shared.bus.identity`` (what each role may publish), with a private
CA and server certificate on request; ``init`` creates the streams with the admin identity, since
the services' own identities may not (docs/security.md, "Identity on the bus").
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from shared.bus.certificates import DEFAULT_HOSTS
from shared.bus.credentials import write_credentials
from shared.bus.identity import Identity, IdentityError, standard_identities
from shared.bus.settings import BusSettings
from shared.bus.streams import create_streams
from shared.bus.tls import BusConfigError
from shared.cli.common import console, fail
from shared.schemas.subjects import SubjectError, Subjects

bus_app = typer.Typer(
    name="bus",
    help="NATS identities and streams: generate credentials, create the streams.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _identities(clusters: list[str], trainer: bool) -> list[Identity]:
    try:
        found = standard_identities(tuple(clusters))
    except (IdentityError, SubjectError) as err:
        raise fail(f"--cluster: {err}") from None
    return [i for i in found if trainer or i.role != "trainer"]


@bus_app.command("credentials")
def credentials_command(
    out: Annotated[Path, typer.Option("--out", help="folder to write into (kept seeds are reused)")],
    cluster: Annotated[
        list[str], typer.Option("--cluster", help="a cluster with an adapter (repeat for several)")
    ],
    subject_root: Annotated[str, typer.Option(help="subject namespace (HYLO_SUBJECT_ROOT)")] = "hylo",
    tls: Annotated[bool, typer.Option(help="also a private CA and a server certificate")] = False,
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host", help=f"name the clients dial, in the certificate (default: {', '.join(DEFAULT_HOSTS)})"
        ),
    ] = None,
    client_dir: Annotated[
        Path | None, typer.Option(help="where clients find these files (a container mount; default: --out)")
    ] = None,
    server_dir: Annotated[
        Path | None, typer.Option(help="where the server finds these files (default: --out)")
    ] = None,
    rotate: Annotated[
        list[str] | None, typer.Option("--rotate", help="give this identity a new seed (repeatable)")
    ] = None,
    new_ca: Annotated[bool, typer.Option(help="with --tls: a new CA too (every client needs it)")] = False,
) -> None:
    """Write one NKEY per identity (admin, featurizer, prioritizer, placer, trainer, one adapter per
    --cluster), the server's authorization block and each identity's env file."""
    try:
        subjects = Subjects(subject_root)
        written = write_credentials(
            out,
            _identities(cluster, trainer=True),
            subjects,
            tls=tls,
            hosts=tuple(host or DEFAULT_HOSTS),
            client_dir=client_dir,
            server_dir=server_dir,
            rotate=rotate or (),
            new_ca=new_ca,
        )
    except (ValueError, OSError) as err:
        raise fail(f"hylo bus credentials: {err}") from None
    table = Table(title=f"identities in {escape(str(out))}")
    for column in ("identity", "role", "clusters", "public key", "env file"):
        table.add_column(column)
    for c in written.credentials:
        table.add_row(
            c.identity.name,
            c.identity.role,
            ", ".join(c.identity.clusters),
            c.public_key[:12] + "...",
            c.env.name,
        )
    console.print(table)
    includes = [written.auth_conf.name] + ([written.tls_conf.name] if written.tls_conf else [])
    console.print(
        "server: include " + ", ".join(includes) + " from nats.conf; each process gets only its own "
        "<identity>.nk and <identity>.env; then `hylo bus init` with the admin identity",
        soft_wrap=True,
    )


@bus_app.command("init")
def init_command(
    nats_url: Annotated[str | None, typer.Option(help="NATS server(s) (default: HYLO_NATS_URL)")] = None,
    subject_root: Annotated[str | None, typer.Option(help="subject namespace (HYLO_SUBJECT_ROOT)")] = None,
) -> None:
    """Create the streams (or bring them to the configured limits); needs the admin identity."""
    updates: dict[str, object] = {"nats_manage_streams": True}
    if nats_url is not None:
        updates["nats_url"] = nats_url
    if subject_root is not None:
        updates["subject_root"] = subject_root
    settings = BusSettings().model_copy(update=updates)
    try:
        names = asyncio.run(create_streams(settings))
    except (BusConfigError, SubjectError) as err:
        raise fail(str(err)) from None
    except Exception as err:
        raise fail(f"cannot create the streams at {settings.nats_url}: {type(err).__name__}: {err}") from None
    console.print(f"streams ready: {', '.join(names)}", soft_wrap=True)
