"""Interrupting and resuming ``train`` (issue 21, item 6): a run stopped by Ctrl-C at any point and
resumed from its saved state computes the same epochs as a run never stopped, the state survives
a round trip through its file, and the per-epoch scalars are written as epochs end."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import shared.rl.trainer as trainer_module
from shared.model import ModelConfig
from shared.rl import run_log
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.rl.ppo import PPOConfig
from shared.rl.reward import RewardSpec
from shared.rl.run_log import SCALARS_FILE, ScalarLog, tensorboard_tag
from shared.rl.train_state import (
    STATE_FILE,
    StateFileError,
    TrainingInterrupted,
    TrainState,
    load_state,
    save_state,
)
from shared.rl.trainer import TrainConfig, TrainResult, continues, result_from_state, train
from shared.scheduling.binding import BoundWorkload
from shared.sim.config import SimConfig
from tests.rl.conftest import toy_workload

#: history columns that measure time, not learning: the only ones a resumed run may differ in
TIMING = {"wall_s", "rollout_s", "update_s", "decisions_per_s"}


@pytest.fixture(scope="module")
def runner() -> EpisodeRunner:
    """320 toy jobs: enough for one validation window after the training part (best-model
    bookkeeping is part of what must resume)."""
    bound: BoundWorkload = toy_workload(n_jobs=320)
    settings = EpisodeSettings(
        base_policy="fcfs", reward=RewardSpec.parse("wait"), config=SimConfig.paper(), warmup=0
    )
    return EpisodeRunner(bound, settings)


def config(epochs: int) -> TrainConfig:
    return TrainConfig(
        epochs=epochs,
        windows_per_epoch=3,
        window_size=24,
        validation_windows=1,
        train_fraction=0.8,
        model=ModelConfig(max_queue=32, top_k=8),
        ppo=PPOConfig(learning_rate=2e-2, update_epochs=2, minibatch_size=32),
    )


def learning(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in history]


def weights(result: TrainResult) -> list[torch.Tensor]:
    return [*result.model.state_dict().values(), *result.best_model.state_dict().values()]


def interrupt_in_update(monkeypatch: pytest.MonkeyPatch, at_epoch: int) -> None:
    """Ctrl-C in the middle of epoch ``at_epoch``'s PPO update, after its first minibatch moved the
    weights and Adam's moments: the state at that instant is half-way between two epochs."""
    real = trainer_module.ppo_update
    calls = {"n": 0}

    def update(model: Any, optimizer: Any, batch: Any, cfg: PPOConfig, rng: np.random.Generator) -> Any:
        calls["n"] += 1
        if calls["n"] == at_epoch:
            real(model, optimizer, batch, cfg.model_copy(update={"update_epochs": 1}), rng)
            raise KeyboardInterrupt
        return real(model, optimizer, batch, cfg, rng)

    monkeypatch.setattr(trainer_module, "ppo_update", update)


