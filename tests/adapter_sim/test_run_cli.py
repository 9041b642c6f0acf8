"""``hylo run`` / ``hylo up`` refuse bad options with a clear error before starting anything."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from shared.cli.run import run_command, up_command

app = typer.Typer(pretty_exceptions_enable=False)
app.command("run")(run_command)
app.command("up")(up_command)


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_unknown_base_policy(tmp_path: Path) -> None:
    code, out = _invoke("run", "--base-policy", "lifo", "--out", str(tmp_path))
    assert code == 2
    assert "unknown base policy 'lifo'" in out
    assert "Traceback" not in out
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_missing_spec_file(tmp_path: Path) -> None:
    code, out = _invoke("run", "--cluster", str(tmp_path / "nope.toml"), "--out", str(tmp_path))
    assert code == 2
    assert "nope.toml" in out and "no such file" in out
    assert "Traceback" not in out


def test_trace_without_a_default_cluster(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.swf"
    trace.write_text("", encoding="utf-8")
    code, out = _invoke("run", "--trace", str(trace), "--out", str(tmp_path))
    assert code == 2
    assert "pass --cluster" in out


def test_up_with_an_unusable_database(tmp_path: Path) -> None:
    code, out = _invoke(
        "up",
        "--nats-url",
        "nats://127.0.0.1:4222",
        "--database-url",
        "nosuchdriver://x/y",
        "--out",
        str(tmp_path),
    )
    assert code == 2
    assert "cannot migrate the database at nosuchdriver://x/y" in out
    assert "Traceback" not in out


def test_up_with_a_bad_cluster_name(tmp_path: Path) -> None:
    code, out = _invoke(
        "up",
        "--nats-url",
        "nats://127.0.0.1:4222",
        "--database-url",
        "sqlite+aiosqlite:///x.db",
        "--cluster-name",
        "a.b",
        "--out",
        str(tmp_path),
    )
    assert code == 2
    assert "cluster name 'a.b'" in out


def test_model_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    code, out = _invoke("run", "--model", str(tmp_path), "--out", str(tmp_path))
    assert code == 2
    assert "no checkpoint there" in out
