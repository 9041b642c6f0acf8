"""The feature schema a model is trained on, and its stable hash.

Why: a checkpoint trained on one feature definition and fed another would run without error and
make meaningless decisions. The checkpoint card records ``FeatureSchema.to_dict()`` and
``hash``; loading compares them with the running code's schema (``require_same``) and fails with
the list of differences. The hash covers everything that changes what a model's input columns
mean: the formula version, the ordered feature names, the normalization constants and the
sampling rule. The sampler's ``explore`` temperature is left out: it only randomizes selections
during training and does not change what a column means.

Feature sets (``shared.features.catalog.FEATURE_SETS``): the schema records its set as a top-level
``feature_set`` key only when it is not ``classic``, and the normalization constants only the
prediction features read (``PREDICTION_CONSTANTS``) only for a set that has them. So a classic
schema's record, and its hash, is byte for byte what it was before sets existed (every shipped
checkpoint keeps loading), and a record without the key is a classic one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shared.features.catalog import (
    DEFAULT_FEATURE_SET,
    FEATURES_VERSION,
    PREDICTION_CONSTANTS,
    FeatureConfig,
    FeatureSet,
)
from shared.features.sampling import FeatureSampler, SamplingConfig

__all__ = ["FeatureSchema", "FeatureSchemaMismatch"]


class FeatureSchemaMismatch(ValueError):
    """A model was trained on different features than the ones this code computes."""


@dataclass(frozen=True)
class FeatureSchema:
    """Ordered feature names plus everything that fixes their meaning."""

    version: int
    job_features: tuple[str, ...]
    cluster_features: tuple[str, ...]
    config: FeatureConfig
    sampling: SamplingConfig

    @classmethod
    def current(
        cls, config: FeatureConfig | None = None, sampling: SamplingConfig | None = None
    ) -> FeatureSchema:
        """The schema of this code with the given (default) constants and sampling rule; the
        feature set is the sampling rule's (``SamplingConfig.feature_set``, classic by default)."""
        sampling = sampling or SamplingConfig()
        pool = sampling.pool
        return cls(
            FEATURES_VERSION,
            pool.job_features,
            pool.cluster_features,
            config or FeatureConfig(),
            sampling,
        )

    @classmethod
    def of_set(cls, name: str, config: FeatureConfig | None = None) -> FeatureSchema:
        """The schema of feature set ``name`` with its default sampling rule."""
        return cls.current(config, SamplingConfig(feature_set=name))

    @property
    def feature_set(self) -> str:
        """The name of the schema's feature set."""
        return self.sampling.feature_set

    @property
    def pool(self) -> FeatureSet:
        return self.sampling.pool

    @property
    def fixed_observation(self) -> tuple[str, ...]:
        """The observation names in ``fixed`` mode (the ablation), in column order."""
        return FeatureSampler(self.sampling).fixed().observation_names

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (for a checkpoint card): classic's exactly as before sets
        existed (no ``feature_set`` key, no prediction constants)."""
        name = self.feature_set
        unread = () if self.pool.reads_predictions else PREDICTION_CONSTANTS
        out: dict[str, Any] = {
            "version": self.version,
            "job_features": list(self.job_features),
            "cluster_features": list(self.cluster_features),
            "config": self.config.model_dump(mode="json", exclude=set(unread)),
            "sampling": self.sampling.model_dump(mode="json", exclude={"explore", "feature_set"}),
        }
        if name != DEFAULT_FEATURE_SET:
            out["feature_set"] = name
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureSchema:
        """The schema a ``to_dict`` record describes (no ``feature_set`` key: classic). The names
        are taken as recorded, so a record this code cannot compute still compares (and differs)."""
        name = data.get("feature_set", DEFAULT_FEATURE_SET)
        return cls(
            version=int(data["version"]),
            job_features=tuple(data["job_features"]),
            cluster_features=tuple(data["cluster_features"]),
            config=FeatureConfig.model_validate(data["config"]),
            sampling=SamplingConfig.model_validate({**data["sampling"], "feature_set": name}),
        )

    @property
    def hash(self) -> str:
        """sha256 (hex) of the canonical JSON of ``to_dict()``: stable across runs and machines."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def require_same(self, other: FeatureSchema) -> None:
        """Raise ``FeatureSchemaMismatch`` naming every difference, unless the hashes agree."""
        if self.hash == other.hash:
            return
        mine, theirs = self.to_dict(), other.to_dict()
        diffs = [
            f"{key}: {mine[key]!r} != {theirs[key]!r}" for key in sorted(mine) if mine[key] != theirs.get(key)
        ]
        raise FeatureSchemaMismatch(
            f"feature schema {self.hash[:12]} differs from {other.hash[:12]}: " + "; ".join(diffs)
        )
