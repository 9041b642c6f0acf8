"""Database settings: one URL, ``HYLO_DATABASE_URL``.

Why a URL only: SQLAlchemy URLs already carry driver, host, credentials and options; the embedded
default is a SQLite file through aiosqlite, deployments point it at PostgreSQL through asyncpg
(``postgresql+asyncpg://user:pass@host/db``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.config import HyloBaseSettings


class StoreSettings(HyloBaseSettings):
    """Where decisions, outcomes and model versions are stored."""

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    database_url: str = Field(default="sqlite+aiosqlite:///hylo.db", description="SQLAlchemy async URL")
    database_echo: bool = Field(default=False, description="log every SQL statement")
