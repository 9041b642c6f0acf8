"""Fixtures for the runtime-predictor tests.

The tests build their own data (a few hundred jobs, ``helpers.py``) so the folder runs in seconds
and needs no public trace; the one test that reads a public trace uses ``traces_dir``, which skips
(with the reason) when the traces folder does not exist, as tests/traces does. Each test gets an empty
parsed-trace cache of its own (``HYLO_CACHE_DIR``), so none writes to the user's cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def _clear_settings() -> None:
    from shared.config import get_settings

    get_settings.cache_clear()


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("hylo-cache")
    monkeypatch.setenv("HYLO_CACHE_DIR", str(cache))
    monkeypatch.delenv("HYLO_TRACE_CACHE", raising=False)
    _clear_settings()
    yield cache
    _clear_settings()


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    from shared.config import get_settings

    get_settings.cache_clear()
    folder = get_settings().traces_dir
    if not folder.is_dir():
        pytest.skip(
            f"public traces folder {folder} does not exist: set HYLO_TRACES_DIR "
            "(see docs/traces.md for where each trace can be obtained)"
        )
    return folder
