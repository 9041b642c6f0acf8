"""Prioritizer settings: the decision deadline and the model to start with."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from shared.config import HyloBaseSettings


class PrioritizerSettings(HyloBaseSettings):
    """``HYLO_DEADLINE_MS``, ``HYLO_MODEL_PATH``."""

    deadline_ms: float = Field(
        default=50.0, gt=0, description="model inference budget; past it the base policy decides"
    )
    model_path: Path | None = Field(
        default=None,
        description="checkpoint loaded at start-up; later versions arrive on the models subject",
    )
