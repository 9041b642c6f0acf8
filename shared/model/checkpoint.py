"""Checkpoints: a torch state dict plus a JSON card that says what the weights are and how to trust them.

A checkpoint is a directory with two files:

- ``weights.pt``: ``torch.save(model.state_dict())``, loaded back with ``weights_only=True``.
- ``card.json``: a ``ModelCard``: the model config (to rebuild the network), the feature schema
  (names and the hash the featurizer computed), training metadata, the sha256 of ``weights.pt``,
  creation time and torch version.

Loading checks, in order: both files exist, the card parses, the weights' sha256 matches the card,
the feature schema hash matches what the caller's featurizer produces, the config matches what the
caller expects, and the weights fit the config. Each failure is its own ``CheckpointError`` subclass
and names the file and what was expected. A model fed features it was not trained on would still
produce priorities, just meaningless ones, hence the schema hash check.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from shared.model.config import ModelConfig
from shared.model.network import ActorCritic

CARD_FILE = "card.json"
WEIGHTS_FILE = "weights.pt"
FORMAT_VERSION = 1


class CardFeatures(BaseModel):
    """The features the model was trained on, in input order, and the featurizer's hash of them.

    (The card's record of ``shared.features.FeatureSchema``, the running code's schema: two names,
    so that neither is mistaken for the other.)"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    obs: tuple[str, ...]
    critic: tuple[str, ...]
    schema_hash: str = Field(min_length=1)


class TrainingInfo(BaseModel):
    """How the weights were obtained, and what they scored on held-out windows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str
    cluster: str
    base_policy: str
    metric: str
    seed: int
    epochs: int = Field(ge=0)
    held_out: dict[str, JsonValue] = Field(default_factory=dict, description="held-out evaluation results")
    extra: dict[str, JsonValue] = Field(default_factory=dict, description="anything else worth keeping")


class ModelCard(BaseModel):
    """The JSON card of a checkpoint. ``weights_sha256``, ``created_at`` and ``torch_version`` are
    stamped by ``save_checkpoint``; whatever the caller put there is replaced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format_version: int = FORMAT_VERSION
    model: ModelConfig
    features: CardFeatures
    training: TrainingInfo
    weights_sha256: str = ""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    torch_version: str = torch.__version__

    @model_validator(mode="after")
    def _features_fit_model(self) -> ModelCard:
        for part, names, width in (
            ("obs", self.features.obs, self.model.obs_features),
            ("critic", self.features.critic, self.model.critic_features),
        ):
            if len(names) != width:
                raise ValueError(f"features.{part} has {len(names)} names but the model takes {width}")
        return self


class CheckpointError(Exception):
    """A checkpoint cannot be used; the message names the file and what was expected."""


class CheckpointMissingError(CheckpointError, FileNotFoundError):
    """A file of the checkpoint is absent."""


class CheckpointCardError(CheckpointError):
    """``card.json`` is not valid JSON or not a valid card."""


class CheckpointIntegrityError(CheckpointError):
    """The weights file's sha256 differs from the card's."""


class SchemaMismatchError(CheckpointError):
    """The checkpoint was trained on another feature schema than the caller's."""


class ConfigMismatchError(CheckpointError):
    """The model config differs from the caller's, or the weights do not fit the card's config."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a crash never leaves a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_checkpoint(directory: str | Path, model: ActorCritic, card: ModelCard) -> ModelCard:
    """Write ``weights.pt`` then ``card.json`` into ``directory`` (created, or overwritten).

    Returns the card as written, with the sha256, time and torch version stamped. The card goes
    last, so a directory with a card always has the weights it describes.
    """
    if card.model != model.config:
        raise ValueError(f"card.model {card.model!r} differs from the model's config {model.config!r}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS_FILE
    tmp = weights.with_name(f".{weights.name}.tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, weights)
    stamped = card.model_copy(
        update={
            "weights_sha256": file_sha256(weights),
            "created_at": datetime.now(UTC),
            "torch_version": torch.__version__,
        }
    )
    _write_atomic(folder / CARD_FILE, (stamped.model_dump_json(indent=2) + "\n").encode())
    return stamped


def read_card(directory: str | Path) -> ModelCard:
    """Parse ``card.json`` alone (e.g. to list checkpoints without loading weights)."""
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        raise CheckpointMissingError(f"{path}: missing; a checkpoint needs {CARD_FILE} and {WEIGHTS_FILE}")
    try:
        return ModelCard.model_validate_json(path.read_bytes())
    except ValidationError as err:
        raise CheckpointCardError(f"{path}: not a valid model card:\n{err}") from err


def _config_diff(found: ModelConfig, expected: ModelConfig) -> str:
    """The differing fields, e.g. ``actor_hidden: card (32, 16), expected (64, 64)``."""
    return "; ".join(
        f"{name}: card {getattr(found, name)!r}, expected {getattr(expected, name)!r}"
        for name in ModelConfig.model_fields
        if getattr(found, name) != getattr(expected, name)
    )


def load_checkpoint(
    directory: str | Path,
    expected_schema_hash: str | None = None,
    expected_config: ModelConfig | None = None,
    map_location: str | torch.device = "cpu",
) -> tuple[ActorCritic, ModelCard]:
    """Load and verify a checkpoint; return the model (in eval mode) and its card."""
    folder = Path(directory)
    missing = [folder / name for name in (CARD_FILE, WEIGHTS_FILE) if not (folder / name).is_file()]
    if missing:
        names = ", ".join(str(path) for path in missing)
        raise CheckpointMissingError(f"{names}: missing; a checkpoint needs {CARD_FILE} and {WEIGHTS_FILE}")
    card = read_card(folder)
    card_path, weights = folder / CARD_FILE, folder / WEIGHTS_FILE

    actual_sha = file_sha256(weights)
    if actual_sha != card.weights_sha256:
        raise CheckpointIntegrityError(
            f"{weights}: sha256 {actual_sha} but {card_path} expects {card.weights_sha256 or '(none)'}; "
            "the weights were modified or belong to another card"
        )
    if expected_schema_hash is not None and card.features.schema_hash != expected_schema_hash:
        raise SchemaMismatchError(
            f"{card_path}: trained on feature schema {card.features.schema_hash} "
            f"(obs {list(card.features.obs)}, critic {list(card.features.critic)}), "
            f"but the featurizer produces schema {expected_schema_hash}"
        )
    if expected_config is not None and card.model != expected_config:
        raise ConfigMismatchError(
            f"{card_path}: model config differs: {_config_diff(card.model, expected_config)}"
        )

    model = ActorCritic(card.model)
    state = torch.load(weights, map_location=map_location, weights_only=True)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise ConfigMismatchError(f"{weights}: weights do not fit the config in {card_path}:\n{err}") from err
    return model.eval(), card
