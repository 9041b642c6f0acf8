"""Prioritizer settings: the decision deadline and the model to start with."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from shared.config import HyloBaseSettings


class PrioritizerSettings(HyloBaseSettings):
    """``HYLO_DEADLINE_MS``, ``HYLO_SHADOW_DEADLINE_MS``, ``HYLO_MODEL_PATH``, ``HYLO_MODEL_TRUST``,
    ``HYLO_MODEL_CONFIRM_S``, ``HYLO_MODEL_CANDIDATES`` (and ``HYLO_MODEL_SIGNING_KEY``,
    ``shared.bus.signing``)."""

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
    model_trust: Literal["registry", "signature"] = Field(
        default="registry",
        description="what makes a model announcement believable: 'registry' (the prioritizer reads the "
        "registry in HYLO_DATABASE_URL and adopts only what it says) or 'signature' (no database; "
        "HYLO_MODEL_SIGNING_KEY required). With a key set, signatures are required in both modes",
    )
    model_candidates: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="how many jobs the model ranks: the first K of the queue in its base policy's order "
        "(the rest follow in that order), so that a queue of 50,000 costs the model what K jobs "
        "cost; 0 = the model's own window (its card's max_queue, what it was trained with)",
    )
    model_confirm_s: float = Field(
        default=5.0,
        gt=0,
        description="registry mode: how long an announcement the registry does not confirm yet is "
        "re-checked (the registry commits just after announcing) before it is refused",
    )
