"""The scheduler's rules as settings, shared by the placer service and the simulated cluster.

Why one class: the placer decides with the simulator's cycle under a ``SimConfig``, and the
simulated cluster (``services.adapter_sim``) compares the pipeline's schedule with the simulator's
and schedules by itself when no decision comes. Both read these keys (``HYLO_PLACEMENT``,
``HYLO_BACKFILL``, ``HYLO_MAX_RESERVATIONS``, ``HYLO_RESERVATION``), so they cannot disagree.

Why best-fit by default: it is ``SimConfig``'s default, so ``hylo run`` deploys the scheduler that
``hylo simulate`` and the trainer measure, decision for decision. Under ``cp-sat`` the placer's
solves have a wall-clock limit (the simulator's only a deterministic one) and price node groups by
the demand of the snapshot's queue (the simulator's also by the last arrivals that already
started), so a replay may differ from the simulator's schedule there.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from shared.config import HyloBaseSettings
from shared.sim.config import SimConfig

Placement = Literal["first-fit", "best-fit", "cp-sat"]


class SchedulerSettings(HyloBaseSettings):
    """``HYLO_PLACEMENT``, ``HYLO_BACKFILL``, ``HYLO_MAX_RESERVATIONS``, ``HYLO_RESERVATION``."""

    placement: Placement = Field(
        default="best-fit",
        description="best-fit (the simulator's default) or first-fit: that placer in priority order; "
        "cp-sat: CP-SAT over the top K startable jobs, best-fit for the rest",
    )
    backfill: Literal["easy", "greedy", "none"] = Field(
        default="easy", description="what happens behind a job that cannot start (SimConfig.backfill)"
    )
    max_reservations: int = Field(
        default=0, ge=0, description="EASY reservations per cycle; 0 = one per disjoint pool of node groups"
    )
    reservation: Literal["nodes", "count"] = Field(
        default="nodes", description="EASY: node-pinned reservations (Slurm-like) or textbook counted ones"
    )

    def sim_config(self, **fields: Any) -> SimConfig:
        """The ``SimConfig`` of these rules, with ``fields`` (e.g. ``oracle_runtimes``) on top."""
        return SimConfig(
            placement=self.placement,
            backfill=self.backfill,
            max_reservations=self.max_reservations,
            reservation=self.reservation,
            **fields,
        )
