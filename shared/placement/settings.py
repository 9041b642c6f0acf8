"""Settings of the CP-SAT batch placer (pydantic, so a TOML/CLI layer can validate them as-is).

Every knob that changes a decision lives here, so a run is reproducible from its settings and seed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TierWeights(BaseModel):
    """Per-tier switches of the lexicographic objective (0 turns a tier off, for ablations).

    The dominance between tiers is computed from each tier's range at solve time (see
    ``docs/placement.md``), so a weight cannot reorder the tiers: a positive value only scales the
    tier's own coefficients. Priority respect (tier a) is a hard constraint and has no weight.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    work: int = Field(default=1, ge=0, le=1, description="(b) priority-weighted started work")
    locality: int = Field(default=1, ge=0, le=1, description="(c) fewest nodes per job")
    type_reserve: int = Field(
        default=1, ge=0, le=1, description="(t) cheapest node groups by the caller's group costs"
    )
    fragmentation: int = Field(default=1, ge=0, le=1, description="(d) nodes neither empty nor full")
    lookahead: int = Field(default=1, ge=0, le=1, description="(e) room kept for the next jobs")


class PlacerSettings(BaseModel):
    """What the CP-SAT placer solves and how long it may take."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(default=16, ge=1, le=256, description="jobs placed per solve (top of the ranking)")
    lookahead: int = Field(
        default=4, ge=0, le=64, description="jobs after the top K whose room the placement tries to keep"
    )
    time_limit_ms: float = Field(
        default=10.0, gt=0, description="wall-clock limit of one placement call (model build + solve)"
    )
    deterministic_time: float = Field(
        default=0.003,
        gt=0,
        description="CP-SAT deterministic work limit (its own units, ~seconds); the reproducible stop",
    )
    reproducible: bool = Field(
        default=False,
        description="ignore the wall-clock limit (a 1 s safety net only): results depend on inputs only",
    )
    node_slack: int = Field(
        default=0, ge=0, le=8, description="extra nodes a gang may span beyond ceil(gpus / gpus_per_node)"
    )
    classes_per_job: int = Field(
        default=4, ge=1, le=64, description="node classes each job may be placed on (best-fit order)"
    )
    slot_extra: int = Field(
        default=1, ge=0, le=64, description="nodes per class beyond those the best-fit warm start uses"
    )
    work_levels: int = Field(
        default=1000, ge=1, le=1_000_000, description="resolution of tier (b): its largest coefficient"
    )
    cost_levels: int = Field(
        default=100, ge=1, le=10_000, description="resolution of tier (t): its largest coefficient"
    )
    solve_when_all_fit: bool = Field(
        default=True,
        description="solve even when best-fit starts the whole batch on the fewest nodes (and no "
        "group costs are given); False returns best-fit's answer then (status ALL_FIT): the solve "
        "could only improve fragmentation (d) and look-ahead (e), at 10+ ms on a busy 1,213-node "
        "cluster",
    )
    seed: int = Field(default=0, ge=0, description="CP-SAT random_seed")
    strict_rank: bool = Field(
        default=False,
        description="tier (b) = 2^(K-1-rank) per started job: the started set is lexicographically "
        "best in rank order (job weights and runtimes ignored)",
    )
    weights: TierWeights = TierWeights()

    @model_validator(mode="after")
    def _strict_rank_fits(self) -> PlacerSettings:
        if self.strict_rank and self.k > 24:
            raise ValueError("strict_rank needs k <= 24 (its coefficients are powers of two)")
        return self
