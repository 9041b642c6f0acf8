"""Feature sampling: which 8 observation and 5 critic features a decision uses.

The paper picks a small subset of its feature pool per decision, by cluster state; its public code
has no trace of the procedure (reference notes section 4.5). The rule here is explicit:

- every feature has a base *priority* (``SamplingConfig.priority``);
- the cluster state *emphasizes* some features, which are then taken first:
  high fragmentation (cluster-level ``fragmentation`` >= ``fragmentation_high``) emphasizes
  ``job_size`` (which jobs fit the scattered free GPUs matters most), low fragmentation emphasizes
  ``urgency`` (the cluster has room: serve the jobs that have waited longest relative to their
  length); when many queued jobs have several placements (a fraction >= ``multi_way_high`` of the
  queue has >= ``multi_ways`` usable nodes), ``num_ways`` is emphasized too;
- the observation is the emphasized features plus the highest-priority others, 8 in all; the
  critic's 5 come from the cluster-level pool the same way (``fragmentation`` emphasized when
  fragmentation is high, ``mean_urgency`` when it is low).

Selected features are returned in catalog order, so a column keeps its meaning whenever the same
features are chosen. ``mode="fixed"`` ignores the state (the top of the priority list: the
ablation). The rule is a pure function of the state; passing a seeded ``numpy`` generator with
``explore > 0`` randomizes the non-emphasized picks (Gumbel top-k over the priorities), still
reproducible from the seed.

The pool is the config's feature set (``SamplingConfig.feature_set``, ``catalog.FEATURE_SETS``),
which also brings its default ``n_observation`` and priority lists: the ``predicted`` set observes
12, its four prediction features ranked right after ``wait``, so its observation is the classic
one of the same state plus those four (docs/features.md, "Feature sets").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.features.catalog import (
    CLASSIC_CRITIC_PRIORITY,
    CLASSIC_PRIORITY,
    CLUSTER_FEATURES,
    DEFAULT_FEATURE_SET,
    FEATURE_SETS,
    JOB_FEATURES,
    FeatureSet,
    feature_set,
)
from shared.features.compute import FeatureValues
from shared.features.views import FloatArray

__all__ = ["FeatureSampler", "SamplingConfig", "SamplingState", "Selection"]

#: the classic set's priorities (``shared.features.catalog``), the defaults of ``SamplingConfig``
DEFAULT_PRIORITY: tuple[str, ...] = CLASSIC_PRIORITY
DEFAULT_CRITIC_PRIORITY: tuple[str, ...] = CLASSIC_CRITIC_PRIORITY


class SamplingConfig(BaseModel):
    """The sampling rule's parameters. Part of the feature schema (and its hash).

    ``feature_set`` names the pool the rule picks from (``shared.features.catalog.FEATURE_SETS``);
    ``n_observation``, ``priority`` and ``critic_priority`` default to that set's. The schema
    records the set beside the sampling rule, not inside it (``FeatureSchema.to_dict``), so the
    classic rule's record is what it was before sets existed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    feature_set: str = DEFAULT_FEATURE_SET
    mode: Literal["state", "fixed"] = "state"
    n_observation: int = Field(default=8, ge=1)
    n_critic: int = Field(default=5, ge=1)
    fragmentation_high: float = Field(default=0.5, ge=0, le=1)
    multi_way_high: float = Field(default=0.5, ge=0, le=1)
    multi_ways: int = Field(default=2, ge=1, description="usable nodes that count as several placements")
    explore: float = Field(default=0.0, ge=0, description="Gumbel temperature, used only with an rng")
    priority: tuple[str, ...] = DEFAULT_PRIORITY
    critic_priority: tuple[str, ...] = DEFAULT_CRITIC_PRIORITY

    @model_validator(mode="before")
    @classmethod
    def _set_defaults(cls, data: Any) -> Any:
        """A set other than classic brings its own defaults for what the caller leaves out."""
        if isinstance(data, dict):
            name = data.get("feature_set", DEFAULT_FEATURE_SET)
            pool = FEATURE_SETS.get(name) if isinstance(name, str) else None
            if pool is not None and pool.name != DEFAULT_FEATURE_SET:
                defaults = {
                    "n_observation": pool.n_observation,
                    "n_critic": pool.n_critic,
                    "priority": pool.priority,
                    "critic_priority": pool.critic_priority,
                }
                data = {**defaults, **data}
        return data

    @model_validator(mode="after")
    def _check(self) -> SamplingConfig:
        pool = feature_set(self.feature_set)  # UnknownFeatureSet (a ValueError) for a bad name
        if sorted(self.priority) != sorted(pool.job_features):
            raise ValueError(f"priority must list every job feature of the {pool.name} set exactly once")
        if sorted(self.critic_priority) != sorted(pool.cluster_features):
            raise ValueError("critic_priority must list every cluster feature exactly once")
        if self.n_observation > len(pool.job_features) or self.n_critic > len(pool.cluster_features):
            raise ValueError("cannot select more features than the pool holds")
        return self

    @property
    def pool(self) -> FeatureSet:
        """The feature set the rule picks from."""
        return feature_set(self.feature_set)


