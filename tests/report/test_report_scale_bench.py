"""A tiny run of ``bench/report_scale.py``: its own PostgreSQL, a generated store, the query API as a
process, concurrent clients, and the JSON it writes (a few thousand decision rows: seconds).

Skipped, with the reason, where no throwaway PostgreSQL can be started (no server binaries).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from bench.support.postgres import postgres_bindir
from tests.bench_script import load_bench


def bench() -> ModuleType:
    return load_bench("report_scale")


def test_a_small_run_measures_every_phase(tmp_path: Path) -> None:
    if postgres_bindir() is None:
        pytest.skip("no initdb/pg_ctl to start a throwaway PostgreSQL")
    out = tmp_path / "report_scale.json"
    args = ["--rows", "3000", "--queue", "10", "--clients", "2", "--rounds", "1", "--no-distinct"]
    doc = bench().main([*args, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    store = doc["store"]
    assert store["decision_rows"] >= 3000 and store["outcomes"] > 0 and store["shadow_rows"] > 0
    phases = doc["phases"]
    assert set(phases) == {"idle", "cold", "1 client", "2 clients, same"}
    for name in ("cold", "1 client", "2 clients, same"):
        phase = phases[name]
        assert phase["errors"] == 0 and phase["statuses"] == [200], phase
        assert phase["requests"] == phase["clients"] * phase["rounds"]
        assert 0 < phase["p50_s"] <= phase["p99_s"] <= phase["max_s"]
        assert phase["page_bytes"] > 10_000 and phase["peak_mib"] >= phase["rss_mib"] > 0
