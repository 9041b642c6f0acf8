"""The cluster presets owned by the traces work: valid specs, sized for their traces."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from shared.domain.cluster import load_cluster_spec
from shared.domain.jobs import build_table
from shared.traces import LoadedTrace, load_openb_nodes
from shared.traces.offered_load import main, offered_load

PRESETS = {
    "rltune-synthetic": "rltune-synthetic",
    "philly": "philly",
    "alibaba-openb": "openb",
    "slurm-testbed": "slurm-256",
    "hpc2n": "hpc2n",
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_is_valid_and_names_its_trace(preset: str) -> None:
    spec = load_cluster_spec(preset)
    assert spec.name == preset
    assert spec.description
    assert spec.offered_load is not None
    assert spec.offered_load.trace == PRESETS[preset]


def test_offered_load_by_hand() -> None:
    # two 1-GPU jobs of 100 s and one half-GPU job of 200 s, submitted over 100 s, on 4 GPUs;
    # in-span, each job's work up to the last arrival (100 s): (100 + 50 + 0.5 x 0) / (4 x 100)
    t = build_table(
        ids=["a", "b", "c"],
        submit=[0, 50, 100],
        runtime=[100, 100, 200],
        gpus=[1, 1, 1],
        gpu_milli=[1000, 1000, 500],
    )
    assert offered_load(t, 4) == pytest.approx(0.375)
    # capped, runtimes up to the span: (100 + 100 + 0.5 x 100) / (4 x 100)
    assert offered_load(t, 4, "capped") == pytest.approx(0.625)


def test_shapes() -> None:
    synth = load_cluster_spec("rltune-synthetic")
    assert sorted((g.gpu_type, g.count, g.gpus) for g in synth.node_groups) == [("MISC", 8, 8), ("T4", 8, 2)]
    testbed = load_cluster_spec("slurm-testbed")
    p100 = [g for g in testbed.node_groups if g.gpu_type == "P100"]
    assert [(g.count, g.gpus, g.cpus) for g in p100] == [(2, 4, 56)]
    assert testbed.gpus_of_type("K80") == 4 and testbed.gpus_of_type("M40") == 1
    hpc = load_cluster_spec("hpc2n")
    assert (hpc.total_nodes, hpc.total_gpus, hpc.gpu_types) == (120, 240, ("CPU",))
    assert "processor" in hpc.description
    assert load_cluster_spec("alibaba-openb").cpu_only_jobs == "run"


def test_philly_hosts_the_largest_jobs_at_target_load(philly: LoadedTrace) -> None:
    spec = load_cluster_spec("philly")
    eight = sum(g.count for g in spec.node_groups if g.gpus == 8)
    assert eight * 8 >= int(philly.table.gpus.max()) == 128
    load = offered_load(philly.table, spec.total_gpus)
    assert 0.80 <= load <= 0.90


def test_alibaba_preset_is_the_node_list(traces_dir: Path) -> None:
    spec = load_cluster_spec("alibaba-openb")
    groups = load_openb_nodes(traces_dir / "alibaba/openb_node_list_gpu_node.csv")
    from_file = sorted((g.model, g.gpus, g.cpu_milli, g.memory_mib, g.count) for g in groups)
    from_spec = sorted((g.gpu_type, g.gpus, g.cpus_milli, g.mem_mib, g.count) for g in spec.node_groups)
    assert from_spec == from_file
    assert (spec.total_nodes, spec.total_gpus) == (1213, 6212)


@pytest.mark.parametrize(
    ("preset", "fixture"), [("alibaba-openb", "openb33"), ("rltune-synthetic", "synthetic")]
)
def test_trace_gpu_types_exist_in_preset(preset: str, fixture: str, request: pytest.FixtureRequest) -> None:
    loaded: LoadedTrace = request.getfixturevalue(fixture)
    used = {name for k in np.unique(loaded.table.type_set) for name in loaded.table.type_sets[k]}
    assert used and used <= set(load_cluster_spec(preset).gpu_types)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_stored_offered_load_can_be_remeasured(
    preset: str, traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = load_cluster_spec(preset)
    assert spec.offered_load is not None
    assert main([preset, spec.offered_load.trace]) == 0
    printed = tomllib.loads(capsys.readouterr().out)["offered_load"]
    assert printed["value"] == pytest.approx(spec.offered_load.value, abs=1e-4)
    assert printed["method"] == spec.offered_load.method
