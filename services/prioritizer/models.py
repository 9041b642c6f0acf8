"""The prioritizer's current model: loaded from a checkpoint, verified, swapped atomically.

A checkpoint (``shared.model.checkpoint``) is a directory with ``card.json`` and ``weights.pt``. A
``ModelVersion`` announcement names it by ``uri`` (a local path, optionally ``file://``; the path
of the directory, or of either file in it) and pins it by ``sha256``: the sha256 of ``card.json``
(``checkpoint_sha256``, recommended: the card records the weights' sha256, which loading checks, so
it pins both files) or of ``weights.pt``.

``ModelHolder.load`` checks, in order: the path is a local checkpoint, the sha256, the card, that
the card's feature schema is one this code computes and the featurizer's (``expected_schema``),
that the weights match the card and its config; then runs the model once on a tiny input, and only
then swaps it in. Any failure raises ``ModelLoadError`` with the reason (also kept in
``last_error``) and keeps the previous model. Loading again the version already loaded, with the
same sha256, does nothing (announcements may be redelivered).

Thread-safety: loads are serialized; readers take ``loaded`` (one reference read), so a decision in
flight keeps the model it started with while the next one sees the new model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from shared.features import FeatureConfig, FeatureSampler, FeatureSchema, SamplingConfig
from shared.model import ActorCritic, CheckpointError, ModelCard
from shared.model.checkpoint import CARD_FILE, WEIGHTS_FILE
from shared.model.locate import ModelLoadError, checkpoint_sha256, file_sha256, resolve_checkpoint
from shared.schemas.messages import ModelVersion

__all__ = ["LoadedModel", "ModelHolder", "ModelLoadError", "checkpoint_sha256", "resolve_checkpoint"]


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A verified model and what scoring a queue with it needs.

    ``schema_hash`` is the feature schema it was trained on (a matrix with another hash is not fed
    to it); ``feature_config`` and ``sampler`` are that schema's constants and sampling rule;
    ``base_policy`` the policy whose order its queue slots followed in training (``None``: the
    prioritizer's configured one); ``max_queue`` how many jobs it orders (the rest follow in base
    order).
    """

    version: str
    model: ActorCritic
    schema_hash: str
    feature_config: FeatureConfig
    sampler: FeatureSampler
    base_policy: str | None
    max_queue: int
    sha256: str | None = None
    card: ModelCard | None = None


