"""Error text for ``hylo``: every user error is one line; a traceback only under ``--debug``.

Why a module of its own: the messages commands fail with often come from elsewhere (pydantic's
multi-line validation reports, a checkpoint's card error with the report appended), and a user
reading a terminal wants the one line that names the option or file and what was expected.
``one_line`` folds those reports into a line; ``debug_enabled`` reads the root ``--debug`` flag
(or ``HYLO_DEBUG``) from click's context, so no global state is kept between invocations.
"""

from __future__ import annotations

import re

try:  # a recent Typer vendors click: its contexts and exceptions are typer._click's, not click's
    from typer._click import ClickException, Command, Context
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - an older Typer, on click itself
    from click import (  # type: ignore[assignment,no-redef]
        ClickException,
        Command,
        Context,
        get_current_context,
    )

__all__ = ["ClickException", "Command", "Context", "debug_enabled", "one_line"]

#: pydantic's lines that say nothing about the input: the count header and the documentation link
_NOISE = re.compile(r"^(\d+ validation errors? for \S+|For further information visit \S+)$")
#: pydantic's ``[type=..., input_value=..., input_type=...]`` tail, SQLAlchemy's link to its error page
_TYPE_TAG = re.compile(r"\s*(\[type=[^\]]*\]|\(Background on this error at: \S+\))\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def one_line(message: str) -> str:
    """``message`` on one line: pydantic noise dropped, a field joined to its indented reason with
    ``: ``, other lines with ``; ``."""
    out = ""
    previous = -1
    for raw in message.splitlines():
        line = _TYPE_TAG.sub("", raw).strip()
        if not line or _NOISE.match(line):
            continue
        indent = _indent(raw)
        if not out:
            out = line
        elif out.endswith(":"):
            out += " " + line
        elif indent > previous >= 0:
            out += ": " + line
        else:
            out += "; " + line
        previous = indent
    return out


def debug_enabled(ctx: Context | None = None) -> bool:
    """Whether ``hylo --debug`` (or ``HYLO_DEBUG``) asked for tracebacks, read from the root context."""
    ctx = ctx or get_current_context(silent=True)
    if ctx is None:
        return False
    return bool(ctx.find_root().params.get("debug"))
