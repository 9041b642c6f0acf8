"""Fixtures for the trace tests.

Tests that read the public traces use the ``traces_dir`` fixture, which skips (with the reason)
only when the configured traces folder does not exist; a folder that exists but lacks a file is a
failure, not a skip. Every test runs with its own empty parsed-trace cache, so no test writes to
the user's cache or depends on another test's entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from shared.traces import LoadedTrace


def _clear_settings() -> None:
    from shared.config import get_settings

    get_settings.cache_clear()


def _configured_traces_dir() -> Path:
    from shared.config import get_settings

    get_settings.cache_clear()
    return get_settings().traces_dir


@pytest.fixture(autouse=True)
def isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A fresh cache folder per test, through the real setting (HYLO_CACHE_DIR)."""
    cache = tmp_path_factory.mktemp("hylo-cache")
    monkeypatch.setenv("HYLO_CACHE_DIR", str(cache))
    monkeypatch.delenv("HYLO_TRACE_CACHE", raising=False)
    _clear_settings()
    yield cache
    _clear_settings()


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    folder = _configured_traces_dir()
    if not folder.is_dir():
        pytest.skip(
            f"public traces folder {folder} does not exist: set HYLO_TRACES_DIR "
            "(see docs/traces.md for where each trace can be obtained)"
        )
    return folder


@pytest.fixture(scope="session")
def sha256sums(traces_dir: Path) -> dict[str, str]:
    """The traces folder's own SHA256SUMS file: relative path -> hash."""
    sums: dict[str, str] = {}
    for line in (traces_dir / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name.removeprefix("./")] = digest
    return sums


def _loaded(name: str) -> LoadedTrace:
    from shared.traces import load_trace

    return load_trace(name, use_cache=False)


@pytest.fixture(scope="session")
def philly(traces_dir: Path) -> LoadedTrace:
    return _loaded("philly")


@pytest.fixture(scope="session")
def openb(traces_dir: Path) -> LoadedTrace:
    return _loaded("openb")


@pytest.fixture(scope="session")
def openb33(traces_dir: Path) -> LoadedTrace:
    return _loaded("openb-gpuspec33")


@pytest.fixture(scope="session")
def synthetic(traces_dir: Path) -> LoadedTrace:
    return _loaded("rltune-synthetic")


@pytest.fixture(scope="session")
def hpc2n(traces_dir: Path) -> LoadedTrace:
    return _loaded("hpc2n")


@pytest.fixture(scope="session")
def slurm256(traces_dir: Path) -> LoadedTrace:
    return _loaded("slurm-256")