def test_a_resumed_run_equals_an_uninterrupted_one(
    runner: EpisodeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = train(runner, config(5))
    with monkeypatch.context() as patch:
        interrupt_in_update(patch, at_epoch=3)
        with pytest.raises(TrainingInterrupted) as stop:
            train(runner, config(5))
    state = stop.value.state
    assert state is not None and state.epoch == 2  # the epoch in flight is not kept
    save_state(tmp_path / STATE_FILE, state)
    torch.manual_seed(1234)  # whatever ran in between must not matter
    np.random.default_rng(99).random(10)
    resumed = train(runner, config(5), resume=load_state(tmp_path / STATE_FILE))
    assert [row["epoch"] for row in resumed.history] == [0, 1, 2, 3, 4, 5]
    assert learning(resumed.history) == learning(whole.history)
    assert resumed.best_epoch == whole.best_epoch
    for a, b in zip(weights(resumed), weights(whole), strict=True):
        assert torch.equal(a, b)


def test_the_training_time_continues_across_sessions(runner: EpisodeRunner) -> None:
    first = train(runner, config(1))
    assert first.state is not None
    resumed = train(runner, config(2), resume=first.state)
    assert resumed.history[2]["wall_s"] > first.history[1]["wall_s"]
    assert resumed.wall_seconds >= first.state.wall_seconds


def test_on_epoch_sees_every_epoch_and_the_last_state_is_kept(runner: EpisodeRunner) -> None:
    seen: list[TrainState] = []
    result = train(runner, config(3), on_epoch=seen.append)
    assert [s.epoch for s in seen] == [0, 1, 2, 3]
    assert result.state is not None and result.state.epoch == 3
    assert [len(s.history) for s in seen] == [1, 2, 3, 4]  # each its own copy
    assert not continues(result.state, config(3)) and continues(result.state, config(4))
    again = train(runner, config(3), resume=result.state)  # nothing left: no epoch runs
    assert len(again.history) == 4


def test_an_interrupt_before_the_first_epoch_carries_no_state(
    runner: EpisodeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stop(*_: object) -> dict[str, float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module._Loop, "validate", stop)
    with pytest.raises(TrainingInterrupted) as raised:
        train(runner, config(2))
    assert raised.value.state is None
    assert isinstance(raised.value, KeyboardInterrupt)  # callers that do not know it still stop


def test_max_minutes_spent_stops_a_resumed_run_where_it_stopped(runner: EpisodeRunner) -> None:
    first = train(runner, config(1))
    assert first.state is not None
    spent = replace(config(5), max_minutes=first.state.wall_seconds / 60 / 2)
    assert not continues(first.state, spent)
    assert len(train(runner, spent, resume=first.state).history) == 2


def test_result_from_state_is_the_checkpoint_model_and_leaves_the_random_stream(
    runner: EpisodeRunner,
) -> None:
    result = train(runner, config(2))
    assert result.state is not None
    before = torch.get_rng_state()
    again = result_from_state(result.state, config(2), len(runner.workload.jobs))
    assert torch.equal(torch.get_rng_state(), before)
    assert again.best_epoch == result.best_epoch
    for a, b in zip(weights(again), weights(result), strict=True):
        assert torch.equal(a, b)


def test_a_state_file_of_another_format_is_refused(runner: EpisodeRunner, tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    torch.save({"format": 99}, path)
    with pytest.raises(StateFileError, match="format 99"):
        load_state(path)
    path.write_bytes(b"not a torch file")
    with pytest.raises(StateFileError, match="cannot read"):
        load_state(path)


def test_the_scalar_log_writes_each_epoch_and_rewrites_on_resume(tmp_path: Path) -> None:
    log = ScalarLog(tmp_path, tensorboard=False)
    log.write({"epoch": 0.0, "val_reward": 0.1})
    log.write({"epoch": 1.0, "reward": 0.5, "pg_loss": float("nan")})
    lines = [json.loads(line) for line in (tmp_path / SCALARS_FILE).read_text().splitlines()]
    assert lines == [{"epoch": 0.0, "val_reward": 0.1}, {"epoch": 1.0, "reward": 0.5, "pg_loss": None}]
    log.write({"epoch": 2.0, "reward": 0.7})  # lost to an interrupt: the state is from epoch 1
    ScalarLog(tmp_path, [{"epoch": 0.0, "val_reward": 0.1}, {"epoch": 1.0, "reward": 0.5}], False)
    assert len((tmp_path / SCALARS_FILE).read_text().splitlines()) == 2
    assert tensorboard_tag("val_reward") == "validation/reward"
    assert tensorboard_tag("pg_loss") == "loss/policy" and tensorboard_tag("reward") == "train/reward"


class FakeWriter:
    def __init__(self, log_dir: str, purge_step: int | None) -> None:
        self.log_dir, self.purge_step = log_dir, purge_step
        self.scalars: list[tuple[str, float, int]] = []
        self.flushed = self.closed = 0

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        self.scalars.append((tag, scalar_value, global_step))

    def flush(self) -> None:
        self.flushed += 1

    def close(self) -> None:
        self.closed += 1


def test_tensorboard_gets_the_scalars_and_a_purge_step_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is ``torch.utils.tensorboard.SummaryWriter`` when importable (a fake here: the
    package is an optional extra); finite scalars only, flushed each epoch."""

    class Module:
        SummaryWriter = FakeWriter

    monkeypatch.setattr(run_log.importlib, "import_module", lambda name: Module)
    log = ScalarLog(tmp_path, [{"epoch": 0.0}, {"epoch": 1.0, "reward": 0.5}])
    writer = log.writer
    assert isinstance(writer, FakeWriter)
    assert writer.log_dir == str(tmp_path / "tensorboard") and writer.purge_step == 2
    log.write({"epoch": 2.0, "reward": 0.25, "v_loss": 1.5, "approx_kl": float("nan")})
    assert writer.scalars == [("train/reward", 0.25, 2), ("loss/value", 1.5, 2)]
    assert writer.flushed == 1
    log.close()
    assert writer.closed == 1


def test_real_tensorboard_events_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is the optional extra '.[tensorboard]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = ScalarLog(tmp_path)
    log.write({"epoch": 1.0, "reward": 0.5, "val_reward": 0.25})
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("validation/reward")] == [(1, 0.25)]
