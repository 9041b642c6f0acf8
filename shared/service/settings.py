"""Settings common to every service process (``HYLO_*`` env vars over ``hylo.toml``).

Why the cluster map lives here: every stage needs the spec of the cluster a message belongs to
(capacities, node groups, GPU types), and all replicas of all services must agree on it. A
deployment sets ``HYLO_CLUSTERS='{"prod-a": "/etc/hylo/prod-a.toml"}'`` (cluster name -> preset name
or spec file) once for all of them.
"""

from __future__ import annotations

from pydantic import Field

from shared.config import HyloBaseSettings


class ServiceSettings(HyloBaseSettings):
    """Where a service listens, which clusters it serves, and how it stops."""

    http_host: str = Field(default="127.0.0.1", description="HTTP bind address (0.0.0.0 in containers)")
    http_port: int | None = Field(
        default=None, ge=0, le=65535, description="HTTP port; default: the service's own (8101-8106)"
    )
    clusters: dict[str, str] = Field(
        default_factory=lambda: {"embedded": "embedded"},
        description="cluster name -> cluster spec preset name or spec file path",
    )
    base_policy: str = Field(default="fcfs", description="policy used when no model decides")
    shutdown_grace_s: float = Field(
        default=10.0, gt=0, description="time allowed to finish in-flight messages on shutdown"
    )
    ready_timeout_s: float = Field(default=1.0, gt=0, description="per-check timeout of /readyz")
    replica: str | None = Field(
        default=None, description="replica name (default: host-pid); names per-replica consumers"
    )
    log_level: str = Field(default="INFO", description="Python logging level")
