"""The parsed-trace cache: hits without re-parsing, misses on any change, survives damage."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.config import get_settings
from shared.domain.jobs import NUMERIC_FIELDS, OPTIONAL_CODE_TABLES, OPTIONAL_FIELDS, JobTable
from shared.traces import LoadedTrace, load_trace, registry

RLTUNE_ROWS = [
    "deepspeech2-0_1,1201,0,25,8,-1,-1,-1,-1,-1,2,2,1,-1,0,-1,-1,-1,0\n",
    "cifar10-1_1,1312,0,34,8,-1,-1,-1,-1,-1,2,4,2,-1,0,-1,-1,-1,1\n",
]


def assert_same(a: JobTable, b: JobTable) -> None:
    np.testing.assert_array_equal(a.ids, b.ids)
    for name in (*NUMERIC_FIELDS, *OPTIONAL_FIELDS):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert getattr(a, name).dtype == getattr(b, name).dtype
    assert (a.type_sets, a.users, a.vcs, a.qoses, a.meta) == (b.type_sets, b.users, b.vcs, b.qoses, b.meta)
    for names in OPTIONAL_CODE_TABLES.values():
        assert getattr(a, names) == getattr(b, names), names


class Counting:
    """Wraps a loader's parse function to count calls, or to fail if it is called at all."""

    def __init__(self, loader: str, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self._real = registry.LOADERS[loader].parse
        monkeypatch.setitem(registry.LOADERS, loader, replace(registry.LOADERS[loader], parse=self))

    def __call__(self, path: Path, **options: Any) -> LoadedTrace:
        self.calls += 1
        if self.fail:
            raise AssertionError("the parser ran although the trace was cached")
        return self._real(path, **options)


def cache_files(cache: Path) -> list[Path]:
    return sorted((cache / "traces").glob("*.npz")) if (cache / "traces").exists() else []


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text("".join(RLTUNE_ROWS))
    return path


def test_second_load_hits_without_parsing(
    small_trace: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_trace(small_trace)
    assert not first.from_cache
    assert len(cache_files(isolated_cache)) == 1
    Counting("rltune", monkeypatch, fail=True)
    second = load_trace(small_trace)
    assert second.from_cache
    assert_same(first.table, second.table)


def test_philly_cached_is_equal_and_not_reparsed(
    traces_dir: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_trace("philly")
    Counting("philly", monkeypatch, fail=True)
    second = load_trace("philly")
    assert second.from_cache
    assert_same(first.table, second.table)
    assert second.exclusions == first.exclusions


def test_openb_exclusions_survive_the_cache(traces_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_trace("openb")
    Counting("openb", monkeypatch, fail=True)
    second = load_trace("openb")
    assert second.from_cache
    assert second.exclusions == first.exclusions
    assert second.table.meta.name == "openb"


def test_changed_content_misses(small_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_trace(small_trace)
    counter = Counting("rltune", monkeypatch)
    small_trace.write_text(RLTUNE_ROWS[0])
    again = load_trace(small_trace)
    assert counter.calls == 1 and not again.from_cache
    assert len(again.table) == 1


def test_same_content_elsewhere_hits(
    small_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_trace(small_trace)
    copy = tmp_path / "copy.csv"
    copy.write_bytes(small_trace.read_bytes())
    Counting("rltune", monkeypatch, fail=True)
    assert load_trace(copy).from_cache


def test_options_are_part_of_the_key(
    traces_dir: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = load_trace("slurm-256", seed=1)
    b = load_trace("slurm-256", seed=2)
    assert not np.array_equal(a.table.submit, b.table.submit)
    assert len(cache_files(isolated_cache)) == 2
    Counting("slurm_workload", monkeypatch, fail=True)
    np.testing.assert_array_equal(load_trace("slurm-256", seed=1).table.submit, a.table.submit)


def test_version_is_part_of_the_key(small_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load_trace(small_trace)
    loader = registry.LOADERS["rltune"]
    monkeypatch.setitem(registry.LOADERS, "rltune", replace(loader, version=loader.version + 1))
    assert not load_trace(small_trace).from_cache


def test_corrupt_entry_is_ignored_and_rewritten(
    small_trace: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_trace(small_trace)
    (entry,) = cache_files(isolated_cache)
    entry.write_bytes(b"not a zip file")
    counter = Counting("rltune", monkeypatch)
    again = load_trace(small_trace)
    assert counter.calls == 1 and not again.from_cache
    assert_same(first.table, again.table)
    assert load_trace(small_trace).from_cache  # rewritten, valid again
    assert counter.calls == 1


def test_truncated_entry_is_ignored(small_trace: Path, isolated_cache: Path) -> None:
    load_trace(small_trace)
    (entry,) = cache_files(isolated_cache)
    entry.write_bytes(entry.read_bytes()[:200])
    assert not load_trace(small_trace).from_cache


def test_setting_turns_cache_off(
    small_trace: Path, isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYLO_TRACE_CACHE", "0")
    get_settings.cache_clear()
    assert get_settings().trace_cache is False
    counter = Counting("rltune", monkeypatch)
    load_trace(small_trace)
    load_trace(small_trace)
    assert counter.calls == 2
    assert cache_files(isolated_cache) == []


def test_use_cache_argument_overrides_setting(small_trace: Path, isolated_cache: Path) -> None:
    load_trace(small_trace, use_cache=False)
    assert cache_files(isolated_cache) == []