class ModelHolder:
    """Holds the prioritizer's current model (see the module docstring).

    ``expected_schema`` is the featurizer's feature schema (default: ``FeatureSchema.current()``,
    the featurizer's default); a checkpoint trained on another is refused at load time. ``None``
    accepts any schema this code computes (each matrix is still checked against the model's).
    """

    def __init__(self, expected_schema: FeatureSchema | str | None = "default", warm_up: bool = True) -> None:
        if expected_schema == "default":
            expected_schema = FeatureSchema.current()
        self.expected_schema: FeatureSchema | None = (
            expected_schema if isinstance(expected_schema, FeatureSchema) else None
        )
        self.warm_up = warm_up
        self._loaded: LoadedModel | None = None
        self._last_error: str | None = None
        self._load_lock = threading.Lock()

    # -- readers ------------------------------------------------------------------------------------

    @property
    def loaded(self) -> LoadedModel | None:
        """The current model with everything needed to use it (one atomic read)."""
        return self._loaded

    @property
    def current(self) -> tuple[str, ActorCritic] | None:
        """(version name, model) of the current model, or None."""
        loaded = self._loaded
        return None if loaded is None else (loaded.version, loaded.model)

    @property
    def last_error(self) -> str | None:
        """Why the last load failed (None after a successful load)."""
        return self._last_error

    # -- writers ------------------------------------------------------------------------------------

    def clear(self) -> None:
        """Drop the current model: the base policy decides until the next load."""
        with self._load_lock:
            self._loaded = None

    def load(self, version: ModelVersion) -> None:
        """Load, verify and swap in ``version``; ``ModelLoadError`` (previous model kept) if unusable."""
        with self._load_lock:
            current = self._loaded
            if (
                current is not None
                and current.version == version.version
                and current.sha256 == version.sha256
            ):
                return
            try:
                loaded = self._read(version)
            except ModelLoadError as err:
                self._last_error = err.reason
                raise
            except Exception as err:  # whatever else a broken checkpoint raises (unpickling, ...)
                reason = f"model {version.version}: cannot load {version.uri}: {type(err).__name__}: {err}"
                self._last_error = reason
                raise ModelLoadError(reason) from err
            self._loaded = loaded
            self._last_error = None

    def install(
        self,
        version: str,
        model: ActorCritic,
        schema_hash: str | None = None,
        *,
        feature_config: FeatureConfig | None = None,
        sampling: SamplingConfig | None = None,
        base_policy: str | None = None,
        max_queue: int | None = None,
    ) -> LoadedModel:
        """Swap in a model object directly (tests, an embedded run): no checkpoint, no checks but the
        schema's. ``schema_hash`` defaults to the schema of ``feature_config`` and ``sampling``."""
        schema = FeatureSchema.current(feature_config, sampling)
        loaded = LoadedModel(
            version=version,
            model=model,
            schema_hash=schema_hash or schema.hash,
            feature_config=schema.config,
            sampler=FeatureSampler(schema.sampling),
            base_policy=base_policy,
            max_queue=max_queue or model.config.max_queue,
        )
        with self._load_lock:
            self._loaded = loaded
            self._last_error = None
        return loaded

    # -- loading ------------------------------------------------------------------------------------

    def _read(self, version: ModelVersion) -> LoadedModel:
        from shared.rl.setup import expected_schema  # the trainer's own rule for a card's schema

        name = version.version
        folder = resolve_checkpoint(version.uri)
        card_path, weights_path = folder / CARD_FILE, folder / WEIGHTS_FILE
        for path in (card_path, weights_path):
            if not path.is_file():
                raise ModelLoadError(f"model {name}: {path} is missing")
        digests = {file_sha256(card_path): CARD_FILE, file_sha256(weights_path): WEIGHTS_FILE}
        if version.sha256 not in digests:
            raise ModelLoadError(
                f"model {name}: sha256 {version.sha256} matches neither {card_path} nor {weights_path}; "
                "the checkpoint changed after it was announced"
            )
        try:
            from shared.model.checkpoint import load_checkpoint, read_card

            card = read_card(folder)
            schema = expected_schema(card)
            if card.features.schema_hash != schema.hash:
                raise ModelLoadError(
                    f"model {name}: trained on feature schema {card.features.schema_hash[:12]}, which this "
                    f"code does not compute (it computes {schema.hash[:12]} for the card's sampling rule)"
                )
            want = self.expected_schema
            if want is not None and want.hash != schema.hash:
                diff = _schema_diff(want, schema)
                raise ModelLoadError(
                    f"model {name}: trained on feature schema {schema.hash[:12]}, the featurizer computes "
                    f"{want.hash[:12]} ({diff})"
                )
            model, card = load_checkpoint(folder, expected_schema_hash=schema.hash)
        except CheckpointError as err:
            raise ModelLoadError(f"model {name}: {err}") from None
        except (OSError, RuntimeError, ValueError) as err:
            raise ModelLoadError(f"model {name}: cannot read {folder}: {type(err).__name__}: {err}") from None
        if self.warm_up:
            _warm_up(name, model)
        base = card.training.base_policy or None
        return LoadedModel(
            version=name,
            model=model,
            schema_hash=schema.hash,
            feature_config=schema.config,
            sampler=FeatureSampler(schema.sampling),
            base_policy=base,
            max_queue=card.model.max_queue,
            sha256=version.sha256,
            card=card,
        )


def _schema_diff(a: FeatureSchema, b: FeatureSchema) -> str:
    mine, theirs = a.to_dict(), b.to_dict()
    keys = [k for k in sorted(mine) if mine[k] != theirs.get(k)]
    return "differs in " + ", ".join(keys) if keys else "same fields, different hash"


def _warm_up(name: str, model: ActorCritic) -> None:
    """One forward pass on a tiny queue, so a broken model fails here and the first decision is fast."""
    cfg = model.config
    obs = torch.zeros((1, 2, cfg.obs_features))
    mask = torch.ones((1, 2), dtype=torch.bool)
    try:
        with torch.no_grad():
            prio = model.priorities(obs, mask)
    except Exception as err:
        raise ModelLoadError(f"model {name} fails on a test queue: {type(err).__name__}: {err}") from None
    if tuple(prio.shape) != (1, 2):
        raise ModelLoadError(
            f"model {name} returns priorities of shape {tuple(prio.shape)} for a 2-job queue"
        )
