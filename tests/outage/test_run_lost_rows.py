"""``hylo run`` exits 1 and says how many rows are missing when the store lacks rows it was sent.

The loss is made real, not simulated: the placer runs in its ``decide`` role only (``HYLO_PLACER_ROLE``
reaches the services through the environment), so no recorder stores anything while the pipeline
decides every cycle. The run's check reads the decisions back from the bus, finds none of their rows,
nor the outcomes, nor the jobs, and fails the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shared.cli.run import run_command, up_command

SMALL_CLUSTER = Path(__file__).parents[1] / "adapter_sim" / "small_cluster.toml"

app = typer.Typer(pretty_exceptions_enable=False)
app.command("run")(run_command)
app.command("up")(up_command)

pytestmark = pytest.mark.slow


def test_a_run_that_lost_rows_exits_1_and_says_how_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYLO_PLACER_ROLE", "decide")  # nobody records
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--cluster",
            str(SMALL_CLUSTER),
            "--jobs",
            "30",
            "--load",
            "0",  # the generator's own times
            "--store-wait",
            "2",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    out = " ".join(result.output.split())
    found = re.search(r"lost ([\d,]+) rows: ([\d,]+) of ([\d,]+) decisions", out)
    assert found is not None, out
    [report_path] = tmp_path.rglob("run.json")
    report = json.loads(report_path.read_text())
    check = report["store_check"]
    assert check["outcomes_missing"] == check["outcomes_expected"] == 30
    assert (
        check["decisions_missing"] == check["decisions_expected"] == report["stats"]["decisions_applied"] > 0
    )
    assert check["jobs_missing"] == check["jobs_expected"] == 30
    lost = check["decision_rows_expected"] + 30 + 30
    assert check["lost_rows"] == lost and found.group(1) == f"{lost:,}"
    assert "hylo deadletters replay --cluster" in out
