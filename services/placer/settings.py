"""Placer settings: which placement strategy decides nodes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shared.sim.scheduler_settings import SchedulerSettings


class PlacerServiceSettings(SchedulerSettings):
    """``HYLO_PLACER_ROLE``, ``HYLO_SNAPSHOT_CACHE``, ``HYLO_CPSAT_ALWAYS_SOLVE``, ``HYLO_RECORDER_NICE``,
    and the scheduler's rules (``SchedulerSettings``: ``HYLO_PLACEMENT``, ``HYLO_BACKFILL``, ...)."""

    placer_role: Literal["all", "decide", "record"] = Field(
        default="all",
        description="decide: only PriorityVector -> PlacementDecision; record: only the recorder "
        "consumers (decisions, outcomes, model versions); all: both in one process. Splitting them "
        "keeps 1,024-row decision writes from competing with placement for this process's GIL",
    )
    recorder_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="how much a record-role replica (HYLO_PLACER_ROLE=record) raises its own nice value "
        "at start (0: not at all): its decision writes are off the decision path and cost more CPU "
        "than the path, so they take only the cores the pipeline leaves idle (``services.niceness``); "
        "a replica that also decides (role all) keeps its priority",
    )
    snapshot_cache: int = Field(
        default=4,
        ge=1,
        le=64,
        description="recent snapshots kept in memory per cluster (a deciding placer receives every "
        "snapshot as it is published; older ones are read from the snapshots stream)",
    )
    placer_decode_ahead: Literal["on", "idle", "off"] = Field(
        default="idle",
        description="decode snapshots and matrices as they are published, while the prioritizer works: "
        "on: always; idle: only while this replica has no vector in hand (what waits is decoded when "
        "a vector names it); off: receive nothing ahead, read a vector's snapshot from the stream. "
        "Every replica receives every message, so with several replicas (or a busy one) on decodes "
        "much that another replica uses or a newer message supersedes (bench/replica_scaling.py)",
    )
    cpsat_always_solve: bool = Field(
        default=False,
        description="solve the CP-SAT batch even when best-fit starts all of it on its fewest nodes "
        "(by default such a decision is best-fit's, status ALL_FIT: the solve could then only improve "
        "fragmentation and look-ahead, at 12-18 ms on a busy 1,213-node cluster)",
    )
