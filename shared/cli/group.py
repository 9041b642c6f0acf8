"""The ``hylo`` command group: click's usage errors and unexpected exceptions as one line each.

Why a group class: Typer prints a usage error as a boxed panel under the usage text, and an
exception no command anticipated as a traceback (dozens of lines for a mistyped value). Both pass
through the root group's ``make_context`` (parsing the root options and the subcommand's name) and
``invoke`` (parsing and running the subcommand), so catching them there covers every command,
including the groups (``hylo models ...``). ``hylo --debug`` (or ``HYLO_DEBUG=1``) lets an unexpected
exception through with its traceback. ``--help``, ``--version`` and a group called without a
subcommand (which prints its help) are click's own exits and pass untouched.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import typer
from rich.markup import escape
from typer.core import TyperGroup

from shared.cli.common import console
from shared.cli.errors import ClickException, Command, Context, debug_enabled, one_line

#: exit code of an exception no command anticipated (a usage error is click's 2, ``fail`` is 2)
INTERNAL_ERROR = 1


def _say(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)


@contextmanager
def one_line_errors(ctx: Context | None) -> Iterator[None]:
    """Turn a click usage error or an unexpected exception inside the block into one line and an
    exit (the traceback stays with ``--debug``)."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except ClickException as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # a group without its subcommand: its help
            raise
        where = getattr(err, "ctx", None) or ctx
        hint = f" (see '{where.command_path} --help')" if where is not None else ""
        _say(one_line(err.format_message()) + hint)
        raise typer.Exit(err.exit_code) from None
    except Exception as err:
        if debug_enabled(ctx):
            raise
        _say(
            f"{one_line(f'{type(err).__name__}: {err}')} (unexpected: run again with `hylo --debug ...` "
            "for the traceback, and report it)"
        )
        raise typer.Exit(INTERNAL_ERROR) from None


class HyloGroup(TyperGroup):
    """The root group: parsing and running a command under ``one_line_errors``.

    ``lazy`` names commands by ``(module, attribute)``, a command function or a ``typer.Typer``
    group: the module is imported only when the command is looked up, so a command pays for its
    own imports and not for every other command's.
    """

    lazy: ClassVar[dict[str, tuple[str, str]]] = {}

    def list_commands(self, ctx: Context) -> list[str]:
        return list(dict.fromkeys([*self.lazy, *self.commands]))

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(load_command(cmd_name, *self.lazy[cmd_name]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        with one_line_errors(parent):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Context) -> Any:
        with one_line_errors(ctx):
            return super().invoke(ctx)


def load_command(name: str, module: str, attribute: str) -> Command:
    """The click command Typer makes of ``module.attribute`` (a function or a ``typer.Typer``)."""
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command
