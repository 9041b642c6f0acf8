"""Hylo settings: one place per setting, read from env vars (``HYLO_*``) and a TOML file.

The file is ``hylo.toml`` in the working directory, or the path in ``HYLO_CONFIG``. Environment
variables win over the file, which wins over the defaults below.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_traces_dir() -> Path:
    # Development checkouts sit beside ../shared/traces; a user's machine has none, which is fine:
    # the embedded default runs on the synthetic workload generator.
    return (PROJECT_ROOT / ".." / "shared" / "traces").resolve()


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hylo"


class HyloBaseSettings(BaseSettings):
    """Base of every Hylo settings class: ``HYLO_*`` environment variables over ``hylo.toml``.

    Why one base: a deployment writes one file (flat keys, the field names without the prefix, e.g.
    ``nats_url = "nats://..."``) that the bus, the store, the services and the CLI all read, and
    overrides any key with an environment variable, so each setting lives in one place.
    """

    model_config = SettingsConfigDict(env_prefix="HYLO_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = Path(os.environ.get("HYLO_CONFIG", "hylo.toml"))
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_path),
        )


class HyloSettings(HyloBaseSettings):
    """Process-wide settings shared by the CLI and the simulator."""

    traces_dir: Path = Field(default_factory=_default_traces_dir, description="public traces folder")
    cache_dir: Path = Field(
        default_factory=_default_cache_dir, description="parsed-trace and runtime-prediction cache"
    )
    trace_cache: bool = Field(default=True, description="cache parsed traces by content hash")
    prediction_cache: bool = Field(
        default=True, description="cache runtime predictions (--estimates predicted) by input hash"
    )


@lru_cache(maxsize=1)
def get_settings() -> HyloSettings:
    return HyloSettings()
