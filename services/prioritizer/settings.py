"""Prioritizer settings: the decision deadline and the model to start with."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from shared.config import HyloBaseSettings


class PrioritizerSettings(HyloBaseSettings):
    """``HYLO_DEADLINE_MS``, ``HYLO_SHADOW_DEADLINE_MS``, ``HYLO_MODEL_PATH``."""

    deadline_ms: float = Field(
        default=50.0, gt=0, description="model inference budget; past it the base policy decides"
    )
    shadow_deadline_ms: float = Field(
        default=1000.0,
        gt=0,
        description="a shadow model's budget per matrix. Longer than the real one on purpose: the shadow "
        "is scored after the real model, one matrix at a time, on the same CPU, so its latency here says "
        "little about what it would deliver as the current model; this only bounds a runaway model",
    )
    model_path: Path | None = Field(
        default=None,
        description="checkpoint loaded at start-up; later versions arrive on the models subject",
    )
