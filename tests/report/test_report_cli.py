"""``hylo report`` (``shared.cli.report.report_command``) on a real SQLite store.

The command is mounted on a Typer app of its own here: registering it on ``hylo`` is ``shared/cli/app.py``'s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shared.cli.report import parse_time, report_command
from tests.report.report_helpers import migrated, read_page, seed

app = typer.Typer()
app.command()(report_command)
runner = CliRunner()


def seeded_store(tmp_path: Path, cluster: str = "demo") -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"

    async def fill() -> None:
        engine = await migrated(url)
        await seed(engine, cluster)
        await engine.dispose()

    asyncio.run(fill())
    return url


def test_writes_the_report_of_the_only_cluster(tmp_path: Path) -> None:
    url = seeded_store(tmp_path)
    out = tmp_path / "out" / "r.html"
    result = runner.invoke(
        app, ["--database", url, "--out", str(out), "--since", "300", "--until", "1970-01-01T00:10:00Z"]
    )
    assert result.exit_code == 0, result.output
    assert "cluster demo" in result.output and "3 snapshots" in result.output
    p = read_page(out.read_text(encoding="utf-8"))
    assert p.number("snapshots") == 3  # 300 <= t < 600
    assert p.number("capacity") == 24


def test_spec_gives_the_capacity(tmp_path: Path) -> None:
    url = seeded_store(tmp_path)
    spec = tmp_path / "five.toml"
    spec.write_text(
        'name = "five"\n[[node_groups]]\nname = "g"\ngpu_type = "A100"\ncount = 5\ngpus = 4\ncpus = 32\nmem_gib = 256\n'
    )
    out = tmp_path / "r.html"
    result = runner.invoke(
        app, ["--database", url, "--out", str(out), "--spec", str(spec), "--cluster", "demo"]
    )
    assert result.exit_code == 0, result.output
    assert read_page(out.read_text()).number("capacity") == 20  # 5 nodes x 4 GPUs


def test_an_empty_database_gives_a_no_data_page(tmp_path: Path) -> None:
    db = tmp_path / "blank.db"
    db.touch()  # exists, never migrated
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["--database", f"sqlite+aiosqlite:///{db}", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "no data" in result.output
    page = out.read_text()
    assert "no-data" in read_page(page).ids and "never migrated" in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "--since 'yesterday': expected seconds on the cluster clock"),
        (["--since", "10", "--until", "5"], "--until '5' must be after --since '10'"),
        (["--cluster", "bad name"], "--cluster 'bad name'"),
        (["--cluster", "other"], "unknown cluster 'other' (known: demo)"),
        (["--spec", "no-such-preset"], "--spec 'no-such-preset'"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    url = seeded_store(tmp_path)
    result = runner.invoke(app, ["--database", url, "--out", str(tmp_path / "r.html"), *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "r.html").exists()


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "nowhere.db"
    result = runner.invoke(
        app, ["--database", f"sqlite+aiosqlite:///{db}", "--out", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 2
    assert "no SQLite file" in result.output and not db.exists()


def test_times_are_seconds_or_iso_8601() -> None:
    assert parse_time("1763800000", "--since") == 1763800000.0
    # 2026-11-22T08:00Z: 20,414 days after 1970-01-01 (56 years, 14 of them leap, + 325 days), + 8 h
    at = (56 * 365 + 14 + 325) * 86400 + 8 * 3600.0
    assert parse_time("2026-11-22T08:00:00Z", "--since") == at
    assert parse_time("2026-11-22T09:00:00+01:00", "--since") == at
    assert parse_time("2026-11-22 08:00", "--since") == at  # no zone: UTC
    assert parse_time(None, "--since") is None
