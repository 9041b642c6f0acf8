"""Settings of the simulated cluster (``HYLO_SIM_*``, plus the shared ``HYLO_CLUSTERS``,
``HYLO_BASE_POLICY`` and the scheduler's rules), read like every service's from the environment over
``hylo.toml``.

Why the shared keys: the simulated cluster must be described to the pipeline with the spec the
services use for it (``HYLO_CLUSTERS`` maps the cluster name to it), and must fall back to the
policy the prioritizer falls back to (``HYLO_BASE_POLICY``); reading the same keys keeps the two
sides from disagreeing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from services.adapter_sim.snapshot import DEFAULT_MAX_PENDING
from shared.domain.load import DEFAULT_LOAD_DEFINITION, LoadDefinition
from shared.policies import POLICY_NAMES
from shared.schemas import validate_cluster_name
from shared.sim.evaluate import DEFAULT_CLUSTER, EMBEDDED
from shared.sim.scheduler_settings import SchedulerSettings


class AdapterSimSettings(SchedulerSettings):
    """What to replay, as which cluster, and how long to wait for the pipeline; the scheduler's rules
    (``HYLO_PLACEMENT``, ``HYLO_BACKFILL``, ...) are the placer's (``SchedulerSettings``): the cluster
    compares the pipeline's schedule with the simulator's under them, and uses them when no decision
    comes."""

    sim_cluster: str = Field(default="embedded", description="cluster name on the bus (subject token)")
    clusters: dict[str, str] = Field(
        default_factory=lambda: {"embedded": "embedded"},
        description="cluster name -> spec preset or file, as the services read it (HYLO_CLUSTERS)",
    )
    sim_trace: str | None = Field(
        default=None, description="trace name or path; default: the embedded workload"
    )
    sim_spec: str | None = Field(
        default=None, description="cluster spec; default: HYLO_CLUSTERS[sim_cluster], else the trace's"
    )
    sim_jobs: int = Field(
        default=1500, ge=1, description="jobs of the embedded workload, or the first jobs of a trace"
    )
    sim_seed: int = Field(default=0, ge=0)
    sim_load: float | None = Field(
        default=None,
        gt=0,
        description="rescale arrivals to this offered load (the utilization over the arrival span if "
        "every job started on arrival; shared.domain.load)",
    )
    sim_load_definition: LoadDefinition = Field(
        default=DEFAULT_LOAD_DEFINITION,
        description="what sim_load means: in-span, or capped (the definition before issue 18)",
    )
    sim_estimates: Literal["noisy", "history", "oracle", "trace"] = "noisy"
    base_policy: str = Field(default="fcfs", description="order of a cycle without a decision in time")
    sim_decision_timeout_s: float = Field(default=10.0, gt=0, description="lockstep wait per cycle")
    sim_mode: Literal["lockstep", "accelerated"] = Field(
        default="lockstep", description="lockstep: wait for every decision; accelerated: never wait"
    )
    sim_speedup: float = Field(
        default=3600.0, gt=0, description="accelerated mode: simulated seconds per wall-clock second"
    )
    sim_give_up_after: int = Field(
        default=5, ge=0, description="cycles in a row without a decision before the run fails (0 = never)"
    )
    sim_max_pending: int = Field(
        default=DEFAULT_MAX_PENDING, ge=1, description="pending jobs per snapshot (oldest first)"
    )
    sim_job_id_prefix: str = Field(
        default="", max_length=32, description="prepended to job ids (replaying a trace twice into one store)"
    )

    @field_validator("sim_cluster")
    @classmethod
    def _cluster_name(cls, value: str) -> str:
        return validate_cluster_name(value)

    @field_validator("base_policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown base policy {value!r}; choose from {', '.join(POLICY_NAMES)}")
        return value

    def spec_source(self) -> str:
        """The cluster spec (preset name or file) the simulated cluster runs on."""
        if self.sim_spec is not None:
            return self.sim_spec
        if self.sim_cluster in self.clusters:
            return self.clusters[self.sim_cluster]
        if self.sim_trace is None or self.sim_trace == EMBEDDED:
            return EMBEDDED
        found = DEFAULT_CLUSTER.get(self.sim_trace)
        if found is None:
            raise ValueError(
                f"trace {self.sim_trace!r} has no default cluster: set HYLO_SIM_SPEC or list cluster "
                f"{self.sim_cluster!r} in HYLO_CLUSTERS"
            )
        return found
