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

Bounded before anything is allocated: a checkpoint is read by every prioritizer replica as soon as it
is announced, and a card alone decides what its reader allocates (``actor_hidden=(20000, 20000)``
cost 134 s and 6.6 GB before the weights were refused). So the card's bytes are bounded before it is
parsed (``MAX_CARD_BYTES``), the network it describes before it is built (``MAX_HIDDEN_LAYERS``
hidden layers per network, ``max_model_params`` parameters: ``CheckpointSettings``), and the weights
file before torch reads it: its size, and the sizes its zip records declare (torch inflates a
deflated record to the size its header declares, so 200 kB can become 200 MB), against what the
card's parameters can need. Each refusal is a ``CheckpointTooLargeError`` naming the file and the
limit.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from shared.config import HyloBaseSettings
from shared.model.config import ModelConfig
from shared.model.network import ActorCritic

CARD_FILE = "card.json"
WEIGHTS_FILE = "weights.pt"
FORMAT_VERSION = 1
#: a card is a few kB (the shipped ones about 1 kB): one bigger than this is refused unparsed
MAX_CARD_BYTES = 1 << 20
#: hidden layers per network (the actor's, the critic's); the shipped models have two each
MAX_HIDDEN_LAYERS = 64
#: what a weights file may hold beyond its parameters at 8 bytes each (float64; Hylo saves float32):
#: the pickled state dict and the zip's headers, about 5 kB for the shipped models
WEIGHTS_OVERHEAD_BYTES = 1 << 20
#: records of a weights file: one per tensor (two per layer) plus a few of torch's own
MAX_WEIGHT_RECORDS = 4 * (MAX_HIDDEN_LAYERS + 1) + 64


class CheckpointSettings(HyloBaseSettings):
    """What reading a checkpoint may allocate (``HYLO_MAX_MODEL_PARAMS``).

    Why a setting: a deployment that trains bigger models raises it; the default is 700 times the
    shipped models (5,954 parameters) and still builds in about a second and 80 MB."""

    max_model_params: int = Field(
        default=1 << 22,
        ge=1,
        description="largest model (weights and biases, from the card's shapes) a checkpoint may "
        "describe; refused before the network is allocated",
    )


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


class CheckpointTooLargeError(CheckpointError):
    """The card, the model it describes or the weights file exceed a bound (``MAX_CARD_BYTES``,
    ``MAX_HIDDEN_LAYERS``, ``CheckpointSettings.max_model_params``, what the weights can need)."""


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


def read_card(directory: str | Path, max_params: int | None = None) -> ModelCard:
    """Parse ``card.json`` alone (e.g. to list checkpoints without loading weights).

    Refused (``CheckpointTooLargeError``) when the file passes ``MAX_CARD_BYTES`` or the model it
    describes passes ``max_params`` (default: ``CheckpointSettings``) or ``MAX_HIDDEN_LAYERS``:
    every reader builds the card's network next, so this is where it is bounded."""
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        raise CheckpointMissingError(f"{path}: missing; a checkpoint needs {CARD_FILE} and {WEIGHTS_FILE}")
    with path.open("rb") as handle:
        data = handle.read(MAX_CARD_BYTES + 1)  # never more, whatever the file's size
    if len(data) > MAX_CARD_BYTES:
        raise CheckpointTooLargeError(
            f"{path}: more than {MAX_CARD_BYTES} bytes, the limit for a model card (MAX_CARD_BYTES)"
        )
    try:
        card = ModelCard.model_validate_json(data)
    except ValidationError as err:
        raise CheckpointCardError(f"{path}: not a valid model card:\n{err}") from err
    check_model_size(card.model, path, max_params)
    return card


def check_model_size(config: ModelConfig, source: str | Path, max_params: int | None = None) -> int:
    """The parameter count of ``config``; ``CheckpointTooLargeError`` naming ``source`` (the card)
    when it has more than ``MAX_HIDDEN_LAYERS`` hidden layers or ``max_params`` parameters (default:
    ``CheckpointSettings().max_model_params``). Computed from the shapes: nothing is allocated."""
    for name in ("actor_hidden", "critic_hidden"):
        layers = len(getattr(config, name))
        if layers > MAX_HIDDEN_LAYERS:
            raise CheckpointTooLargeError(
                f"{source}: model.{name} has {layers} layers, more than the limit of {MAX_HIDDEN_LAYERS} "
                "(MAX_HIDDEN_LAYERS); refused before building it"
            )
    limit = CheckpointSettings().max_model_params if max_params is None else max_params
    count = config.parameter_count
    if count > limit:
        raise CheckpointTooLargeError(
            f"{source}: the model has {count:,} parameters (obs_features {config.obs_features}, "
            f"actor_hidden {config.actor_hidden}, critic_hidden {config.critic_hidden}), more than the "
            f"limit of {limit:,} (HYLO_MAX_MODEL_PARAMS); refused before building it"
        )
    return count


def _declared_record_bytes(path: Path) -> int:
    """The bytes the records of zip file ``path`` declare once extracted (what torch allocates to
    read them, whatever they hold), summed over its central directory, which the standard
    library's ``zipfile`` reads without extracting anything. ValueError when it is not a zip or
    has more than ``MAX_WEIGHT_RECORDS`` records (the file's size on disk is bounded before, so
    its directory is too)."""
    try:
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"not a zip file (torch.save's format): {err}") from None
    if len(records) > MAX_WEIGHT_RECORDS:
        raise ValueError(f"{len(records)} records, more than the limit of {MAX_WEIGHT_RECORDS}")
    return sum(record.file_size for record in records)


def _weights_bound(weights: Path, card_path: Path, config: ModelConfig, extracted: bool) -> None:
    """Refuse a weights file bigger than the card's parameters can need (8 bytes each plus
    ``WEIGHTS_OVERHEAD_BYTES``): on disk, or (``extracted``) once torch extracts its records."""
    bound = config.parameter_count * 8 + WEIGHTS_OVERHEAD_BYTES
    what, size = "is", weights.stat().st_size
    if extracted:
        what = "declares, once extracted,"
        try:
            size = _declared_record_bytes(weights)
        except ValueError as err:
            raise CheckpointTooLargeError(f"{weights}: cannot be bounded before loading: {err}") from None
    if size > bound:
        raise CheckpointTooLargeError(
            f"{weights}: {what} {size} bytes, more than the {bound} that the {config.parameter_count:,} "
            f"parameters of {card_path} can need; refused before loading"
        )


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

    _weights_bound(weights, card_path, card.model, extracted=False)
    actual_sha = file_sha256(weights)
    if actual_sha != card.weights_sha256:
        raise CheckpointIntegrityError(
            f"{weights}: sha256 {actual_sha} but {card_path} expects {card.weights_sha256 or '(none)'}; "
            "the weights were modified or belong to another card"
        )
    _weights_bound(weights, card_path, card.model, extracted=True)
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
