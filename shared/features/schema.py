"""The feature schema a model is trained on, and its stable hash.

Why: a checkpoint trained on one feature definition and fed another would run without error and
make meaningless decisions. The checkpoint card records ``FeatureSchema.to_dict()`` and
``hash``; loading compares them with the running code's schema (``require_same``) and fails with
the list of differences. The hash covers everything that changes what a model's input columns
mean: the formula version, the ordered feature names, the normalization constants and the
sampling rule. The sampler's ``explore`` temperature is left out: it only randomizes selections
during training and does not change what a column means.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shared.features.catalog import CLUSTER_FEATURES, FEATURES_VERSION, JOB_FEATURES, FeatureConfig
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
        """The schema of this code with the given (default) constants and sampling rule."""
        return cls(
            FEATURES_VERSION,
            JOB_FEATURES,
            CLUSTER_FEATURES,
            config or FeatureConfig(),
            sampling or SamplingConfig(),
        )

    @property
    def fixed_observation(self) -> tuple[str, ...]:
        """The observation names in ``fixed`` mode (the ablation), in column order."""
        return FeatureSampler(self.sampling).fixed().observation_names

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (for a checkpoint card)."""
        return {
            "version": self.version,
            "job_features": list(self.job_features),
            "cluster_features": list(self.cluster_features),
            "config": self.config.model_dump(mode="json"),
            "sampling": self.sampling.model_dump(mode="json", exclude={"explore"}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeatureSchema:
        return cls(
            version=int(data["version"]),
            job_features=tuple(data["job_features"]),
            cluster_features=tuple(data["cluster_features"]),
            config=FeatureConfig.model_validate(data["config"]),
            sampling=SamplingConfig.model_validate(data["sampling"]),
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
