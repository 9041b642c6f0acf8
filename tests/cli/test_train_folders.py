"""``hylo train``'s run folders (issue 21, item 6): a folder that holds files is refused unless
``--force``; without ``--out`` each run gets a new folder; a checkpoint and the training state are
saved every N epochs and on Ctrl-C (exit 130, one line saying how to continue); ``--resume``
finishes the run from its folder, the same run an uninterrupted one would have been."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer.main
from typer.testing import CliRunner

import shared.cli.train as train_cli
import shared.rl.trainer as trainer_module
from shared.cli.app import app
from shared.cli.train_options import CONTROL_OPTIONS, TrainOptions
from shared.rl.ppo import PPOConfig
from shared.rl.train_state import STATE_FILE, load_state

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
#: a tiny run on the embedded workload: a few seconds
TINY = ["train", "--jobs", "1500", "--windows-per-epoch", "2", "--window-size", "48", "--warmup", "16"]
TINY += ["--validation-windows", "1", "--test-windows", "1", "--metric", "wait", "--load", "0.9"]


def train(*args: str) -> Any:
    return runner.invoke(app, [*TINY, *args])


def card(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "checkpoint" / "card.json").read_text())
    return data


def error_line(output: str) -> str:
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of one epoch that finished."""
    out = tmp_path_factory.mktemp("runs") / "finished"
    result = train("--epochs", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_the_options_record_is_the_commands_options() -> None:
    """``run.json`` records every training option: a new option of ``hylo train`` must be added to
    ``TrainOptions`` (or to the command's own, ``CONTROL_OPTIONS``)."""
    group = typer.main.get_command(app)
    command = group.get_command(typer.Context(group), "train")  # type: ignore[attr-defined]
    params = {p.name for p in command.params}
    assert params == set(TrainOptions.names()) | CONTROL_OPTIONS


def test_a_folder_that_holds_files_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "weights.pt").write_text("a registered model")
    result = train("--epochs", "1", "--out", str(out))
    assert result.exit_code == 2
    line = error_line(result.output)
    assert f"--out {out}" in line and "--force" in line and "not empty" in line
    assert "--resume" not in line  # not a run folder: nothing to resume
    assert (out / "weights.pt").read_text() == "a registered model"
    assert sorted(p.name for p in out.iterdir()) == ["weights.pt"]


def test_a_run_folder_is_refused_naming_resume(finished: Path) -> None:
    before = (finished / "checkpoint" / "weights.pt").read_bytes()
    result = train("--epochs", "1", "--out", str(finished))
    assert result.exit_code == 2
    assert f"--resume {finished}" in error_line(result.output)
    assert (finished / "checkpoint" / "weights.pt").read_bytes() == before


def test_an_empty_folder_is_used(tmp_path: Path) -> None:
    result = train("--epochs", "0", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "checkpoint" / "card.json").is_file()


def test_force_replaces_the_run_files_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert train("--epochs", "0", "--out", str(out)).exit_code == 0
    (out / "notes.txt").write_text("mine")
    (out / "tensorboard").mkdir()  # a previous run's event files would mix with the new ones
    (out / "tensorboard" / "events.out.tfevents.old").write_text("old")
    result = train("--epochs", "1", "--out", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert card(out)["training"]["epochs"] == 1
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "tensorboard" / "events.out.tfevents.old").exists()
    assert json.loads((out / "run.json").read_text())["options"]["epochs"] == 1


def test_without_out_each_run_gets_a_new_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert train("--epochs", "0").exit_code == 0
    runs = sorted((tmp_path / "hylo-out" / "train").iterdir())
    assert len(runs) == 2
    assert all(
        r.name.startswith("embedded-wait-") and (r / "checkpoint" / "card.json").is_file() for r in runs
    )


