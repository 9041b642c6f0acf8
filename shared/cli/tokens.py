"""``hylo tokens``: create, list and revoke the bearer tokens of the query API and the trainer.

Why the token is printed once and only the hash is written: the token file is read by every API
replica and lives in config management and backups; it holds SHA-256 hashes, so a copy of it lets
nobody in (``shared.service.api_tokens``). ``create`` prints the token alone on stdout (so that
``TOKEN=$(hylo tokens create ...)`` works) and what to do with it on stderr. Running services pick a
changed file up on their next request, so a rotation is: create the new token, move the clients to
it, revoke the old one (docs/security.md).

The file is ``--file``, or ``HYLO_API_TOKENS_FILE`` (the setting the services read).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from shared.cli.common import console, fail
from shared.service.api_auth import ApiSecuritySettings
from shared.service.api_tokens import SCOPES, Scope, TokenFileError, add_token, read_tokens, remove_token

tokens_app = typer.Typer(
    name="tokens",
    help="API bearer tokens (query API, trainer): create, list, revoke.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

FileOpt = Annotated[
    Path | None, typer.Option("--file", help="the token file (default: HYLO_API_TOKENS_FILE)")
]
NameOpt = Annotated[str, typer.Option("--name", help="who or what uses the token (e.g. grafana, ci-retrain)")]


@tokens_app.callback()
def _group() -> None:
    """API bearer tokens (``HYLO_API_TOKENS_FILE``)."""


def _file(path: Path | None) -> Path:
    found = path or ApiSecuritySettings().api_tokens_file
    if found is None:
        raise fail("no token file: pass --file or set HYLO_API_TOKENS_FILE")
    return found


@tokens_app.command("create")
def create_command(
    name: NameOpt,
    scope: Annotated[
        str, typer.Option("--scope", help="read (GET data routes) or admin (also retrain)")
    ] = "read",
    file: FileOpt = None,
) -> None:
    """Add a token to the file and print it once (only its SHA-256 is stored)."""
    if scope not in SCOPES:
        raise fail(f"--scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
    path = _file(file)
    checked: Scope = "admin" if scope == "admin" else "read"
    try:
        token = add_token(path, name, checked)
    except (TokenFileError, OSError) as err:
        raise fail(str(err)) from None
    print(token)
    print(
        f"token {name!r} (scope {checked}) added to {path}; it is shown only now: give it to the client "
        "as 'Authorization: Bearer <token>' (HYLO_API_TOKEN for hylo retrain)",
        file=sys.stderr,
    )


@tokens_app.command("list")
def list_command(file: FileOpt = None) -> None:
    """The tokens' names, scopes and creation times (never the tokens, which are not stored)."""
    path = _file(file)
    try:
        entries = read_tokens(path)
    except TokenFileError as err:
        raise fail(str(err)) from None
    table = Table("name", "scope", "created")
    for entry in entries:
        table.add_row(escape(entry.name), entry.scope, escape(entry.created or "-"))
    console.print(table)
    console.print(f"{len(entries)} token(s) in {escape(str(path))}", highlight=False)


@tokens_app.command("revoke")
def revoke_command(name: NameOpt, file: FileOpt = None) -> None:
    """Remove the token named by --name; running services refuse it from their next request on."""
    path = _file(file)
    try:
        removed = remove_token(path, name)
    except (TokenFileError, OSError) as err:
        raise fail(str(err)) from None
    if not removed:
        raise fail(f"no token named {name!r} in {path}")
    console.print(f"token {escape(name)!r} revoked from {escape(str(path))}", highlight=False)
