"""One ``--database`` option (issue 21, item 3): a plain file path or any SQLAlchemy URL, everywhere.

``shared.store.urls.database_url`` reads the value; these tests hold it to its rules and check that
the commands use it: the reading commands on a plain path and on a sync driver's URL, nothing created
for a file that does not exist, ``hylo up`` handed the async URL, and the commands ``hylo run``
prints to read its store afterwards.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

import shared.cli.pipeline_checks
from shared.cli.app import app
from shared.cli.common import follow_up_commands
from shared.store import upgrade_url
from shared.store.urls import DatabaseUrlError, database_url, sqlite_file

runner = CliRunner()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hylo.db", "sqlite+aiosqlite:///{cwd}/hylo.db"),
        ("runs/x.db", "sqlite+aiosqlite:///{cwd}/runs/x.db"),
        ("/data/hylo.db", "sqlite+aiosqlite:////data/hylo.db"),
        ("sqlite:///x.db", "sqlite+aiosqlite:///{cwd}/x.db"),
        ("sqlite:////data/x.db", "sqlite+aiosqlite:////data/x.db"),
        ("sqlite+pysqlite:////data/x.db", "sqlite+aiosqlite:////data/x.db"),
        ("sqlite+aiosqlite:////data/x.db", "sqlite+aiosqlite:////data/x.db"),
        ("sqlite://", "sqlite+aiosqlite:///:memory:"),
        ("sqlite:///:memory:", "sqlite+aiosqlite:///:memory:"),
        ("postgresql://hylo:s%40cret@db:5432/hylo", "postgresql+asyncpg://hylo:s%40cret@db:5432/hylo"),
        ("postgres://hylo@db/hylo", "postgresql+asyncpg://hylo@db/hylo"),
        ("postgresql+psycopg2://hylo@db/hylo?ssl=require", "postgresql+asyncpg://hylo@db/hylo?ssl=require"),
        ("postgresql+asyncpg://hylo@db/hylo", "postgresql+asyncpg://hylo@db/hylo"),
    ],
)
def test_database_url_reads_paths_and_urls(
    value: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert database_url(value) == expected.replace("{cwd}", str(tmp_path))


@pytest.mark.parametrize("value", ["mysql://u@h/db", "oracle+cx_oracle://u@h/db", "", "  "])
def test_unsupported_databases_name_the_supported_ones(value: str) -> None:
    with pytest.raises(DatabaseUrlError, match=r"expected a SQLite file path.*postgresql://"):
        database_url(value)


def test_sqlite_file_of_a_url() -> None:
    assert sqlite_file("sqlite+aiosqlite:////data/x.db") == Path("/data/x.db")
    assert sqlite_file("sqlite+aiosqlite:///:memory:") is None
    assert sqlite_file("postgresql+asyncpg://u@h/db") is None
    assert sqlite_file("not a url") is None


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A migrated, empty SQLite store."""
    path = tmp_path / "run" / "hylo.db"
    path.parent.mkdir()
    upgrade_url(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.mark.parametrize("form", ["path", "relative", "sync-url", "async-url"])
def test_reading_commands_take_every_form(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.chdir(tmp_path)
    value = {
        "path": str(store),
        "relative": "run/hylo.db",
        "sync-url": f"sqlite:///{store}",
        "async-url": f"sqlite+aiosqlite:///{store}",
    }[form]
    listed = runner.invoke(app, ["models", "list", "--database", value])
    assert listed.exit_code == 0, listed.output
    assert "no model versions" in listed.output
    report = runner.invoke(app, ["report", "--database", value, "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "r.html").is_file()


def test_reading_commands_create_no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hylo models list`` used to create and migrate ./hylo.db and answer "no model versions"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYLO_DATABASE_URL", raising=False)
    for args in (["models", "list"], ["models", "history"], ["report"], ["retrain", "--local"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"no SQLite file at {tmp_path / 'hylo.db'}" in result.output
    assert list(tmp_path.iterdir()) == []


def test_up_is_handed_the_async_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_up(**kwargs: object) -> None:
        seen.update(kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shared.cli.pipeline_checks, "up_command", fake_up)
    checked = shared.cli.pipeline_checks._checked(fake_up, database=True)
    checked(database_url="state/hylo.db", model=None)
    assert seen["database_url"] == f"sqlite+aiosqlite:///{tmp_path}/state/hylo.db"
    checked(database_url="postgresql://hylo@db/hylo", model=None)
    assert seen["database_url"] == "postgresql+asyncpg://hylo@db/hylo"


def test_run_prints_commands_that_read_its_store() -> None:
    line = follow_up_commands("hylo-out/run/run-ab12/hylo.db")
    assert "hylo report --database hylo-out/run/run-ab12/hylo.db" in line
    assert "hylo models list --database hylo-out/run/run-ab12/hylo.db" in line
    spaced = follow_up_commands("/tmp/my runs/hylo.db")
    assert f"hylo report --database {shlex.quote('/tmp/my runs/hylo.db')}" in spaced