@dataclass(frozen=True)
class SamplingState:
    """The two state signals the rule reads."""

    fragmentation: float
    multi_way_fraction: float


@dataclass(frozen=True)
class Selection:
    """The features of one decision, as column indices in catalog order."""

    observation: tuple[int, ...]
    critic: tuple[int, ...]
    emphasized: tuple[str, ...] = ()
    #: the job and cluster features the indices refer to (the feature set's pool)
    job_pool: tuple[str, ...] = field(default=JOB_FEATURES, repr=False)
    cluster_pool: tuple[str, ...] = field(default=CLUSTER_FEATURES, repr=False)

    @property
    def observation_names(self) -> tuple[str, ...]:
        return tuple(self.job_pool[k] for k in self.observation)

    @property
    def critic_names(self) -> tuple[str, ...]:
        return tuple(self.cluster_pool[k] for k in self.critic)

    @property
    def observation_mask(self) -> npt.NDArray[np.bool_]:
        """Boolean mask over the whole job pool, for models that read the masked pool."""
        mask = np.zeros(len(self.job_pool), dtype=bool)
        mask[list(self.observation)] = True
        return mask

    def apply(self, values: FeatureValues) -> tuple[FloatArray, FloatArray]:
        """(observation [Q, n_observation], critic [n_critic]) of a decision."""
        return values.job[:, self.observation], values.cluster[list(self.critic)]


def _pick(
    pool: tuple[str, ...],
    priority: tuple[str, ...],
    emphasized: tuple[str, ...],
    n: int,
    noise: FloatArray | None,
) -> tuple[int, ...]:
    """Emphasized features first, then the best by priority (perturbed by noise), in pool order."""
    chosen = [f for f in emphasized if f in pool][:n]
    rest = [f for f in priority if f not in chosen]
    if noise is not None:
        score = -np.arange(len(rest), dtype=np.float64) + noise[: len(rest)]
        rest = [rest[k] for k in np.argsort(-score, kind="stable")]
    chosen += rest[: n - len(chosen)]
    index = {name: k for k, name in enumerate(pool)}
    return tuple(sorted(index[f] for f in chosen))


class FeatureSampler:
    """Chooses the features of each decision; deterministic given the state (and the rng)."""

    def __init__(self, config: SamplingConfig | None = None) -> None:
        self.config = config or SamplingConfig()
        self.pool = self.config.pool
        self._cache: dict[tuple[str, ...], Selection] = {}

    def state(self, values: FeatureValues) -> SamplingState:
        ways = values.ways
        multi = float((ways >= self.config.multi_ways).mean()) if len(ways) else 0.0
        return SamplingState(values.cluster_value("fragmentation"), multi)

    def emphasis(self, state: SamplingState) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(emphasized job features, emphasized cluster features) for a state."""
        cfg = self.config
        if cfg.mode == "fixed":
            return (), ()
        high = state.fragmentation >= cfg.fragmentation_high
        job: tuple[str, ...] = ("job_size",) if high else ("urgency",)
        if state.multi_way_fraction >= cfg.multi_way_high:
            job += ("num_ways",)
        return job, ("fragmentation",) if high else ("mean_urgency",)

    def fixed(self) -> Selection:
        """The state-independent selection (top of the priority lists): the ablation baseline."""
        return self._selection((), ())

    def select(self, values: FeatureValues, rng: np.random.Generator | None = None) -> Selection:
        """The selection for a decision's feature values."""
        return self.select_state(self.state(values), rng)

    def select_state(self, state: SamplingState, rng: np.random.Generator | None = None) -> Selection:
        """The selection for a decision's state signals (what ``select`` reads of the values):
        lets a featurizer choose the columns before computing them."""
        job, critic = self.emphasis(state)
        if rng is None or self.config.explore == 0 or self.config.mode == "fixed":
            return self._selection(job, critic)
        pool = self.pool
        noise = rng.gumbel(size=len(pool.job_features)) * self.config.explore
        cfg = self.config
        return Selection(
            observation=_pick(pool.job_features, cfg.priority, job, cfg.n_observation, noise),
            critic=_pick(pool.cluster_features, cfg.critic_priority, critic, cfg.n_critic, None),
            emphasized=job + critic,
            job_pool=pool.job_features,
            cluster_pool=pool.cluster_features,
        )

    def _selection(self, job: tuple[str, ...], critic: tuple[str, ...]) -> Selection:
        key = (*job, "|", *critic)
        sel = self._cache.get(key)
        if sel is None:
            cfg, pool = self.config, self.pool
            sel = Selection(
                observation=_pick(pool.job_features, cfg.priority, job, cfg.n_observation, None),
                critic=_pick(pool.cluster_features, cfg.critic_priority, critic, cfg.n_critic, None),
                emphasized=job + critic,
                job_pool=pool.job_features,
                cluster_pool=pool.cluster_features,
            )
            self._cache[key] = sel
        return sel
