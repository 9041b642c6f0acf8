"""A tiny run of ``bench/store_scale.py``: its own PostgreSQL, a generated partitioned store, every
analyst recipe with its plan, maintenance rolled back, and the JSON it writes (seconds; the report
phases are ``bench/report_scale.py``'s, tested beside it).

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
    return load_bench("store_scale")


def test_a_small_run_measures_every_recipe(tmp_path: Path) -> None:
    if postgres_bindir() is None:
        pytest.skip("no initdb/pg_ctl to start a throwaway PostgreSQL")
    out = tmp_path / "store-scale.json"
    args = ["--rows", "3000", "--queue", "10", "--rounds", "2", "--rounds-whole", "1", "--no-report"]
    module = bench()
    doc = module.main([*args, "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(doc))
    store = doc["store"]
    assert store["decision_rows"] >= 3000 and store["partitions"] >= 2 and store["load_s"] > 0
    # the generated store holds what the recorder writes beside the rows (migrations 0008, 0009): a
    # summary per snapshot, the decision that started each job on its outcome (all but the 2% started
    # outside), and every finished job's user and partition (each was seen pending)
    assert store["snapshot_summaries"] == store["snapshots"]
    assert 0.9 * store["outcomes"] <= store["outcomes_with_decision"] <= store["outcomes"]
    assert store["outcomes_with_user"] == store["outcomes"]
    assert set(doc["recipes"]) == set(module.recipes())
    for heading, by_period in doc["recipes"].items():
        assert "last 7 days" in by_period, heading
        for result in by_period.values():
            assert result["runs"] >= 1 and 0 < result["p50_s"] <= result["p99_s"] <= result["max_s"]
            assert result["plan"]["scans"], heading
    assert doc["maintenance"]["nothing to do"]["dropped"] == []
