"""Database settings: one URL, ``HYLO_DATABASE_URL``, and optionally its password from a file.

Why a URL: SQLAlchemy URLs already carry driver, host, credentials and options; the embedded
default is a SQLite file through aiosqlite, deployments point it at PostgreSQL through asyncpg
(``postgresql+asyncpg://user@host/db``). Why a password file (``HYLO_DATABASE_PASSWORD_FILE``): a
secret in an environment variable is visible to anything that can read the process' environment
(``docker inspect``, ``/proc/<pid>/environ``); compose and Kubernetes mount secrets as files. The
password is put into the URL here, once, and never printed (``safe_url``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from shared.config import HyloBaseSettings
from shared.store.urls import DatabaseUrlError, database_url


class StoreSettings(HyloBaseSettings):
    """Where decisions, outcomes and model versions are stored."""

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    database_url: str = Field(
        default="sqlite+aiosqlite:///hylo.db",
        description="a SQLite file path or a SQLAlchemy URL (sync drivers are mapped to aiosqlite/asyncpg)",
    )
    database_echo: bool = Field(default=False, description="log every SQL statement")
    database_password_file: Path | None = Field(
        default=None,
        description="file holding the database password (a mounted secret), put into database_url",
    )

    @field_validator("database_url")
    @classmethod
    def _async_url(cls, value: str) -> str:
        """A plain file path or a synchronous driver's URL, as the async URL the store opens (the
        same reading as every ``--database`` option: ``shared.store.urls``)."""
        try:
            return database_url(value)
        except DatabaseUrlError as err:
            raise ValueError(f"HYLO_DATABASE_URL: {err}") from None

    @model_validator(mode="after")
    def _password_from_file(self) -> StoreSettings:
        if self.database_password_file is None:
            return self
        try:
            password = self.database_password_file.read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ValueError(
                f"HYLO_DATABASE_PASSWORD_FILE={self.database_password_file}: {err.strerror}"
            ) from None
        try:
            url = make_url(self.database_url).set(password=password)
        except ArgumentError as err:
            raise ValueError(f"HYLO_DATABASE_URL: not a database URL ({err})") from None
        self.database_url = url.render_as_string(hide_password=False)
        return self


def safe_url(url: str) -> str:
    """``url`` with its password masked, for logs and messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<not a database URL>"


class MaintenanceSettings(HyloBaseSettings):
    """How the store keeps months of decision rows: partitions, retention, roll-ups.

    Why settings and not constants: a busy cluster writes billions of decision rows a month (one per
    pending job per decision), a small one thousands; the partition span and how long raw rows are
    kept are the deployment's trade-off between disk and the detail analysts can still read. Applied
    by ``python -m shared.store.maintain`` (``shared.store.maintain``) and, for the span, by migration
    0007 when it first partitions ``decisions``. Times are on the cluster clock (``snapshot_time``),
    and "now" is the newest decision stored, so a store that stops receiving data loses nothing.
    """

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    decision_partition_days: int = Field(
        default=7,
        ge=1,
        le=366,
        description="days of snapshot_time per PostgreSQL partition of decisions (whole days, from day 0)",
    )
    decision_partitions_ahead: int = Field(
        default=2,
        ge=0,
        le=100,
        description="partitions created ahead of the newest decision (rows beyond go to the default one)",
    )
    decision_retention_days: float | None = Field(
        default=None,
        gt=0,
        description="raw decision rows older than this (before the newest) are rolled up, then dropped; "
        "unset keeps them",
    )
    rollup_retention_days: float | None = Field(
        default=None,
        gt=0,
        description="decision_rollups rows older than this (before the newest decision) are deleted; unset "
        "keeps them",
    )
