"""Registry settings: which cluster a command acts on and who is acting (``HYLO_REGISTRY_*``).

Why a cluster setting: at most one model is current *per cluster*, and the announcement goes to that
cluster's models subject; a deployment that serves one cluster sets it once instead of passing
``--cluster`` to every ``hylo models`` command. The database and NATS come from the usual settings
(``HYLO_DATABASE_URL``, ``HYLO_NATS_URL``, ``HYLO_SUBJECT_ROOT``); the gate from ``HYLO_GATE_*``.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.config import HyloBaseSettings


class RegistrySettings(HyloBaseSettings):
    """Defaults of the ``hylo models`` commands."""

    model_config = SettingsConfigDict(env_prefix="HYLO_REGISTRY_", extra="ignore")

    cluster: str | None = Field(default=None, description="cluster whose models the commands manage")
    actor: str | None = Field(default=None, description="name recorded in the history (default: login)")
