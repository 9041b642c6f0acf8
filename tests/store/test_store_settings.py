"""``HYLO_DATABASE_URL`` reads as every ``--database`` option does, and a password file fills it in.

Why: a service handed ``/data/hylo.db`` or ``postgresql://...`` (what users and compose files write)
used to fail deep inside SQLAlchemy's async engine; and a password must be able to come from a
mounted secret rather than the environment, without ever being printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.store.settings import StoreSettings, safe_url


def test_a_path_or_a_sync_url_becomes_the_async_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert StoreSettings(database_url="hylo.db").database_url == f"sqlite+aiosqlite:///{tmp_path}/hylo.db"
    assert StoreSettings(database_url=f"sqlite:///{tmp_path}/a.db").database_url == (
        f"sqlite+aiosqlite:///{tmp_path}/a.db"
    )
    assert StoreSettings(database_url="postgresql://hylo@db:5432/hylo").database_url == (
        "postgresql+asyncpg://hylo@db:5432/hylo"
    )
    monkeypatch.setenv("HYLO_DATABASE_URL", str(tmp_path / "env.db"))
    assert StoreSettings().database_url == f"sqlite+aiosqlite:///{tmp_path}/env.db"


def test_an_unsupported_database_names_the_setting_and_what_works() -> None:
    with pytest.raises(ValidationError, match=r"HYLO_DATABASE_URL: unsupported database 'mysql'.*postgresql"):
        StoreSettings(database_url="mysql://u@h/db")


def test_a_password_file_fills_the_url_and_is_never_printed(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cr:et@/x\n")
    settings = StoreSettings(database_url="postgresql://hylo@db/hylo", database_password_file=secret)
    assert settings.database_url.startswith("postgresql+asyncpg://hylo:")
    assert "s3cr" not in safe_url(settings.database_url) and "***" in safe_url(settings.database_url)
    with pytest.raises(ValidationError, match="HYLO_DATABASE_PASSWORD_FILE"):
        StoreSettings(database_url="postgresql://hylo@db/hylo", database_password_file=tmp_path / "none")
