"""Simulator settings, and the paper's setting as a named configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

BackfillMode = Literal["easy", "greedy", "none"]


class SimConfig(BaseModel):
    """How the simulated scheduler behaves.

    - ``backfill="easy"`` (default): jobs start in priority order; the first job that cannot start
      gets a reservation at the earliest time it fits, computed from the running jobs' *estimated*
      ends, and later jobs start only if they do not delay it. One reservation per pool of node
      groups (``max_reservations=0``), so a job blocked on one GPU type never stalls another type;
      ``max_reservations=1`` is textbook EASY with a single reservation.
    - ``backfill="greedy"``: start every job that fits, in priority order, without reservations.
    - ``backfill="none"``: strict priority order; the first job that does not fit blocks the whole
      queue (the RLTune paper's committed head of line).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backfill: BackfillMode = "easy"
    max_reservations: int = Field(default=0, ge=0, description="0 = one per disjoint pool")
    placement: str = Field(default="best-fit", description="first-fit | best-fit | cp-sat")
    cpsat_k: int = Field(default=16, ge=1, description="cp-sat: jobs of the ranking placed together")
    cpsat_deterministic_time: float = Field(
        default=0.003, gt=0, description="cp-sat: solver work limit per solve (deterministic units)"
    )
    cpsat_type_reserve: bool = Field(
        default=True,
        description="cp-sat: price node groups by the queue's demand for them (tier t); "
        "False = the five-tier model",
    )
    cpsat_demand_window: int = Field(
        default=256,
        ge=0,
        description="cp-sat tier t: the last N arrivals add to the queue's demand per group (0 = queue only)",
    )
    cpsat_reservations: bool = Field(
        default=True,
        description="cp-sat: solve the rest of the batch again under each new EASY reservation's "
        "caps; False = caps only checked afterwards (overridden decisions go to best-fit)",
    )
    oracle_runtimes: bool = Field(
        default=False, description="scheduler sees true runtimes instead of estimates (paper setting)"
    )
    node_slack: int = Field(default=0, ge=0, description="extra nodes a gang may span beyond the minimum")

    @classmethod
    def paper(cls) -> SimConfig:
        """The RLTune code's setting: committed head, no backfill, oracle runtimes, first-fit."""
        return cls(backfill="none", placement="first-fit", oracle_runtimes=True)
