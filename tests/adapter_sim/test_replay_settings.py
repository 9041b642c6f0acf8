"""Settings of the simulated cluster and the workload they select."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.adapter_sim.replay import load_workload
from services.adapter_sim.settings import AdapterSimSettings
from shared.config import get_settings


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No HYLO_* from the machine, and a private parsed-trace cache."""
    import os

    for key in list(os.environ):
        if key.startswith("HYLO_") and key != "HYLO_TRACES_DIR":
            monkeypatch.delenv(key)
    monkeypatch.setenv("HYLO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HYLO_CONFIG", str(tmp_path / "absent.toml"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_spec_comes_from_the_services_cluster_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYLO_CLUSTERS", '{"lab": "philly"}')
    monkeypatch.setenv("HYLO_SIM_CLUSTER", "lab")
    assert AdapterSimSettings().spec_source() == "philly"


def test_spec_defaults_to_the_traces_own_cluster() -> None:
    settings = AdapterSimSettings(sim_cluster="x", clusters={}, sim_trace="openb")
    assert settings.spec_source() == "alibaba-openb"
    assert AdapterSimSettings(sim_cluster="x", clusters={}).spec_source() == "embedded"


def test_a_trace_file_without_a_spec_is_refused_with_the_fix() -> None:
    settings = AdapterSimSettings(sim_cluster="x", clusters={}, sim_trace="/data/my.swf")
    with pytest.raises(ValueError, match="set HYLO_SIM_SPEC or list cluster 'x' in HYLO_CLUSTERS"):
        settings.spec_source()


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("HYLO_SIM_CLUSTER", "a b", "cluster name 'a b'"),
        ("HYLO_BASE_POLICY", "lifo", "unknown base policy 'lifo'"),
        ("HYLO_SIM_MAX_PENDING", "0", "sim_max_pending"),
        ("HYLO_SIM_DECISION_TIMEOUT_S", "-1", "sim_decision_timeout_s"),
        ("HYLO_SIM_LOAD_DEFINITION", "uncapped", "sim_load_definition"),
    ],
)
def test_bad_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, message: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValidationError, match=message):
        AdapterSimSettings()


def test_the_embedded_workload_has_the_requested_size() -> None:
    work = load_workload(AdapterSimSettings(sim_jobs=120))
    assert len(work.bound.jobs) == 120
    assert work.spec.name == "embedded"


def test_a_trace_is_cut_to_its_first_jobs() -> None:
    folder = get_settings().traces_dir
    if not folder.is_dir():
        pytest.skip(f"public traces folder {folder} does not exist: set HYLO_TRACES_DIR (docs/traces.md)")
    work = load_workload(
        AdapterSimSettings(sim_cluster="rl", clusters={}, sim_trace="rltune-synthetic", sim_jobs=50)
    )
    assert len(work.bound.jobs) == 50
    assert "first 50 of" in work.name
    assert work.spec.name == "rltune-synthetic"
    submit = work.bound.jobs.submit
    assert (submit[1:] >= submit[:-1]).all()


def test_the_load_and_its_definition_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """HYLO_SIM_LOAD means the in-span load unless HYLO_SIM_LOAD_DEFINITION says capped (how the
    replays before issue 18 rescaled); the two give other arrival times for the same number."""
    from shared.domain.load import offered_load

    monkeypatch.setenv("HYLO_SIM_LOAD", "0.6")
    monkeypatch.setenv("HYLO_SIM_JOBS", "800")
    in_span = load_workload(AdapterSimSettings())
    monkeypatch.setenv("HYLO_SIM_LOAD_DEFINITION", "capped")
    capped = load_workload(AdapterSimSettings())
    assert capped.name.endswith("(capped)") and not in_span.name.endswith("(capped)")
    assert offered_load(in_span.bound.jobs, 320) == pytest.approx(0.6)
    assert offered_load(capped.bound.jobs, 320, "capped") == pytest.approx(0.6)


def test_a_load_out_of_reach_names_the_setting() -> None:
    with pytest.raises(ValueError, match=r"out of reach .* pass --load \(HYLO_SIM_LOAD"):
        load_workload(AdapterSimSettings(sim_jobs=50, sim_load=0.9))
