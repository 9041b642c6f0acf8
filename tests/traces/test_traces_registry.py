"""Names, paths, format detection and the errors for missing files."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import get_settings
from shared.traces import TraceFormatError, TraceNotFoundError, detect_loader, load_trace, trace_names

SAMPLES = {
    "philly.csv": "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n",
    "pods.csv": (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\nopenb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    ),
    "jobs.csv": "; comment\ndeepspeech2-0_1,1201,0,25,8,-1,-1,-1,-1,-1,2,2,1,-1,0,-1,-1,-1,0\n",
    "log.txt": "; SWF\n   11   342072     32  43306   32  43307    -1   32  43200    -1  1   4   1  -1 -1  1 -1 -1\n",
    "work.csv": "model,GPU type,Num of GPUs,batch_size,dataset,epochs,mode\nresnet50,M40,1,128,mnist,8,\n",
}
EXPECTED = {
    "philly.csv": "philly",
    "pods.csv": "openb",
    "jobs.csv": "rltune",
    "log.txt": "swf",
    "work.csv": "slurm_workload",
}


def test_names() -> None:
    assert trace_names() == sorted(
        ["philly", "openb", "openb-default", "openb-gpuspec33", "rltune-synthetic", "hpc2n", "slurm-256"]
    )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_detect_by_content(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(SAMPLES[name])
    assert detect_loader(path) == EXPECTED[name]
    loaded = load_trace(path)
    assert loaded.loader == EXPECTED[name]
    assert len(loaded.table) == 1


def test_detect_swf_by_extension(tmp_path: Path) -> None:
    path = tmp_path / "x.swf"
    path.write_text(SAMPLES["log.txt"])
    assert detect_loader(path) == "swf"


def test_forced_loader(tmp_path: Path) -> None:
    path = tmp_path / "x.dat"
    path.write_text(SAMPLES["jobs.csv"])
    assert load_trace(path, loader="rltune").loader == "rltune"
    with pytest.raises(ValueError, match="unknown trace loader"):
        load_trace(path, loader="nope")


def test_node_list_is_not_a_job_trace(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,64000,262144,2,P100\n")
    with pytest.raises(TraceFormatError, match="load_openb_nodes"):
        load_trace(path)


def test_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(TraceFormatError, match=r"x\.csv line 1, header: expected a known trace format"):
        load_trace(path)


def test_missing_named_trace_says_where_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYLO_TRACES_DIR", str(tmp_path))
    get_settings.cache_clear()
    with pytest.raises(TraceNotFoundError) as info:
        load_trace("philly")
    text = str(info.value)
    for needle in ("petuum/adaptdl", "osdi21-artifact", "HYLO_TRACES_DIR", str(tmp_path), "docs/traces.md"):
        assert needle in text
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("openb", "alibaba/clusterdata"),
        ("hpc2n", "Parallel Workloads Archive"),
        ("rltune-synthetic", "RLTune"),
    ],
)
def test_missing_named_trace_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, needle: str
) -> None:
    monkeypatch.setenv("HYLO_TRACES_DIR", str(tmp_path))
    get_settings.cache_clear()
    with pytest.raises(TraceNotFoundError, match=needle):
        load_trace(name)


def test_broken_gzip(tmp_path: Path) -> None:
    path = tmp_path / "x.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage")
    with pytest.raises(TraceFormatError, match=r"x\.gz line 1, file: expected a readable gzip stream"):
        load_trace(path)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError, match="no such file and not a trace name"):
        load_trace(tmp_path / "nothing.csv")


def test_known_name_sets_meta_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rltune").mkdir()
    (tmp_path / "rltune/synthetic_trace.csv").write_text(SAMPLES["jobs.csv"])
    monkeypatch.setenv("HYLO_TRACES_DIR", str(tmp_path))
    get_settings.cache_clear()
    loaded = load_trace("rltune-synthetic")
    assert loaded.table.meta.name == "rltune-synthetic"
    assert load_trace(tmp_path / "rltune/synthetic_trace.csv").table.meta.name == "synthetic_trace.csv"
