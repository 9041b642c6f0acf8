"""``hylo run`` and ``hylo up`` with their inputs checked the way every other command checks them.

Why wrappers: ``shared/cli/run.py`` drives the pipeline and is kept as it is; these checks run
before it, with the same signature (so Typer builds the same options from it):

- ``--model``: the checkpoint is verified as the prioritizer will load it (card, sha256, then the
  weights themselves), so a damaged checkpoint is one line before NATS and three services start,
  not a prioritizer that falls back to the base policy for the whole replay;
- ``hylo up --database-url``: read as every ``--database`` is (``database_option``): a plain file
  path is a SQLite file, a sync driver's URL is mapped to its async driver, other backends refused.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.cli.checks import load_model
from shared.cli.common import database_option
from shared.cli.run import run_command, up_command


def _check_model(model: Path | None) -> None:
    """``--model`` (a checkpoint folder, or its card.json) loads, weights included."""
    if model is None:
        return
    folder = model.parent if model.name == "card.json" and model.is_file() else model
    load_model(folder, "--model")


def _checked(command: Callable[..., None], *, database: bool) -> Callable[..., None]:
    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> None:
        if database:
            kwargs["database_url"] = database_option(kwargs["database_url"], "--database-url")
        _check_model(kwargs.get("model"))
        command(*args, **kwargs)

    return checked


checked_run = _checked(run_command, database=False)
checked_up = _checked(up_command, database=True)
