"""Settings of the Slurm adapter (``HYLO_SLURM_*``, plus the shared ``HYLO_CLUSTERS``).

Why every knob that touches Slurm is explicit here: the adapter writes priorities into a production
scheduler. Which partitions it may touch, which QOS it must leave alone (SLA-bound jobs), the
priority band it writes into and whether it writes at all (dry run) are operator decisions that
must be visible in one place, with safe defaults. The fail-safe's settings (``slurm_failsafe_*``)
are read by the adapter and by its watchdog (``failsafe.py``) alike, so one ``hylo.toml`` or one set
of ``HYLO_*`` variables configures both.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from shared.config import HyloBaseSettings
from shared.schemas import validate_cluster_name
from shared.schemas.limits import DEFAULT_MAX_JOBS

#: Slurm's largest job priority (uint32, minus the INFINITE / NO_VAL markers)
SLURM_MAX_PRIORITY = 4_294_967_293


def events_address(value: str) -> tuple[str, int]:
    """``"127.0.0.1:6897"`` -> (host, port). An IPv4 address, as the hooks send to one (they do no
    name lookups inside slurmctld); ``0.0.0.0`` listens on every interface."""
    host, sep, port = value.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        number = int(port)
    except ValueError:
        number = 0
    if not sep or not 0 < number < 65536:
        raise ValueError(f"slurm_events_listen {value!r}: expected IPv4:port, e.g. 127.0.0.1:6897")
    return host, number


class SlurmAdapterSettings(HyloBaseSettings):
    """How to reach Slurm, what to manage, and how often to look."""

    slurm_cluster: str = Field(default="slurm", description="cluster name on the bus (subject token)")
    clusters: dict[str, str] = Field(
        default_factory=lambda: {"slurm": "slurm-testbed"},
        description="cluster name -> spec preset or file, as every service reads it (HYLO_CLUSTERS)",
    )
    slurm_conf: Path | None = Field(
        default=None, description="slurm.conf for the client commands (exported as SLURM_CONF)"
    )
    slurm_bin_dir: Path | None = Field(
        default=None, description="folder holding squeue, sinfo, scontrol, sacct; default: PATH"
    )
    slurm_command_timeout_s: float = Field(default=20.0, gt=0, le=600, description="per command")
    slurm_output: Literal["auto", "json", "text"] = Field(
        default="auto", description="auto: --json, falling back to parsable text when JSON fails"
    )
    slurm_poll_interval_s: float = Field(default=30.0, gt=0, description="seconds between polls")
    slurm_min_poll_gap_s: float = Field(
        default=1.0,
        ge=0,
        description="least time between two polls, also when a decision asks for an early one "
        "(without it every applied decision triggered a poll and the next decision: ~8 polls/s)",
    )
    slurm_events_listen: str | None = Field(
        default=None,
        description="push events: the UDP address (IPv4:port) where the adapter receives the "
        "datagrams of slurmctld's hooks (job_submit.lua, EpilogSlurmctld) and polls at once; "
        "none = polling only (docs/slurm-adapter.md, 'Push events')",
    )
    slurm_event_min_gap_s: float = Field(
        default=0.05,
        ge=0,
        le=10,
        description="least time between two polls that push events trigger (a burst of submissions "
        "is coalesced into polls this far apart); also the first follow-up's delay",
    )
    slurm_retry_max_s: float = Field(
        default=60.0, gt=0, description="longest wait between retries while slurmctld is unreachable"
    )
    slurm_partitions: tuple[str, ...] = Field(
        default=(), description="partitions whose jobs Hylo manages; empty = every partition"
    )
    slurm_excluded_qos: tuple[str, ...] = Field(
        default=(), description="QOS left to Slurm (SLA-bound jobs): never re-prioritized or moved"
    )
    slurm_priority_top: int = Field(
        default=1_000_000,
        ge=2,
        le=SLURM_MAX_PRIORITY,
        description="priority of rank 0; everything above it is room for jobs Hylo does not manage",
    )
    slurm_priority_bottom: int = Field(
        default=1_000, ge=1, description="lowest priority Hylo writes (0 would hold the job)"
    )
    slurm_priority_step: int = Field(default=1, ge=1, description="gap between consecutive ranks")
    slurm_dry_run: bool = Field(default=False, description="log the scontrol updates instead of running them")
    slurm_update_workers: int = Field(
        default=4,
        ge=1,
        le=32,
        description="scontrol updates of one decision run this many at a time (1: one after another); "
        "slurmctld serves them in its own threads, so a burst's decision lands sooner",
    )
    slurm_first_priorities_first: bool = Field(
        default=True,
        description="send the updates of jobs that have no Hylo priority yet (new jobs) before the "
        "re-ranked ones, so a new job's priority lands first",
    )
    slurm_parallel_reads: bool = Field(
        default=True, description="run a poll's squeue and sinfo at the same time instead of in turn"
    )
    slurm_timing_log: bool = Field(
        default=False,
        description="log when each hop from a push event to scontrol happened (profiling the path to "
        "a new job's priority; services/adapter_slurm/timing.py)",
    )
    slurm_apply_nodes: bool = Field(
        default=False, description="also send the placer's node choice (ReqNodeList) for pending jobs"
    )
    slurm_node_groups: dict[str, str] = Field(
        default_factory=dict,
        description="node name -> spec node group; overrides features and GRES-type matching",
    )
    slurm_default_runtime_s: float = Field(
        default=86_400.0, gt=0, description="runtime estimate of a job with no (or an infinite) time limit"
    )
    slurm_max_pending: int = Field(
        default=DEFAULT_MAX_JOBS,
        ge=1,
        le=1_000_000,
        description="pending jobs per snapshot (oldest first); the default is HYLO_MAX_JOBS' default, "
        "what the pipeline accepts (a snapshot above the inline limit travels through the object "
        "store, shared.bus.large)",
    )
    slurm_accounting: Literal["auto", "sacct", "none"] = Field(
        default="auto",
        description="jobs that left squeue unseen: auto = sacct, else sacct -c (completion file); none",
    )
    slurm_restore_on_stop: bool = Field(
        default=False,
        description="on shutdown hand the jobs Hylo prioritized back to Slurm at once (scontrol release)",
    )
    slurm_failsafe_after_s: float = Field(
        default=300.0,
        ge=0,
        description="fail-safe: after this long without an applied decision, the watchdog "
        "(python -m services.adapter_slurm.failsafe) hands Hylo's priorities back to Slurm; "
        "0 turns the lease off",
    )
    slurm_failsafe_every_s: float = Field(
        default=10.0, gt=0, le=3600, description="seconds between two checks of the fail-safe watchdog"
    )
    slurm_failsafe_lease: Path | None = Field(
        default=None,
        description="the lease file the adapter renews and the watchdog reads (one per cluster); "
        "default $XDG_STATE_HOME/hylo/slurm-<cluster>.lease.json (~/.local/state/hylo/...)",
    )

    @field_validator("slurm_cluster")
    @classmethod
    def _cluster_name(cls, value: str) -> str:
        return validate_cluster_name(value)

    @field_validator("slurm_events_listen")
    @classmethod
    def _events_listen(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        events_address(value)
        return value

    @model_validator(mode="after")
    def _band(self) -> SlurmAdapterSettings:
        if self.slurm_priority_bottom >= self.slurm_priority_top:
            raise ValueError(
                f"slurm_priority_bottom ({self.slurm_priority_bottom}) must be below "
                f"slurm_priority_top ({self.slurm_priority_top})"
            )
        return self

    @model_validator(mode="after")
    def _failsafe(self) -> SlurmAdapterSettings:
        # a healthy Hylo decides about once per poll: a shorter limit would hand jobs back under it
        after, poll = self.slurm_failsafe_after_s, self.slurm_poll_interval_s
        if 0 < after < 2 * poll:
            raise ValueError(
                f"slurm_failsafe_after_s ({after:g}) must be 0 (off) or at least twice "
                f"slurm_poll_interval_s ({poll:g}): Hylo decides about once per poll"
            )
        return self

    @property
    def failsafe_enabled(self) -> bool:
        return self.slurm_failsafe_after_s > 0

    def failsafe_lease_path(self) -> Path:
        """The lease file: ``HYLO_SLURM_FAILSAFE_LEASE``, else one per cluster in the user's state dir."""
        if self.slurm_failsafe_lease is not None:
            return self.slurm_failsafe_lease
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "hylo" / f"slurm-{self.slurm_cluster}.lease.json"

    def events_address(self) -> tuple[str, int] | None:
        """(host, port) of ``slurm_events_listen``; None when push events are off."""
        return None if self.slurm_events_listen is None else events_address(self.slurm_events_listen)

    def spec_source(self) -> str:
        """The cluster spec (preset or file) of ``slurm_cluster``."""
        source = self.clusters.get(self.slurm_cluster)
        if source is None:
            raise ValueError(
                f"HYLO_CLUSTERS has no entry for HYLO_SLURM_CLUSTER={self.slurm_cluster!r} "
                f"(it lists {sorted(self.clusters)}): expected cluster name -> spec preset or file"
            )
        return source
