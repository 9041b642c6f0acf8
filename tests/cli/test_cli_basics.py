"""What every ``hylo`` command shares (issue 21, item 7): ``--version``, ``--debug``, help that shows
defaults in full, tables not cut when piped, and ``python -m shared.query --help`` that only helps."""

from __future__ import annotations

import io
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

import shared.cli.simulate
from shared.cli import common
from shared.cli.app import app
from shared.cli.errors import one_line
from shared.cli.simulate import DEFAULT_POLICIES

runner = CliRunner()


def test_version_is_the_installed_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"hylo {version('hylo')}"


def _boom(**_: object) -> None:
    raise RuntimeError("boom")


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HYLO_DEBUG", raising=False)
    monkeypatch.setattr(shared.cli.simulate, "_plan", _boom)
    quiet = runner.invoke(app, ["simulate"])
    assert quiet.exit_code == 1
    assert isinstance(quiet.exception, SystemExit)
    lines = quiet.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: RuntimeError: boom")
    assert "hylo --debug" in lines[0]

    loud = runner.invoke(app, ["--debug", "simulate"])
    assert isinstance(loud.exception, RuntimeError)  # re-raised: Python prints its traceback
    monkeypatch.setenv("HYLO_DEBUG", "1")
    assert isinstance(runner.invoke(app, ["simulate"]).exception, RuntimeError)


def test_debug_prints_the_traceback_behind_a_user_error(tmp_path: Path) -> None:
    missing = tmp_path / "nothing"
    result = runner.invoke(app, ["--debug", "simulate", "--model", str(missing)])
    assert result.exit_code == 2
    assert f"--model: cannot use checkpoint {missing}" in result.output
    assert "Traceback" in result.output and "CheckpointMissingError" in result.output
    quiet = runner.invoke(app, ["simulate", "--model", str(missing)])
    assert quiet.output.count("\n") == 1  # the one line, and no traceback


def test_help_shows_every_default_in_full() -> None:
    """At Typer's 80 columns the long default of --policies used to end in an ellipsis (and
    ``--database,--database-url`` in ``--database,--database-u…``)."""
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    assert "…" not in result.output
    flat = "".join(result.output.replace("│", "").split())
    assert f"[default:{DEFAULT_POLICIES}]" in flat
    status = runner.invoke(app, ["status", "--help"])  # option names too, beside a wide range type
    assert "…" not in status.output
    names = [line[2:30].strip() for line in status.output.splitlines() if line.startswith("│")]
    assert "--database,--database-url" in "".join(names)  # folded over two lines of its cell
    top = runner.invoke(app, ["--help"])
    assert "--version" in top.output and "--debug" in top.output


def test_piped_output_is_not_cut_to_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    piped = common._make_console()
    assert piped.width == common.PIPED_WIDTH
    table = Table(title="wide")
    for i in range(12):
        table.add_column(f"metric number {i}")
    table.add_row(*[f"{i * 1234.5678:,.3f} [{i:.1f}, {i + 1:.1f}]" for i in range(12)])
    sink = io.StringIO()
    Console(file=sink, width=piped.width).print(table)
    assert "…" not in sink.getvalue()
    assert all(f"metric number {i}" in sink.getvalue() for i in range(12))
    monkeypatch.setenv("COLUMNS", "100")
    assert common._make_console().width == 100


def test_one_line_folds_validation_reports() -> None:
    report = (
        "invalid cluster spec c.toml:\n1 validation error for ClusterSpec\nnode_groups.0.count\n"
        "  Input should be greater than 0 [type=greater_than, input_value=0, input_type=int]\n"
        "    For further information visit https://errors.pydantic.dev/2/v/greater_than"
    )
    assert (
        one_line(report) == "invalid cluster spec c.toml: node_groups.0.count: Input should be greater than 0"
    )


def test_query_module_help_does_not_start_the_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    from shared.query.__main__ import main

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("--help must not serve")

    monkeypatch.setattr(uvicorn, "run", never)
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    assert "usage: python -m shared.query" in capsys.readouterr().out
    assert main(["--database", "mysql://u@h/db"]) == 2
    assert "--database: unsupported database 'mysql'" in capsys.readouterr().err


def test_serve_query_has_help() -> None:
    result = runner.invoke(app, ["serve", "--help"])
    assert result.exit_code == 0
    assert "query" in result.output and "--database" in result.output
