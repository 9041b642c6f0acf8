"""``hylo train --imitation-epochs N``: the warm start runs before PPO and is recorded on the card;
``--kl-min-epochs`` reaches PPO's configuration."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from shared.cli.app import app

runner = CliRunner()
# --load 3 capped (the workload these tests were tuned on; 1,500 jobs reach 2.36 at most in-span)
SMALL = ["train", "--jobs", "1500", "--load", "3", "--load-definition", "capped"]
SMALL += ["--epochs", "1", "--windows-per-epoch", "2"]
SMALL += ["--window-size", "64", "--warmup", "16", "--validation-windows", "1", "--test-windows", "0"]
SMALL += ["--metric", "wait"]
WARM = ["--imitation-epochs", "2", "--imitation-windows", "3", "--kl-min-epochs", "1"]


def test_imitation_epochs_recorded_on_the_card(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [*SMALL, *WARM, "--out", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    extra = json.loads((tmp_path / "checkpoint" / "card.json").read_text())["training"]["extra"]
    assert extra["imitation_epochs"] == 2
    assert extra["imitation"]["epochs"] == 2 and extra["imitation"]["windows"] == 3
    assert extra["imitation"]["demonstrations"] > 0
    assert extra["ppo"]["kl_min_epochs"] == 1
    log = json.loads((tmp_path / "train_log.json").read_text())
    assert log["setup"]["imitation_epochs"] == 2


def test_imitation_off_by_default_and_negative_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, [*SMALL, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    extra = json.loads((tmp_path / "checkpoint" / "card.json").read_text())["training"]["extra"]
    assert extra["imitation_epochs"] == 0 and extra["imitation"] is None
    bad = runner.invoke(app, [*SMALL, "--imitation-epochs", "-1", "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "--imitation-epochs must be >= 0" in bad.output
    assert extra["ppo"]["kl_min_epochs"] == 0  # the KL stop is checked from the first pass
    bad = runner.invoke(app, [*SMALL, "--kl-min-epochs", "-1", "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "kl_min_epochs" in bad.output
