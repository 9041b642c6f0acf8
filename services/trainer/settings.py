"""Trainer settings (``HYLO_TRAINER_*`` env vars, or the same names without the prefix in hylo.toml).

The database, NATS and the cluster map come from the shared settings (``HYLO_DATABASE_URL``,
``HYLO_NATS_URL``, ``HYLO_CLUSTERS``); the promotion gate's margin, CI and number of windows from
``HYLO_GATE_*`` (``shared.registry.GateSettings``): the trainer only points the gate at the
workload it trained on.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from shared.config import HyloBaseSettings


class TrainerSettings(HyloBaseSettings):
    """What a retraining run does and when it runs."""

    model_config = SettingsConfigDict(env_prefix="HYLO_TRAINER_", extra="ignore")

    cluster: str | None = Field(
        default=None, description="cluster to retrain for (default: the first of HYLO_CLUSTERS)"
    )
    out_dir: Path = Field(
        default=Path("hylo-out/trainer"),
        description="where each run writes its workload file and checkpoint (keep them: the registry "
        "points at the checkpoint)",
    )
    # -- when --------------------------------------------------------------------------------------
    interval_s: float = Field(default=0.0, ge=0, description="retrain every this many seconds (0: off)")
    drift_check_s: float = Field(
        default=0.0, ge=0, description="check the drift statistic every this many seconds (0: off)"
    )
    drift_threshold: float = Field(default=0.25, gt=0, description="PSI at which the workload has drifted")
    drift_recent_s: float = Field(
        default=86_400.0, gt=0, description="the recent window of the drift check (cluster-clock seconds)"
    )
    drift_min_jobs: int = Field(default=100, ge=1, description="fewer jobs than this in a window: no verdict")
    # -- the workload ------------------------------------------------------------------------------
    history_s: float | None = Field(
        default=None, gt=0, description="rebuild the jobs submitted in the last this many seconds (None: all)"
    )
    traces: list[str] = Field(
        default_factory=list, description="trace names or files mixed in before the recorded jobs"
    )
    gpu_types_by_partition: dict[str, list[str]] = Field(
        default_factory=dict, description="GPU types of a partition's jobs (the store keeps none per job)"
    )
    min_jobs: int = Field(default=200, ge=2, description="fewer recorded jobs than this: no retraining")
    holdout_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="newest share of the recorded jobs held out for the gate"
    )
    # -- training ----------------------------------------------------------------------------------
    metric: str = Field(default="wait", description="wait | jct | bsld | utilization")
    epochs: int = Field(default=10, ge=0, description="PPO fine-tuning epochs per run")
    windows_per_epoch: int = Field(default=8, ge=1)
    window_size: int = Field(default=128, ge=2)
    warmup: int = Field(
        default=2048,
        ge=0,
        description="jobs simulated before each window (training's and the gate's), so that a window "
        "starts with the backlog the recorded history had: with 64, the held-out windows of an 800-job "
        "`hylo run` started on a nearly idle cluster, nothing waited under any order, and the gate had "
        "nothing to measure (docs/trainer.md)",
    )
    imitation_epochs: int = Field(
        default=10, ge=0, description="imitation epochs when the cluster has no current model (0: off)"
    )
    imitation_windows: int = Field(
        default=128,
        ge=1,
        description="demonstration windows for the imitation; 128 was the fewest that reproduced FCFS on "
        "every seed on Philly validation windows at the default epochs (docs/results/trainer.md, 1a')",
    )
    workers: int = Field(default=1, ge=1, description="processes simulating episodes")
    seed: int = 0
    gate_windows: int = Field(default=10, ge=1, description="held-out windows the gate compares")

    @model_validator(mode="after")
    def _known_metric(self) -> TrainerSettings:
        if self.metric not in ("wait", "jct", "bsld", "utilization"):
            raise ValueError(f"metric: expected wait, jct, bsld or utilization, got {self.metric!r}")
        return self
