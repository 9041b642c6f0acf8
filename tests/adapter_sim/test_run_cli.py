"""``hylo run`` / ``hylo up`` refuse bad options with a clear error before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shared.cli.run import DEFAULT_JOBS, DEMO_LOAD, ReplayOptions, _load, run_command, up_command
from shared.domain.load import offered_load

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


def test_a_load_out_of_reach_names_the_option(tmp_path: Path) -> None:
    """50 generated jobs cannot keep the 320-GPU cluster 90% busy over their arrivals: the error
    says how far they reach and which option to change, before anything starts."""
    code, out = _invoke("run", "--jobs", "50", "--load", "0.9", "--out", str(tmp_path))
    assert code == 2
    assert "offered load 0.9 is out of reach" in out and "reachable loads are up to" in out
    assert "pass --load" in out
    assert "Traceback" not in out
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_load_definition(tmp_path: Path) -> None:
    code, out = _invoke("run", "--load-definition", "uncapped", "--out", str(tmp_path))
    assert code == 2
    assert "--load-definition" in out and "choose from in-span, capped" in out
    assert list(tmp_path.iterdir()) == []


def _options(jobs: int, load: float | None, demo_load: bool) -> ReplayOptions:
    return ReplayOptions(
        trace=None,
        cluster=None,
        cluster_name="embedded",
        jobs=jobs,
        seed=0,
        load=load,
        base_policy="fcfs",
        decision_timeout=10.0,
        max_pending=1024,
        job_id_prefix="",
        demo_load=demo_load,
    )


def test_the_demo_load_out_of_reach_replays_the_own_times(capsys: pytest.CaptureFixture[str]) -> None:
    """``hylo run --jobs 50`` (no --load): the demo's 0.9 is out of reach for so few jobs; the run
    goes on at the generator's own times and says how to ask for a load."""
    options, work = _load(_options(50, DEMO_LOAD, demo_load=True))
    assert options.load is None and len(work.bound.jobs) == 50
    assert "rescaled" not in work.name
    out = capsys.readouterr().out
    assert "out of reach for 50 jobs" in out and "pass --load" in out


def test_the_default_demo_reaches_its_load() -> None:
    options, work = _load(_options(DEFAULT_JOBS, DEMO_LOAD, demo_load=True))
    assert options.load == DEMO_LOAD
    assert offered_load(work.bound.jobs, work.spec.total_gpus) == pytest.approx(DEMO_LOAD)
