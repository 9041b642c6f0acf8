"""The loop closes out of the box (issue 21): ``hylo run`` (the shipped model deciding, a few hundred
jobs) -> ``hylo retrain --local`` on the SQLite file it printed, with no NATS server to announce a
promotion on (``hylo run`` stopped its own) -> ``hylo models list`` shows the candidate, the gate's
verdict on it and the reason, whose windows were sized to the data the run left.

Tiny training settings (one PPO epoch, windows of 32 jobs); the warm-up and the gate's settings are
the defaults a user gets.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.adapter_sim.stack import free_port
from shared.cli.app import app

pytestmark = pytest.mark.slow

TINY = {
    "HYLO_TRAINER_EPOCHS": "1",
    "HYLO_TRAINER_WINDOWS_PER_EPOCH": "2",
    "HYLO_TRAINER_WINDOW_SIZE": "32",
    "HYLO_TRAINER_IMITATION_EPOCHS": "1",
    "HYLO_TRAINER_IMITATION_WINDOWS": "2",
}


def test_run_then_retrain_then_models_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    # 300 jobs at offered load 0.4: nearly one burst, so jobs queue and the order matters
    ran = runner.invoke(app, ["run", "--jobs", "300", "--load", "0.4", "--out", str(tmp_path / "run")])
    assert ran.exit_code == 0, ran.output
    assert "model: the shipped embedded model" in ran.output
    report = json.loads(next((tmp_path / "run").rglob("run.json")).read_text(encoding="utf-8"))
    assert report["stats"]["policies"].get("model", 0) > 0  # the shipped model decided
    database = str(report["database"])

    for key, value in TINY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HYLO_TRAINER_OUT_DIR", str(tmp_path / "trainer"))
    monkeypatch.setenv("HYLO_NATS_URL", f"nats://127.0.0.1:{free_port()}")  # nothing listens there
    retrained = runner.invoke(app, ["retrain", "--local", "--database-url", database])
    assert retrained.exit_code == 1, retrained.output  # gated, not promoted: no NATS to announce on
    out = " ".join(retrained.output.split())
    assert "cannot reach NATS" in out and "the candidate will be gated" in out
    status = re.search(r"on embedded: (passed|refused)", out)
    assert status is not None, out
    assert "recorded_jobs: 300" in out
    assert "held-out windows" in out
    assert "windows sized to the data: the held-out part holds 60 jobs" in out
    workload = next((tmp_path / "trainer").rglob("workload.npz"))  # lossless, not the RLTune CSV
    assert workload.is_file()

    listed = runner.invoke(app, ["models", "list", "--database", database])
    assert listed.exit_code == 0, listed.output
    table = " ".join(listed.output.replace("│", " ").split())
    assert re.search(rf"rt-\S+ embedded candidate \({status.group(1)}\)", table), table
    assert f"{status.group(1)}: wait (lower is better) on" in table
    assert "windows sized to the data" in table
    assert re.search(r"file-\S+ embedded external", table), table  # the shipped model of the run
