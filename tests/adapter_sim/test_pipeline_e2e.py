"""End to end: ``hylo run`` / ``hylo up`` start the real services as processes and replay through them.

No model is loaded, so the prioritizer falls back to the base policy, and the pipeline's schedule
must be the plain simulator's under that policy: the simulated cluster starts what the placer
decided, where it decided, and ``differing_starts == differing_nodes == 0`` in the report, with no
cycle timed out (a timeout would be the adapter's own scheduling, which proves nothing).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from shared.cli.run import run_command, up_command
from tests.conftest_services import drop_streams

SMALL_CLUSTER = Path(__file__).with_name("small_cluster.toml")

app = typer.Typer(pretty_exceptions_enable=False)
app.command("run")(run_command)
app.command("up")(up_command)

pytestmark = pytest.mark.slow


def _report(folder: Path) -> dict[str, object]:
    reports = list(folder.rglob("run.json"))
    assert len(reports) == 1, f"expected one run.json under {folder}, found {reports}"
    loaded: dict[str, object] = json.loads(reports[0].read_text(encoding="utf-8"))
    return loaded


def _check(report: dict[str, object], policy: str, jobs: int) -> None:
    stats = report["stats"]
    assert isinstance(stats, dict)
    assert report["differing_starts"] == report["differing_nodes"] == 0
    assert stats["timeouts"] == stats["rejected"] == 0
    assert stats["snapshots"] == stats["decisions_applied"] > 0
    assert stats["policies"] == {policy: stats["snapshots"]}  # the prioritizer's fallback decided
    assert stats["outcomes"] == jobs
    assert (
        report["store"]
        == f"{stats['decisions_applied']:,} decisions and {jobs:,} of {jobs:,} outcomes recorded"
    )


def test_hylo_run_matches_the_base_policy(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "150",
            "--load",
            "1.2",
            "--load-definition",
            "capped",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "identical schedules" in result.output
    report = _report(tmp_path)
    _check(report, "fcfs", 150)
    assert Path(str(report["database"])).is_file()


def test_a_trace_replayed_through_the_services_gets_the_simulators_schedule(tmp_path: Path) -> None:
    """One scheduling cycle for both: the first 300 Philly jobs (a trace: gangs over several nodes)
    on the small two-type cluster, through the real featurizer, prioritizer and placer processes,
    against ``Simulator.run`` under SJF: the same start, end and nodes for every job (ends follow
    from starts)."""
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--trace",
            "philly",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "300",
            "--load",
            "1.5",
            "--base-policy",
            "sjf",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    report = _report(tmp_path)
    _check(report, "sjf", 300)
    base = report["base"]
    assert isinstance(base, dict) and base["queue_mean"] > 1.0  # a queue formed: EASY had work


def test_hylo_up_against_running_servers(tmp_path: Path, nats_url: str, postgres_url: str) -> None:
    root = f"t{uuid.uuid4().hex[:10]}"
    try:
        result = _up(tmp_path, nats_url, postgres_url, root)
    finally:
        drop_streams(nats_url, root)
    assert result.exit_code == 0, result.output
    _check(_report(tmp_path), "sjf", 150)


def _up(tmp_path: Path, nats_url: str, postgres_url: str, root: str) -> Result:
    return CliRunner().invoke(
        app,
        [
            "up",
            "--nats-url",
            nats_url,
            "--database-url",
            postgres_url,
            "--subject-root",
            root,
            "--cluster-name",
            f"e2e-{uuid.uuid4().hex[:6]}",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "150",
            "--load",
            "1.2",
            "--load-definition",
            "capped",
            "--base-policy",
            "sjf",
            "--out",
            str(tmp_path),
        ],
    )


def test_hylo_run_with_a_model_is_scheduled_by_it(tmp_path: Path) -> None:
    """A checkpoint from docs/results: the prioritizer's model orders the queue, not the base policy."""
    checkpoint = Path(__file__).parents[2] / "docs/results/runs/philly-easy-fcfs-wait/checkpoint"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "150",
            "--load",
            "1.2",
            "--load-definition",
            "capped",
            "--model",
            str(checkpoint),
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    report = _report(tmp_path)
    stats = report["stats"]
    assert isinstance(stats, dict)
    assert stats["timeouts"] == 0
    policies = stats["policies"]
    # on a loaded machine a decision may miss the prioritizer's deadline and fall back to FCFS
    assert set(policies) <= {"model", "fcfs"}
    assert policies.get("model", 0) > policies.get("fcfs", 0)
    assert isinstance(report["differing_starts"], int)
    assert report["differing_starts"] > 0  # the model's order is not FCFS's


def test_hylo_run_in_accelerated_time(tmp_path: Path) -> None:
    """No waiting for decisions: the newest decision in is applied where it still fits, the
    simulator's own FCFS cycle where none is in yet; every job runs (not the same schedule)."""
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "150",
            "--load",
            "1.2",
            "--load-definition",
            "capped",
            "--speedup",
            "1e9",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    report = _report(tmp_path)
    stats = report["stats"]
    assert isinstance(stats, dict)
    assert isinstance(report["differing_starts"], int)
    assert stats["outcomes"] == 150
    assert stats["snapshots"] == stats["decisions_applied"] + stats["timeouts"]
    assert "accelerated time (x1e+09)" in result.output
