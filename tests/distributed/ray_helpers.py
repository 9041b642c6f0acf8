"""What the Ray test modules share: running ``hylo`` in-process, and a history row without its timings."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from shared.cli.app import app

runner = CliRunner()


def hylo(*args: str) -> str:
    """``hylo ARGS`` in this process; its output, after checking it exited 0."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def without_timings(row: dict[str, Any]) -> dict[str, Any]:
    """A history row less its timing columns (wall-clock by nature: ``*_s``, ``decisions_per_s``)."""
    return {k: v for k, v in row.items() if not k.endswith("_s")}
