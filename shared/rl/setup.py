"""Wiring shared by ``hylo train``, ``hylo evaluate``, the Gymnasium env and the benchmarks:
workload + settings -> ``EpisodeRunner``; trained model -> checkpoint card; checkpoint -> model.

The checkpoint card records the feature schema (``shared.features.FeatureSchema``: catalog,
constants, sampling rule) and its hash. Loading recomputes the hash this code gives for the card's
sampling rule and refuses the checkpoint when it differs (``SchemaMismatchError``): a model fed
features it was not trained on would still rank jobs, just meaninglessly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from shared.domain.load import (
    DEFAULT_LOAD_DEFINITION,
    LEGACY_LOAD_DEFINITION,
    LoadDefinition,
    check_definition,
)
from shared.features import FeatureSampler, FeatureSchema, FeatureSchemaMismatch, SamplingConfig
from shared.model import (
    ActorCritic,
    CardFeatures,
    ModelCard,
    SchemaMismatchError,
    TrainingInfo,
    load_checkpoint,
    read_card,
)
from shared.policies import needs_predictions
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.rl.reward import RewardSpec
from shared.sim.config import SimConfig
from shared.sim.evaluate import PreparedWorkload, prepare_workload


@dataclass(frozen=True)
class RunSetup:
    """How episodes are simulated: everything but the trace and the model."""

    base_policy: str = "fcfs"
    metric: str = "bsld"
    paper: bool = False
    estimates: str = "noisy"
    warmup: int | None = None  # None: 0 in the paper setting (cold windows), else 256
    sampling: str = "state"
    seed: int = 0
    n_jobs: int = 20_000  # the embedded workload's size (traces ignore it)
    target_load: float | None = None  # rescale arrivals to this offered load (None: as generated)
    placement: str | None = None  # None: the setting's default (best-fit; the paper's first-fit)
    load_definition: LoadDefinition = DEFAULT_LOAD_DEFINITION  # what target_load means

    def sim_config(self) -> SimConfig:
        config = SimConfig.paper() if self.paper else SimConfig(oracle_runtimes=self.estimates == "oracle")
        if self.placement is not None:
            config = config.model_copy(update={"placement": self.placement})
        return config

    def episode_settings(self) -> EpisodeSettings:
        warmup = self.warmup if self.warmup is not None else (0 if self.paper else 256)
        return EpisodeSettings(
            base_policy=self.base_policy,
            reward=RewardSpec.parse(self.metric),
            config=self.sim_config(),
            warmup=warmup,
            sampling=SamplingConfig(mode="fixed" if self.sampling == "fixed" else "state"),
        )


def load_runner(
    trace: str | None, cluster: str | None, setup: RunSetup, *, predictions: bool = False
) -> tuple[PreparedWorkload, EpisodeRunner]:
    """Load and bind the trace, and the episode runner over it; with the runtime predictions
    when ``predictions`` (baselines that need them) or the base policy orders by them."""
    work = prepare_workload(
        trace,
        cluster,
        n_jobs=setup.n_jobs,
        seed=setup.seed,
        estimates=setup.estimates,
        target_load=setup.target_load,
        load_definition=setup.load_definition,
        predictions=predictions or needs_predictions([setup.base_policy]),
    )
    return work, EpisodeRunner(work.bound, setup.episode_settings(), work.exclusions)


def make_card(
    model: ActorCritic,
    runner: EpisodeRunner,
    *,
    trace: str,
    cluster: str,
    seed: int,
    epochs: int,
    held_out: dict[str, JsonValue] | None = None,
    extra: dict[str, JsonValue] | None = None,
) -> ModelCard:
    """The checkpoint card of a model trained with ``runner``'s settings."""
    settings = runner.settings
    schema = settings.schema
    fixed = FeatureSampler(settings.sampling).fixed()
    info: dict[str, JsonValue] = {
        "feature_schema": schema.to_dict(),
        "sim_config": settings.config.model_dump(mode="json"),
        "warmup": settings.warmup,
        "reward": settings.reward.describe(),
    }
    info.update(extra or {})
    return ModelCard(
        model=model.config,
        features=CardFeatures(
            obs=fixed.observation_names, critic=fixed.critic_names, schema_hash=schema.hash
        ),
        training=TrainingInfo(
            trace=trace,
            cluster=cluster,
            base_policy=settings.base_policy,
            metric=settings.reward.describe(),
            seed=seed,
            epochs=epochs,
            held_out=held_out or {},
            extra=info,
        ),
    )


def trained_load_definition(info: TrainingInfo) -> LoadDefinition:
    """What the card's ``load`` meant: its ``load_definition``, or ``capped`` for a card written
    before the field existed (every load rescaled before issue 18 was capped)."""
    recorded = info.extra.get("load_definition")
    if recorded is None:
        return LEGACY_LOAD_DEFINITION
    return check_definition(str(recorded))  # a ValueError naming the choices if unknown


def expected_schema(card: ModelCard) -> FeatureSchema:
    """This code's feature schema under the sampling rule the card was trained with."""
    recorded: Any = card.training.extra.get("feature_schema")
    sampling = SamplingConfig()
    if isinstance(recorded, dict) and isinstance(recorded.get("sampling"), dict):
        sampling = SamplingConfig.model_validate(recorded["sampling"])
    return FeatureSchema.current(sampling=sampling)


def load_trained(directory: str | Path) -> tuple[ActorCritic, ModelCard, FeatureSchema]:
    """Load a checkpoint, refusing one whose feature schema this code does not produce."""
    card = read_card(directory)
    schema = expected_schema(card)
    try:
        model, card = load_checkpoint(directory, expected_schema_hash=schema.hash)
    except SchemaMismatchError as err:
        recorded: Any = card.training.extra.get("feature_schema")
        if isinstance(recorded, dict):
            try:  # name what differs, when the card recorded its schema
                schema.require_same(FeatureSchema.from_dict(recorded))
            except (FeatureSchemaMismatch, KeyError, ValueError) as diff:
                raise SchemaMismatchError(f"{err}; {diff}") from None
        raise
    return model, card, schema
