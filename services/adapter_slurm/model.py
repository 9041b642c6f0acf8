"""What the adapter reads from Slurm, independent of the layout it came in.

Why an intermediate model (not QueueSnapshot directly): three parsers (JSON v0.0.38, JSON
data_parser, parsable text) produce it and one mapping (``snapshot.py``) turns it into Hylo's
messages, so layout quirks stay in the parsers and Hylo's rules (groups, defaults, exclusions) in one
place. It also keeps what the snapshot does not carry but the adapter needs to act: the current
Slurm priority (to skip unchanged updates) and terminal states with times (outcomes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Layout = Literal["v0.0.38", "data_parser", "text"]

PENDING_STATES = frozenset({"PENDING"})
RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT"})
#: terminal job states -> JobOutcome.status
TERMINAL_STATES: dict[str, Literal["completed", "failed", "cancelled", "timeout"]] = {
    "COMPLETED": "completed",
    "FAILED": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "timeout",
    "TIMEOUT": "timeout",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "REVOKED": "cancelled",
}


@dataclass(frozen=True)
class SlurmJob:
    """One job (or array task) as squeue shows it. Times are epoch seconds; None = not known."""

    job_id: str
    state: str
    priority: int | None
    partition: str
    qos: str
    user: str
    submit_s: float
    start_s: float | None
    end_s: float | None
    time_limit_s: float | None
    cpus: int | None
    mem_mib: int | None
    node_count: int
    nodes: tuple[str, ...]
    gpus: int
    gpu_types: tuple[str, ...]
    reason: str = ""

    @property
    def held(self) -> bool:
        """Priority 0 is Slurm's hold: such a job must not be given a priority (that releases it)."""
        return self.priority == 0 or self.reason.startswith("JobHeld")


@dataclass(frozen=True)
class SlurmNode:
    """One node: capacity and allocation, GPUs from GRES and GRES used."""

    name: str
    states: tuple[str, ...]
    cpus: int
    alloc_cpus: int
    mem_mib: int
    alloc_mem_mib: int
    gpus: int
    gpus_used: int
    gpu_types: tuple[str, ...]
    features: tuple[str, ...]
    partitions: tuple[str, ...]


@dataclass(frozen=True)
class SlurmQueue:
    jobs: tuple[SlurmJob, ...]
    layout: Layout


@dataclass(frozen=True)
class SlurmNodes:
    nodes: tuple[SlurmNode, ...]
    layout: Layout
