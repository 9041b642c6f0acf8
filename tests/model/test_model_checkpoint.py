"""Checkpoint round trip and every way loading must refuse a checkpoint."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from shared.model import (
    ActorCritic,
    CardFeatures,
    CheckpointCardError,
    CheckpointError,
    CheckpointIntegrityError,
    CheckpointMissingError,
    ConfigMismatchError,
    ModelCard,
    ModelConfig,
    SchemaMismatchError,
    TrainingInfo,
    load_checkpoint,
    read_card,
    save_checkpoint,
)

CFG = ModelConfig(obs_features=3, critic_features=2, max_queue=8, actor_hidden=(8, 4), critic_hidden=(8,))
FEATURES = CardFeatures(obs=("gpus", "wait", "size"), critic=("free_ratio", "cff"), schema_hash="abc123")
TRAINING = TrainingInfo(
    trace="philly",
    cluster="philly",
    base_policy="fcfs",
    metric="bsld",
    seed=7,
    epochs=3,
    held_out={"bsld_mean": 233.0, "bsld_ci95": [210.5, 251.0], "windows": 100},
)


def make_model(seed: int = 0, config: ModelConfig = CFG) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(config)


def saved(tmp_path: Path, seed: int = 0) -> tuple[Path, ActorCritic, ModelCard]:
    net = make_model(seed)
    card = save_checkpoint(tmp_path / "ckpt", net, ModelCard(model=CFG, features=FEATURES, training=TRAINING))
    return tmp_path / "ckpt", net, card


def test_round_trip(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    folder, net, card = saved(tmp_path)
    loaded, loaded_card = load_checkpoint(folder, expected_schema_hash="abc123", expected_config=CFG)

    assert loaded_card == card
    assert card.weights_sha256 == hashlib.sha256((folder / "weights.pt").read_bytes()).hexdigest()
    assert card.torch_version == torch.__version__
    assert before - timedelta(seconds=1) <= card.created_at <= datetime.now(UTC)
    assert card.training.held_out["bsld_ci95"] == [210.5, 251.0]
    for (name, a), (_, b) in zip(net.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    obs, mask = torch.rand(2, 8, 3), torch.ones(2, 8, dtype=torch.bool)
    assert torch.equal(net.scores(obs, mask), loaded.scores(obs, mask))


def test_card_is_plain_json_with_the_documented_fields(tmp_path: Path) -> None:
    folder, _, card = saved(tmp_path)
    raw = json.loads((folder / "card.json").read_text())
    assert set(raw) == {
        "format_version",
        "model",
        "features",
        "training",
        "weights_sha256",
        "created_at",
        "torch_version",
    }
    assert raw["features"] == {
        "obs": ["gpus", "wait", "size"],
        "critic": ["free_ratio", "cff"],
        "schema_hash": "abc123",
    }
    assert raw["model"]["actor_hidden"] == [8, 4]
    assert raw["weights_sha256"] == card.weights_sha256
    assert read_card(folder) == card


@pytest.mark.parametrize("name", ["card.json", "weights.pt"])
def test_missing_file(tmp_path: Path, name: str) -> None:
    folder, _, _ = saved(tmp_path)
    (folder / name).unlink()
    with pytest.raises(CheckpointMissingError, match=name) as info:
        load_checkpoint(folder)
    assert str(folder / name) in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CheckpointMissingError, match=r"card\.json"):
        load_checkpoint(tmp_path / "nowhere")


def test_modified_weights_fail_the_sha_check(tmp_path: Path) -> None:
    folder, _, card = saved(tmp_path)
    torch.save(make_model(seed=1).state_dict(), folder / "weights.pt")
    with pytest.raises(CheckpointIntegrityError, match=r"weights\.pt") as info:
        load_checkpoint(folder)
    assert card.weights_sha256 in str(info.value)


def test_other_feature_schema_is_refused(tmp_path: Path) -> None:
    folder, _, _ = saved(tmp_path)
    with pytest.raises(SchemaMismatchError, match=r"card\.json") as info:
        load_checkpoint(folder, expected_schema_hash="def456")
    assert "abc123" in str(info.value)
    assert "def456" in str(info.value)
    assert "wait" in str(info.value)


def test_other_expected_config_is_refused(tmp_path: Path) -> None:
    folder, _, _ = saved(tmp_path)
    other = CFG.model_copy(update={"top_k": 16})
    with pytest.raises(ConfigMismatchError, match="top_k: card 32, expected 16"):
        load_checkpoint(folder, expected_config=other)


def test_weights_that_do_not_fit_the_card_config(tmp_path: Path) -> None:
    folder, _, _ = saved(tmp_path)
    # A card rewritten to claim other hidden sizes, with its sha still matching the weights.
    raw = json.loads((folder / "card.json").read_text())
    raw["model"]["actor_hidden"] = [16, 4]
    (folder / "card.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigMismatchError, match=r"weights\.pt") as info:
        load_checkpoint(folder)
    assert "size mismatch" in str(info.value)


def test_unreadable_card(tmp_path: Path) -> None:
    folder, _, _ = saved(tmp_path)
    (folder / "card.json").write_text("{not json")
    with pytest.raises(CheckpointCardError, match=r"card\.json"):
        load_checkpoint(folder)
    raw = {"model": CFG.model_dump(), "features": FEATURES.model_dump()}
    (folder / "card.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointCardError, match="training"):
        load_checkpoint(folder)


def test_every_load_error_is_a_checkpoint_error() -> None:
    for err in (
        CheckpointMissingError,
        CheckpointCardError,
        CheckpointIntegrityError,
        SchemaMismatchError,
        ConfigMismatchError,
    ):
        assert issubclass(err, CheckpointError)


def test_card_validation(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"features.obs has 2 names but the model takes 3"):
        ModelCard(model=CFG, features=FEATURES.model_copy(update={"obs": ("a", "b")}), training=TRAINING)
    other = ModelConfig(obs_features=3, critic_features=2)
    card = ModelCard(model=other, features=FEATURES, training=TRAINING)
    with pytest.raises(ValueError, match="differs from the model's config"):
        save_checkpoint(tmp_path / "x", make_model(), card)
    assert not (tmp_path / "x").exists()
