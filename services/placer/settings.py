"""Placer settings: which placement strategy decides nodes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.config import HyloBaseSettings


class PlacerServiceSettings(HyloBaseSettings):
    """``HYLO_PLACEMENT``."""

    placement: Literal["best-fit", "cp-sat"] = Field(
        default="cp-sat", description="CP-SAT over the top K jobs, or best-fit in priority order"
    )
