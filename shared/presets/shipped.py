"""Models shipped inside the package: the prioritizer ``hylo run`` uses when not told otherwise.

Why ship one: without a model the pipeline's prioritizer falls back to its base policy, so the main
command showed the plumbing and never the product. The shipped model is small (a few tens of kB),
trained on the embedded workload (``docs/results/shipped-model.md`` has the command and its
held-out numbers against every base policy), and only offered for that workload on the embedded
cluster, the only one it was trained for.

Why the card's sha256 is pinned here: the card pins the weights (``weights_sha256``, checked when
the checkpoint loads), and this module pins the card, so an installed copy that was edited or
damaged is refused by name instead of deciding a run's priorities (``verified_card``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MODELS_DIR", "SHIPPED", "ShippedModel", "ShippedModelError", "shipped_for", "verified_card"]

MODELS_DIR = Path(__file__).resolve().parent / "models"
CARD_FILE = "card.json"


class ShippedModelError(Exception):
    """A shipped model that is missing or is not the one Hylo was released with."""


@dataclass(frozen=True)
class ShippedModel:
    """One shipped checkpoint: its folder under ``models/``, the workload it was trained for, and
    the sha256 of its ``card.json``."""

    name: str
    cluster: str
    card_sha256: str
    summary: str

    @property
    def folder(self) -> Path:
        return MODELS_DIR / self.name


SHIPPED: dict[str, ShippedModel] = {
    "embedded": ShippedModel(
        name="embedded",
        cluster="embedded",
        card_sha256="6cb99c0cb627f83ada321c93cc9d46d215d7d2fbd72c371808baed10c2bf60c8",
        summary="PPO over SJF (a residual policy: base_prior), trained on the embedded workload "
        "(docs/results/shipped-model.md)",
    ),
}


def shipped_for(cluster: str) -> ShippedModel | None:
    """The model shipped for the workload on preset ``cluster`` (only ``embedded`` has one)."""
    return SHIPPED.get(cluster)


def verified_card(model: ShippedModel) -> Path:
    """``model``'s ``card.json``, after checking its sha256 against the pinned one."""
    card = model.folder / CARD_FILE
    if not card.is_file():
        raise ShippedModelError(
            f"the shipped model {model.name!r} is missing ({card} does not exist); reinstall Hylo"
        )
    digest = hashlib.sha256(card.read_bytes()).hexdigest()
    if digest != model.card_sha256:
        raise ShippedModelError(
            f"the shipped model {model.name!r} is not the one Hylo was released with: {card} has sha256 "
            f"{digest[:12]}..., expected {model.card_sha256[:12]}...; reinstall Hylo"
        )
    return card