def interrupt_at(monkeypatch: pytest.MonkeyPatch, epoch: int, seen: dict[str, Any], out: Path) -> None:
    """Ctrl-C inside epoch ``epoch``'s PPO update; what the folder held at that moment goes to
    ``seen`` (the periodic checkpoint, written before any interrupt)."""
    real = trainer_module.ppo_update
    calls = {"n": 0}

    def update(model: Any, optimizer: Any, batch: Any, cfg: PPOConfig, rng: np.random.Generator) -> Any:
        calls["n"] += 1
        if calls["n"] == epoch:
            seen["state_epoch"] = load_state(out / STATE_FILE).epoch
            seen["card"] = card(out)["training"]
            raise KeyboardInterrupt
        return real(model, optimizer, batch, cfg, rng)

    monkeypatch.setattr(trainer_module, "ppo_update", update)


def test_ctrl_c_saves_a_checkpoint_that_evaluates_and_resume_finishes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, seen = tmp_path / "run", {}
    with monkeypatch.context() as patch:
        interrupt_at(patch, 4, seen, out)
        stopped = train("--epochs", "5", "--checkpoint-every", "2", "--out", str(out))
    assert stopped.exit_code == 130, stopped.output
    assert seen["state_epoch"] == 2 and seen["card"]["extra"]["checkpoint"]["kind"] == "periodic"
    assert seen["card"]["epochs"] == 2
    assert (
        f"interrupted after epoch 3 of 5: checkpoint in {out / 'checkpoint'}" in stopped.output
        and f"continue with: hylo train --resume {out}" in stopped.output
    )
    assert "Traceback" not in stopped.output and not (out / "train_log.json").exists()
    assert load_state(out / STATE_FILE).epoch == 3
    assert card(out)["training"]["extra"]["checkpoint"] == {"kind": "interrupted", "epoch": 3, "epochs": 5}

    args = ["evaluate", "--checkpoint", str(out / "checkpoint"), "--windows", "1", "--policies", "fcfs"]
    evaluated = runner.invoke(app, [*args, "--no-sampled", "--no-plots", "--out", str(tmp_path / "eval")])
    assert evaluated.exit_code == 0, evaluated.output

    resumed = runner.invoke(app, ["train", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming at epoch 3 of 5" in resumed.output
    if importlib.util.find_spec("tensorboard") is None:  # the hint names the extra in full
        assert "pip install -e '.[tensorboard]'" in resumed.output
    log = json.loads((out / "train_log.json").read_text())
    assert [row["epoch"] for row in log["history"]] == [0, 1, 2, 3, 4, 5]
    assert log["resumed_at_epochs"] == [3]
    assert card(out)["training"]["extra"]["checkpoint"] == {"kind": "final", "epoch": 5, "epochs": 5}
    assert len((out / "scalars.jsonl").read_text().splitlines()) == 6
    assert load_state(out / STATE_FILE).finished

    whole = tmp_path / "whole"
    assert train("--epochs", "5", "--out", str(whole)).exit_code == 0
    assert card(whole)["weights_sha256"] == card(out)["weights_sha256"]  # the same run


def test_resume_refuses_conflicting_settings(finished: Path) -> None:
    result = runner.invoke(app, ["train", "--resume", str(finished), "--seed", "5", "--metric", "bsld"])
    assert result.exit_code == 2
    line = error_line(result.output)
    assert "--metric 'bsld' (the run's: 'wait')" in line and "--seed 5 (the run's: 0)" in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--out", "{tmp}/x"], ["continues in that folder; drop --out"]),
        (["--force"], ["drop --force"]),
        ([], ["the run finished after epoch 1 of 1", "--epochs above 1"]),
        (["--epochs", "0"], ["--epochs 0", "trained 1 epochs"]),
    ],
)
def test_resume_refuses_in_one_line(
    finished: Path, tmp_path: Path, extra: list[str], expected: list[str]
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    result = runner.invoke(app, ["train", "--resume", str(finished), *args])
    assert result.exit_code == 2
    line = error_line(result.output)
    assert all(part in line for part in expected), line


def test_resume_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["train", "--resume", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no such folder" in error_line(missing.output)
    empty = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    assert empty.exit_code == 2 and "no run.json" in error_line(empty.output)


def test_resume_may_train_a_finished_run_further(finished: Path, tmp_path: Path) -> None:
    longer = tmp_path / "longer"
    shutil.copytree(finished, longer)
    result = runner.invoke(app, ["train", "--resume", str(longer), "--epochs", "2"])
    assert result.exit_code == 0, result.output
    assert card(longer)["training"]["epochs"] == 2
    assert json.loads((longer / "run.json").read_text())["options"]["epochs"] == 2


@pytest.mark.slow
def test_sigint_to_a_running_hylo_train(tmp_path: Path) -> None:
    """The real thing: SIGINT to a ``hylo train`` process (as Ctrl-C sends it) mid-run."""
    out = tmp_path / "run"
    args = [*TINY, "--epochs", "100000", "--checkpoint-every", "0", "--out", str(out)]
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "hylo"), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        scalars = out / "scalars.jsonl"
        while not (scalars.exists() and len(scalars.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "no epoch finished"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    epoch = load_state(out / STATE_FILE).epoch
    assert epoch >= 2
    assert f"interrupted after epoch {epoch} of 100000" in output
    assert f"hylo train --resume {out}" in output
    assert card(out)["training"]["extra"]["checkpoint"]["kind"] == "interrupted"


def test_ctrl_c_before_the_first_epoch_keeps_the_settings_and_resume_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module._Loop, "validate", stop)
        stopped = train("--epochs", "1", "--out", str(out))
    assert stopped.exit_code == 130, stopped.output
    assert "interrupted before the first epoch ended" in stopped.output
    assert f"hylo train --resume {out}" in stopped.output
    assert not (out / STATE_FILE).exists() and (out / "run.json").is_file()
    resumed = runner.invoke(app, ["train", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert card(out)["training"]["epochs"] == 1


def test_ctrl_c_while_writing_the_outputs_and_resume_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(train_cli, "_score_held_out", stop)
        stopped = train("--epochs", "2", "--out", str(out))
    assert stopped.exit_code == 130, stopped.output
    assert "interrupted after epoch 2 of 2" in stopped.output
    assert not (out / "train_log.json").exists()
    with monkeypatch.context() as patch:  # again, in a resumed run with no epoch left to train
        patch.setattr(train_cli, "_score_held_out", stop)
        again = runner.invoke(app, ["train", "--resume", str(out)])
    assert again.exit_code == 130 and "interrupted after epoch 2 of 2" in again.output, again.output
    resumed = runner.invoke(app, ["train", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    log = json.loads((out / "train_log.json").read_text())
    assert [row["epoch"] for row in log["history"]] == [0, 1, 2]
    assert card(out)["training"]["extra"]["checkpoint"]["kind"] == "final"


def test_ctrl_c_inside_a_c_call_is_saved_like_any_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CPython reports an interrupt that lands while a C function runs as a SystemError caused by
    # the KeyboardInterrupt ("<class 'int'> returned a result with an exception set"): seen on CI
    out = tmp_path / "run"
    calls = {"n": 0}
    validate = trainer_module._Loop.validate

    def stop_in_c(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] < 3:
            return validate(self, *args, **kwargs)
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise SystemError("<class 'int'> returned a result with an exception set") from interrupt

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module._Loop, "validate", stop_in_c)
        stopped = train("--epochs", "5", "--out", str(out))
    assert stopped.exit_code == 130, stopped.output
    assert "unexpected" not in stopped.output and f"hylo train --resume {out}" in stopped.output
    assert card(out)["training"]["extra"]["checkpoint"]["kind"] == "interrupted"


def test_a_system_error_that_is_no_interrupt_is_not_taken_for_one() -> None:
    from shared.rl.train_state import is_interrupt

    try:
        raise SystemError("something else")
    except SystemError as err:
        assert not is_interrupt(err)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise SystemError("x") from interrupt
    except SystemError as err:
        assert is_interrupt(err)
