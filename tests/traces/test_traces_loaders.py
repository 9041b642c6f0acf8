"""Loaders on the real public traces.

Expected values were read by eye from the files (line numbers given), not computed by the code
under test; epoch seconds are computed here with ``datetime``, independently of the loader.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from shared.domain.jobs import JobTable
from shared.traces import LoadedTrace, load_openb_nodes, load_trace, trace_path


def epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def row(table: JobTable, job_id: str) -> int:
    hits = np.flatnonzero(table.ids == job_id)
    assert len(hits) == 1, job_id
    return int(hits[0])


def assert_sorted_and_rebased(table: JobTable) -> None:
    assert table.submit[0] == 0.0
    assert np.all(np.diff(table.submit) >= 0)


@pytest.mark.parametrize(
    ("name", "relpath"),
    [
        ("philly", "philly/pollux_philly.csv"),
        ("openb", "alibaba/openb_pod_list_default.csv"),
        ("openb-gpuspec33", "alibaba/openb_pod_list_gpuspec33.csv"),
        ("rltune-synthetic", "rltune/synthetic_trace.csv"),
        ("hpc2n", "swf/HPC2N-2002-2.2-cln.swf.gz"),
        ("slurm-256", "rltune/slurm_workloads_256.csv"),
    ],
)
def test_meta_hash_matches_sha256sums(
    name: str, relpath: str, sha256sums: dict[str, str], request: pytest.FixtureRequest
) -> None:
    fixture = {"openb-gpuspec33": "openb33", "rltune-synthetic": "synthetic", "slurm-256": "slurm256"}
    loaded: LoadedTrace = request.getfixturevalue(fixture.get(name, name))
    assert loaded.table.meta.sha256 == sha256sums[relpath]
    assert loaded.table.meta.name == name
    assert trace_path(name).name == Path(relpath).name
    assert_sorted_and_rebased(loaded.table)


class TestPhilly:
    def test_counts(self, philly: LoadedTrace) -> None:
        assert len(philly.table) == 82_247
        assert philly.exclusions == []
        assert len(philly.table.vcs) == 15
        assert philly.table.meta.has_estimates is False

    def test_origin_is_earliest_timestamp(self, philly: LoadedTrace) -> None:
        # line 31568: 2017-09-04 10:30:41,2240194.0,8,17921552.0,7f04ca (the earliest row)
        t = philly.table
        assert t.meta.origin == epoch("2017-09-04 10:30:41")
        assert t.ids[0] == "philly-31566"  # data row = line - 2
        assert (t.runtime[0], t.gpus[0], t.vcs[t.vc[0]]) == (2240194.0, 8, "7f04ca")

    def test_row_17(self, philly: LoadedTrace) -> None:
        # line 17: 2017-10-09 06:56:58,87.0,1,87.0,11cb48
        t = philly.table
        i = row(t, "philly-00015")
        assert t.submit[i] == epoch("2017-10-09 06:56:58") - epoch("2017-09-04 10:30:41")
        assert t.runtime[i] == 87.0
        assert t.gpus[i] == 1 and t.gpu_milli[i] == 1000
        assert t.vcs[t.vc[i]] == "11cb48"
        assert t.type_sets[t.type_set[i]] == ()
        assert t.cpus_milli[i] == -1 and t.mem_mib[i] == -1
        assert math.isnan(t.estimate[i])
        assert t.users[t.user[i]] == "unknown"

    def test_largest_jobs(self, philly: LoadedTrace) -> None:
        # lines 23198, 23509, 63242 ask for 128 GPUs, all in VC ee9e8c
        t = philly.table
        big = np.flatnonzero(t.gpus == 128)
        assert sorted(t.ids[big].tolist()) == ["philly-23196", "philly-23507", "philly-63240"]
        assert t.gpus.max() == 128
        i = row(t, "philly-63240")  # line 63242: 2017-12-20 07:26:27,4.0,128,512.0,ee9e8c
        assert t.runtime[i] == 4.0

    def test_last_submit(self, philly: LoadedTrace) -> None:
        # line 62255: 2017-12-22 08:02:11 is the latest timestamp
        assert philly.table.submit[-1] == epoch("2017-12-22 08:02:11") - epoch("2017-09-04 10:30:41")


class TestOpenb:
    def test_counts_and_exclusion(self, openb: LoadedTrace) -> None:
        assert len(openb.table) + openb.excluded_count == 8_152
        (excl,) = openb.exclusions
        assert excl.count == 897
        assert "never scheduled" in excl.reason
        # line 63: openb-pod-0061,...,BE,Pending,10001278,10001403,   (empty scheduled_time)
        assert excl.example_ids[0] == "openb-pod-0061"
        assert len(excl.submit_s) == 897 and 10001278.0 in excl.submit_s  # its creation time
        assert "openb-pod-0061" not in set(openb.table.ids.tolist())
        assert any("897" in note for note in openb.table.meta.notes)

    def test_fractional_pod(self, openb: LoadedTrace) -> None:
        # line 3: openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061
        t = openb.table
        i = row(t, "openb-pod-0001")
        assert t.meta.origin == 0.0  # openb-pod-0000 is created at 0
        assert t.submit[i] == 427061
        assert t.runtime[i] == 12902960 - 427061
        assert (t.gpus[i], t.gpu_milli[i]) == (1, 460)
        assert t.gpu_demand[i] == pytest.approx(0.46)
        assert (t.cpus_milli[i], t.mem_mib[i]) == (6000, 12288)
        assert t.qoses[t.qos[i]] == "LS"
        assert t.type_sets[t.type_set[i]] == ()

    def test_cpu_only_and_scheduled_later(self, openb: LoadedTrace) -> None:
        # line 7: openb-pod-0005,20000,65536,0,0,,LS,Running,2759674,12902960,2759676
        t = openb.table
        i = row(t, "openb-pod-0005")
        assert t.gpus[i] == 0 and t.gpu_demand[i] == 0.0
        assert t.submit[i] == 2759674
        assert t.runtime[i] == 12902960 - 2759676  # deletion - scheduled, not - creation
        assert t.logged_wait[i] == 2759676 - 2759674  # scheduled - creation: the wait it had

    def test_whole_gpu_pod(self, openb: LoadedTrace) -> None:
        # line 19: openb-pod-0017,88000,327680,8,1000,,Burstable,Succeeded,9437497,10769854,9437497
        t = openb.table
        i = row(t, "openb-pod-0017")
        assert (t.gpus[i], t.gpu_milli[i], t.qoses[t.qos[i]]) == (8, 1000, "Burstable")
        assert t.runtime[i] == 10769854 - 9437497

    def test_gpu_spec_deduplicated(self, openb33: LoadedTrace) -> None:
        # line 600: openb-pod-0598,4000,31250,1,1000,V100M16|V100M32|V100M32,LS,Running,...
        t = openb33.table
        i = row(t, "openb-pod-0598")
        assert t.type_sets[t.type_set[i]] == ("V100M16", "V100M32")
        assert len(set(t.type_sets)) == len(t.type_sets)

    def test_nodes(self, traces_dir: Path) -> None:
        groups = load_openb_nodes(traces_dir / "alibaba/openb_node_list_gpu_node.csv")
        assert len(groups) == 15
        assert sum(g.count for g in groups) == 1_213  # 1214 lines minus the header
        g2 = [g for g in groups if g.model == "G2"]
        # grep -c ',G2$' gives 549; line 2 style: openb-node-0000,64000,262144,2,P100
        assert [(g.gpus, g.cpu_milli, g.memory_mib, g.count) for g in g2] == [(8, 96000, 393216, 549)]
        assert tuple(groups[0]) == ("G2", 8, 96000, 393216, 549)  # largest group first


class TestRltune:
    def test_counts(self, synthetic: LoadedTrace) -> None:
        t = synthetic.table
        assert len(t) == 960
        assert synthetic.exclusions == []
        assert t.meta.has_estimates is False
        assert np.isnan(t.estimate).all()

    def test_first_rows(self, synthetic: LoadedTrace) -> None:
        # line 1: deepspeech2-0_1,1201,0,25,8,-1,-1,-1,-1,-1,2,2,1,-1,0,-1,-1,-1,0
        # line 2: cifar10-1_1,1312,0,34,8,-1,-1,-1,-1,-1,2,4,2,-1,0,-1,-1,-1,1
        t = synthetic.table
        assert t.meta.origin == 1201
        assert t.ids[0] == "deepspeech2-0_1"
        assert (t.submit[0], t.runtime[0], t.gpus[0]) == (0.0, 25.0, 8)
        assert t.type_sets[t.type_set[0]] == ("T4",)
        assert t.users[t.user[0]] == "2"
        assert t.ids[1] == "cifar10-1_1"
        assert (t.submit[1], t.runtime[1]) == (1312 - 1201, 34.0)
        assert t.type_sets[t.type_set[1]] == ("MISC",)
        assert t.users[t.user[1]] == "4"
        assert t.cpus_milli[0] == -1 and t.mem_mib[0] == -1
        assert t.vcs[t.vc[0]] == "default"
        # wait 0 (col 2), group 1 / 2 (col 12), queue 0 (col 14), no executable or partition
        assert t.logged_wait[0] == 0.0
        assert (t.label("group", 0), t.label("group", 1), t.label("queue", 0)) == ("1", "2", "0")
        assert t.label("app", 0) is None and t.label("partition", 0) is None

    def test_last_row(self, synthetic: LoadedTrace) -> None:
        # line 960: bert-959_1,259127,0,8631,4,-1,-1,-1,-1,-1,2,84,1,-1,0,-1,-1,-1,1
        t = synthetic.table
        assert t.ids[-1] == "bert-959_1"
        assert (t.submit[-1], t.runtime[-1], t.gpus[-1]) == (259127 - 1201, 8631.0, 4)
        assert t.users[t.user[-1]] == "84"


class TestHpc2n:
    def test_counts(self, hpc2n: LoadedTrace) -> None:
        t = hpc2n.table
        assert len(t) == 202_871
        assert hpc2n.exclusions == []
        assert t.meta.has_estimates is True
        assert t.gpus.max() <= 240

    def test_first_job(self, hpc2n: LoadedTrace) -> None:
        # first data line:   11   342072     32  43306   32  43307    -1   32  43200    -1  1   4   1  -1 -1  1 -1 -1
        # header: ; UnixStartTime: 1027839845 ; Partition:  1  DEFAULT
        t = hpc2n.table
        assert t.ids[0] == "11"
        assert t.meta.origin == 1027839845 + 342072
        assert (t.submit[0], t.runtime[0], t.gpus[0], t.estimate[0]) == (0.0, 43306.0, 32, 43200.0)
        assert t.users[t.user[0]] == "4"
        assert t.vcs[t.vc[0]] == "DEFAULT"
        assert t.qoses[t.qos[0]] == "normal"
        # wait 32 (field 3), group 1 (13), no executable (14) or queue (15), partition 1 (16)
        assert t.logged_wait[0] == 32.0
        assert (t.label("group", 0), t.label("app", 0), t.label("queue", 0)) == ("1", None, None)
        assert t.label("partition", 0) == "DEFAULT"
        assert not t.has_column("app") and not t.has_column("queue")

    def test_later_job(self, hpc2n: LoadedTrace) -> None:
        #    14   347226     15  33156    8  33157    -1    8  86400    -1  1   5   1  -1 -1  1 -1 -1
        t = hpc2n.table
        i = row(t, "14")
        assert (t.submit[i], t.runtime[i], t.gpus[i], t.estimate[i]) == (347226 - 342072, 33156.0, 8, 86400.0)
        assert t.users[t.user[i]] == "5"


class TestSlurm256:
    def test_rows(self, slurm256: LoadedTrace) -> None:
        # line 2: resnet50,M40,1,128,mnist,8,      line 3: densenet169,k80,2,64,cifar100,5,dp
        # line 8: facebook/opt125m,k80,2,1,,,      (inference: no epochs)
        t = slurm256.table
        assert len(t) == 256
        assert t.ids[0] == "job0_resnet50_1"
        assert t.type_sets[t.type_set[0]] == ("M40",)
        assert t.runtime[0] == 8 * 60.0
        assert t.ids[1] == "job1_densenet169_2"
        assert t.type_sets[t.type_set[1]] == ("K80",)
        assert (t.gpus[1], t.runtime[1], t.cpus_milli[1]) == (2, 5 * 60.0, 8000)
        assert t.ids[6] == "job6_facebook-opt125m_2"
        assert t.runtime[6] == 60.0
        assert t.estimate[0] == 7200.0 and t.meta.has_estimates
        assert {s for ts in t.type_sets for s in ts} == {"P100", "K80", "M40"}

    def test_arrivals_seeded(self, traces_dir: Path) -> None:
        a = load_trace("slurm-256", seed=1, use_cache=False).table
        b = load_trace("slurm-256", seed=1, use_cache=False).table
        c = load_trace("slurm-256", seed=2, use_cache=False).table
        np.testing.assert_array_equal(a.submit, b.submit)
        assert not np.array_equal(a.submit, c.submit)
        assert a.submit.max() <= 900.0
        assert a.ids.tolist() == c.ids.tolist()  # file order kept: arrivals are sorted then assigned

    def test_span_and_epoch_options(self, traces_dir: Path) -> None:
        t = load_trace("slurm-256", span_s=60.0, seconds_per_epoch=10.0, use_cache=False).table
        assert t.submit.max() <= 60.0
        assert t.runtime[0] == 80.0  # 8 epochs x 10 s
