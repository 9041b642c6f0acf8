"""The embedded preset: valid, every default job fits it, and its recorded offered load is current."""

from __future__ import annotations

import pytest

from shared.domain.cluster import ClusterSpec, load_cluster_spec, preset_names
from shared.domain.jobs import JobTable, build_table
from shared.workload import fits_cluster, generate_workload, offered_load
from shared.workload.params import GeneratorParams


def test_preset_loads(embedded: ClusterSpec) -> None:
    assert "embedded" in preset_names()
    assert embedded.gpu_types == ("A10", "T4", "V100M16", "V100M32")
    assert 256 <= embedded.total_gpus <= 400
    assert embedded.offered_load is not None


def test_default_params_target_the_embedded_capacity(embedded: ClusterSpec, params: GeneratorParams) -> None:
    assert params.target_capacity_gpus == embedded.total_gpus


def test_recorded_offered_load_is_current(embedded: ClusterSpec, default_workload: JobTable) -> None:
    """If this fails, the generator or its defaults changed: re-run the calibration and update the preset."""
    assert embedded.offered_load is not None
    measured = offered_load(default_workload, embedded.total_gpus)
    assert measured == pytest.approx(embedded.offered_load.value, abs=0.0005)
    assert 0.80 <= embedded.offered_load.value <= 0.90


def test_every_default_job_fits(embedded: ClusterSpec, default_workload: JobTable) -> None:
    assert fits_cluster(default_workload, embedded).all()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_job_fits_other_seeds(embedded: ClusterSpec, seed: int) -> None:
    t = generate_workload(50_000, seed, gpu_types=embedded.gpu_types)
    assert fits_cluster(t, embedded).all()


def test_fits_cluster_rejects_what_cannot_run() -> None:
    spec = load_cluster_spec("embedded")
    t = build_table(
        ids=["ok", "too-many-a10-nodes", "no-such-type", "cpu-too-big", "multi-node-v100"],
        submit=[0, 0, 0, 0, 0],
        runtime=[1, 1, 1, 1, 1],
        gpus=[1, 64, 1, 1, 64],
        cpus_milli=[1000, 1000, 1000, 200_000, 64 * 12_000],
        mem_mib=[1024, 1024, 1024, 1024, 64 * 49_152],
        type_set=[0, 1, 2, 0, 3],
        type_sets=[(), ("A10",), ("P100",), ("V100M32",)],
    )
    by_id = dict(zip(t.ids.tolist(), fits_cluster(t, spec).tolist(), strict=True))
    assert by_id == {
        "ok": True,
        "too-many-a10-nodes": False,  # 32 nodes of 2 A10 needed, 16 exist
        "no-such-type": False,
        "cpu-too-big": False,
        "multi-node-v100": True,  # 8 of the 16 V100M32 nodes, 96 cores and 384 GiB per node
    }


def test_offered_load_definition() -> None:
    t = build_table(ids=["a", "b"], submit=[0, 100], runtime=[100, 100], gpus=[2, 1], gpu_milli=[1000, 500])
    # in-span: a's 100 s fall inside the 100 s span, b arrives last and counts nothing
    assert offered_load(t, 4) == pytest.approx((2 * 100 + 0.5 * 0) / (4 * 100))
    assert offered_load(t.take([0, 0]), 4) == 0.0  # no arrival span, nothing to average over


def test_simulator_binding_keeps_every_default_job(embedded: ClusterSpec, default_workload: JobTable) -> None:
    """Cross-check with the simulator's own feasibility rules: nothing is excluded."""
    binding = pytest.importorskip("shared.scheduling.binding")
    bound = binding.bind_jobs(default_workload, embedded)
    assert bound.excluded_count == 0, bound.exclusions
    assert len(bound.jobs) == len(default_workload)
