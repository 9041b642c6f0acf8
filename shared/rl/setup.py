"""Wiring shared by ``hylo train``, ``hylo evaluate``, the Gymnasium env and the benchmarks:
workload + settings -> ``EpisodeRunner``; trained model -> checkpoint card; checkpoint -> model.

The checkpoint card records the feature schema (``shared.features.FeatureSchema``: catalog,
constants, sampling rule) and its hash. Loading recomputes the hash this code gives for the card's
sampling rule and refuses the checkpoint when it differs (``SchemaMismatchError``): a model fed
features it was not trained on would still rank jobs, just meaninglessly.

The feature set (``shared.features.catalog.FEATURE_SETS``) is part of that schema: ``RunSetup``
chooses it for training (``hylo train --feature-set``), the card records it (a card without it is
``classic``), and a set that reads the runtime predictor's columns makes ``load_runner`` prepare
the workload with predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import JsonValue, ValidationError

from shared.domain.load import (
    DEFAULT_LOAD_DEFINITION,
    LEGACY_LOAD_DEFINITION,
    LoadDefinition,
    check_definition,
)
from shared.features import FeatureSampler, FeatureSchema, FeatureSchemaMismatch, SamplingConfig
from shared.features.catalog import DEFAULT_FEATURE_SET, FEATURE_SETS, feature_set
from shared.model import (
    ActorCritic,
    CardFeatures,
    ModelCard,
    SchemaMismatchError,
    TrainingInfo,
    load_checkpoint,
    read_card,
)
from shared.model.checkpoint import CARD_FILE
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
    feature_set: str = DEFAULT_FEATURE_SET  # the model's feature pool (shared.features.catalog)

    def __post_init__(self) -> None:
        feature_set(self.feature_set)  # UnknownFeatureSet (a ValueError) naming the known sets

    @property
    def needs_predictions(self) -> bool:
        """Whether the workload needs the runtime predictions: the feature set reads them, or
        the base policy orders by them."""
        return feature_set(self.feature_set).reads_predictions or needs_predictions([self.base_policy])

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
            sampling=SamplingConfig(
                feature_set=self.feature_set, mode="fixed" if self.sampling == "fixed" else "state"
            ),
        )


def load_runner(
    trace: str | None, cluster: str | None, setup: RunSetup, *, predictions: bool = False
) -> tuple[PreparedWorkload, EpisodeRunner]:
    """Load and bind the trace, and the episode runner over it; with the runtime predictions
    when ``predictions`` (baselines that need them), the base policy orders by them or the
    feature set reads them (``RunSetup.needs_predictions``)."""
    work = prepare_workload(
        trace,
        cluster,
        n_jobs=setup.n_jobs,
        seed=setup.seed,
        estimates=setup.estimates,
        target_load=setup.target_load,
        load_definition=setup.load_definition,
        predictions=predictions or setup.needs_predictions,
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


def trained_estimates(info: TrainingInfo) -> str:
    """The estimate model the card was trained with (``noisy``, the trainer's default, for a card
    written before cards recorded it): evaluating or gating under other information than training
    had is a different question, asked explicitly (``--estimates``, ``HYLO_GATE_ESTIMATES``)."""
    recorded = info.extra.get("estimates")
    return recorded if isinstance(recorded, str) else "noisy"


def expected_schema(card: ModelCard, source: str | Path | None = None) -> FeatureSchema:
    """This code's feature schema for the feature set and sampling rule the card was trained with
    (a card that records no set: ``classic``, every card before sets existed).

    A set this code does not know, or features it cannot compute in the card's set, raise a
    one-line ``SchemaMismatchError`` naming the card (``source``, else "the checkpoint card") and
    the features, before any hash is compared."""
    where = str(source) if source is not None else "the checkpoint card"
    recorded: Any = card.training.extra.get("feature_schema")
    recorded = recorded if isinstance(recorded, dict) else {}
    name: Any = recorded.get("feature_set", DEFAULT_FEATURE_SET)
    named = _named_features(card, recorded)
    if not isinstance(name, str) or name not in FEATURE_SETS:
        raise SchemaMismatchError(
            f"{where}: trained on feature set {name!r}, which this code does not know (known: "
            f"{', '.join(FEATURE_SETS)}); its features: {', '.join(named)}"
        )
    pool = FEATURE_SETS[name]
    unknown = [f for f in named if f not in pool.job_features and f not in pool.cluster_features]
    if unknown:
        raise SchemaMismatchError(
            f"{where}: trained on features this code cannot compute in feature set {name!r}: "
            f"{', '.join(unknown)}"
        )
    sampling_data = recorded.get("sampling")
    try:
        sampling = SamplingConfig.model_validate(
            {**(sampling_data if isinstance(sampling_data, dict) else {}), "feature_set": name}
        )
    except ValidationError as err:
        first = err.errors()[0]
        raise SchemaMismatchError(
            f"{where}: its sampling rule is not one this code runs: {first['loc']}: {first['msg']}"
        ) from None
    return FeatureSchema.current(sampling=sampling)


def _named_features(card: ModelCard, recorded: dict[str, Any]) -> list[str]:
    """Every feature name the card mentions (its observation and critic, the recorded schema's
    pools and priority lists), once each, in order."""
    names: list[str] = [*card.features.obs, *card.features.critic]
    sampling = recorded.get("sampling")
    for part in (
        recorded.get("job_features"),
        recorded.get("cluster_features"),
        *((sampling.get("priority"), sampling.get("critic_priority")) if isinstance(sampling, dict) else ()),
    ):
        if isinstance(part, list):
            names += [str(f) for f in part]
    return list(dict.fromkeys(names))


def load_trained(directory: str | Path) -> tuple[ActorCritic, ModelCard, FeatureSchema]:
    """Load a checkpoint, refusing one whose feature schema this code does not produce."""
    card = read_card(directory)
    schema = expected_schema(card, Path(directory) / CARD_FILE)
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
    model.trained_sampling = schema.sampling  # the card's rule travels with its weights
    return model, card, schema
