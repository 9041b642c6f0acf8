"""Broken trace files: every error names the file, the 1-based line and the field.

Most cases use small hand-written files, so they run without the public traces; the last class
breaks full copies of the real files (written to tmp_path, never into the traces folder).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from shared.traces import TraceFormatError, load_trace
from shared.traces.openb import load_openb
from shared.traces.philly import load_philly
from shared.traces.rltune import load_rltune
from shared.traces.slurm_workload import load_slurm_workload
from shared.traces.swf import load_swf

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_ROWS = [
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n",
    "2017-10-09 06:13:03,2951.0,1,2951.0,6214e9\n",
    "2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0\n",
]
OPENB_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
OPENB_ROWS = [
    "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n",
    "openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n",
]
RLTUNE_ROWS = [
    "deepspeech2-0_1,1201,0,25,8,-1,-1,-1,-1,-1,2,2,1,-1,0,-1,-1,-1,0\n",
    "cifar10-1_1,1312,0,34,8,-1,-1,-1,-1,-1,2,4,2,-1,0,-1,-1,-1,1\n",
]
SWF_HEADER = "; UnixStartTime: 1027839845\n;\n"
SWF_ROWS = [
    "   11   342072     32  43306   32  43307    -1   32  43200    -1  1   4   1  -1 -1  1 -1 -1\n",
    "   12   342343      5    553   40 552.21    -1   40  43200    -1  1   4   1  -1 -1  1 -1 -1\n",
]


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


def expect(path: Path, line: int, where: str, call: object, *args: object) -> TraceFormatError:
    """Run the loader; check the message starts with '<file> line <n>, <where>:'."""
    assert callable(call)
    with pytest.raises(TraceFormatError) as info:
        call(*args)
    err = info.value
    assert isinstance(err, ValueError)
    assert str(err).startswith(f"{path.name} line {line}, {where}: expected "), str(err)
    assert (err.line, err.path) == (line, path)
    return err


class TestPhilly:
    def test_bad_number_exact_message(self, tmp_path: Path) -> None:
        rows = PHILLY_ROWS * 6  # header + 18 rows: line 17 is row 16
        rows[15] = "2017-10-09 07:01:55,66.0,abc,66.0,11cb48\n"
        path = write(tmp_path, "pollux_philly.csv", [PHILLY_HEADER, *rows])
        with pytest.raises(TraceFormatError) as info:
            load_philly(path)
        assert str(info.value) == (
            "pollux_philly.csv line 17, field 'num_gpus': expected a non-negative integer, got 'abc'"
        )

    def test_negative_gpus(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, PHILLY_ROWS[0], "2017-10-09 06:13:03,5.0,-2,5.0,x\n"])
        err = expect(path, 3, "field 'num_gpus'", load_philly, path)
        assert "'-2'" in str(err)

    def test_fractional_gpus(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, "2017-10-09 06:13:03,5.0,1.5,5.0,x\n"])
        expect(path, 2, "field 'num_gpus'", load_philly, path)

    def test_bad_duration(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, *PHILLY_ROWS, "2017-10-09 06:13:03,nan,1,5.0,x\n"])
        err = expect(path, 5, "field 'duration'", load_philly, path)
        assert "non-negative number" in str(err)

    @pytest.mark.parametrize(
        "stamp", ["2017-13-09 06:13:03", "2017-10-09", "yesterday", "2017-10-09 06:13:03Z", ""]
    )
    def test_bad_timestamp(self, tmp_path: Path, stamp: str) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, PHILLY_ROWS[0], f"{stamp},5.0,1,5.0,x\n"])
        err = expect(path, 3, "field 'timestamp'", load_philly, path)
        assert "YYYY-MM-DD HH:MM:SS" in str(err)

    def test_missing_column_in_row(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, *PHILLY_ROWS, "2017-10-09 06:13:03,5.0,1,x\n"])
        err = expect(path, 5, "row", load_philly, path)
        assert "5 comma-separated fields" in str(err)

    def test_header_missing(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", PHILLY_ROWS)
        err = expect(path, 1, "header", load_philly, path)
        assert "timestamp" in str(err) and "num_gpus" in str(err)

    def test_header_lacks_a_column(self, tmp_path: Path) -> None:
        header = "timestamp,duration,num_gpus,gpu_time\n"
        path = write(tmp_path, "p.csv", [header, "2017-10-09 06:13:03,5.0,1,5.0\n"])
        err = expect(path, 1, "header", load_philly, path)
        assert "missing cluster" in str(err)

    def test_empty_vc(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, "2017-10-09 06:13:03,5.0,1,5.0,\n"])
        expect(path, 2, "field 'cluster'", load_philly, path)

    def test_blank_lines_are_skipped_and_counted(self, tmp_path: Path) -> None:
        path = write(tmp_path, "p.csv", [PHILLY_HEADER, "\n", PHILLY_ROWS[0], "\n", "x,5.0,1,5.0,v\n"])
        expect(path, 5, "field 'timestamp'", load_philly, path)


class TestRltune:
    def test_bad_gpu_type(self, tmp_path: Path) -> None:
        bad = RLTUNE_ROWS[1].rstrip("\n")[:-1] + "7\n"
        path = write(tmp_path, "t.csv", ["; comment\n", RLTUNE_ROWS[0], bad])
        err = expect(path, 3, "field 'gpu_type' (column 19)", load_rltune, path)
        assert "0..4" in str(err)

    def test_negative_gpus(self, tmp_path: Path) -> None:
        path = write(tmp_path, "t.csv", ["bert-2_1,1432,0,41,-1,-1,-1,-1,-1,-1,2,7,2,-1,0,-1,-1,-1,1\n"])
        expect(path, 1, "field 'num_gpus' (column 5)", load_rltune, path)

    def test_short_row(self, tmp_path: Path) -> None:
        path = write(
            tmp_path, "t.csv", [RLTUNE_ROWS[0], "bert-2_1,1432,0,41,1,-1,-1,-1,-1,-1,2,7,2,-1,0,-1,-1,-1\n"]
        )
        err = expect(path, 2, "row", load_rltune, path)
        assert "19 comma-separated fields" in str(err)

    def test_header_line_is_rejected(self, tmp_path: Path) -> None:
        header = ",".join(f"c{i}" for i in range(19)) + "\n"
        path = write(tmp_path, "t.csv", [header, *RLTUNE_ROWS])
        expect(path, 1, "field 'submit_time' (column 2)", load_rltune, path)

    def test_unknown_runtime_becomes_10s_and_is_noted(self, tmp_path: Path) -> None:
        path = write(tmp_path, "t.csv", ["a,5,0,-1,1,-1,-1,-1,-1,-1,2,7,2,-1,0,-1,-1,-1,1\n", *RLTUNE_ROWS])
        table = load_rltune(path)
        assert table.runtime[table.ids.tolist().index("a")] == 10.0
        assert any("1 jobs with run_time -1" in n for n in table.meta.notes)

    def test_estimates_and_requests(self, tmp_path: Path) -> None:
        path = write(tmp_path, "t.csv", ["a,5,0,100,2,-1,-1,8,3600,2048.5,2,7,2,-1,0,-1,-1,3,4\n"])
        table = load_rltune(path)
        assert table.meta.has_estimates
        assert (table.estimate[0], table.cpus_milli[0], table.mem_mib[0]) == (3600.0, 8000, 2049)
        assert table.vcs[table.vc[0]] == "3"
        assert table.type_sets[table.type_set[0]] == ("V100M32",)


class TestOpenb:
    def test_bad_cpu(self, tmp_path: Path) -> None:
        path = write(
            tmp_path, "o.csv", [OPENB_HEADER, OPENB_ROWS[0], OPENB_ROWS[1].replace(",6000,", ",6k,")]
        )
        err = expect(path, 3, "field 'cpu_milli'", load_openb, path)
        assert "'6k'" in str(err)

    def test_gpu_share_above_one_gpu(self, tmp_path: Path) -> None:
        path = write(tmp_path, "o.csv", [OPENB_HEADER, OPENB_ROWS[1].replace(",460,", ",1460,")])
        expect(path, 2, "field 'gpu_milli'", load_openb, path)

    def test_scheduled_before_creation(self, tmp_path: Path) -> None:
        bad = "openb-pod-0009,6000,12288,1,460,,LS,Running,500,900,400\n"
        path = write(tmp_path, "o.csv", [OPENB_HEADER, *OPENB_ROWS, bad])
        expect(path, 4, "field 'scheduled_time'", load_openb, path)

    def test_missing_creation_time(self, tmp_path: Path) -> None:
        bad = "openb-pod-0009,6000,12288,1,460,,LS,Running,,900,400\n"
        path = write(tmp_path, "o.csv", [OPENB_HEADER, bad])
        expect(path, 2, "field 'creation_time'", load_openb, path)

    def test_header_missing(self, tmp_path: Path) -> None:
        path = write(tmp_path, "o.csv", OPENB_ROWS)
        expect(path, 1, "header", load_openb, path)


class TestSwf:
    def test_bad_token_in_gz(self, tmp_path: Path) -> None:
        rows = [SWF_ROWS[0], SWF_ROWS[1].replace("  553 ", "  5x3 ")]
        path = tmp_path / "t.swf.gz"
        path.write_bytes(gzip.compress("".join([SWF_HEADER, *rows]).encode()))
        err = expect(path, 4, "field 'run_time' (column 4)", load_swf, path)
        assert "'5x3'" in str(err)

    def test_wrong_field_count(self, tmp_path: Path) -> None:
        path = write(
            tmp_path, "t.swf", [SWF_HEADER, SWF_ROWS[0], SWF_ROWS[1].rstrip().rsplit(" ", 1)[0] + "\n"]
        )
        err = expect(path, 4, "row", load_swf, path)
        assert "18 whitespace-separated fields" in str(err)

    def test_negative_processors(self, tmp_path: Path) -> None:
        path = write(tmp_path, "t.swf", [SWF_HEADER, SWF_ROWS[0].replace("   32  43307", "   -5  43307")])
        expect(path, 3, "field 'allocated_processors' (column 5)", load_swf, path)

    def test_fractional_processors(self, tmp_path: Path) -> None:
        path = write(tmp_path, "t.swf", [SWF_HEADER, SWF_ROWS[0].replace("   32  43307", "  2.5  43307")])
        expect(path, 3, "field 'allocated_processors' (column 5)", load_swf, path)

    def test_exclusions_and_fallbacks(self, tmp_path: Path) -> None:
        rows = [
            *SWF_ROWS,
            "   13   342921    102      0   40  10027    -1   40  43200    -1  1   4   1  -1 -1  1 -1 -1\n",
            "   14   347226     15  33156   -1  33157    -1    8     -1    -1  1   5   1  -1 -1  1 -1 -1\n",
            "   15   347593     15  86462   -1  86464    -1   -1  86400    -1  1   5   1  -1 -1  1 -1 -1\n",
        ]
        path = write(tmp_path, "t.swf", [SWF_HEADER, "; Partition:  1  DEFAULT\n", *rows])
        loaded = load_trace(path)
        reasons = {e.reason: (e.count, e.example_ids) for e in loaded.exclusions}
        assert reasons == {
            "run time <= 0 or unknown (-1)": (1, ["13"]),
            "no processor count (allocated and requested processors <= 0 or unknown)": (1, ["15"]),
        }
        # their submit times on the kept jobs' clock (t = 0 at job 11's 342072), for per-window counts
        times = {e.example_ids[0]: e.submit_s for e in loaded.exclusions}
        assert times == {"13": (342921.0 - 342072.0,), "15": (347593.0 - 342072.0,)}
        t = loaded.table
        i = t.ids.tolist().index("14")
        assert t.gpus[i] == 8  # allocated -1 -> requested
        assert np.isnan(t.estimate[i])
        assert t.vcs[t.vc[i]] == "DEFAULT"


class TestSlurmWorkload:
    def test_zero_gpus(self, tmp_path: Path) -> None:
        header = "model,GPU type,Num of GPUs,batch_size,dataset,epochs,mode\n"
        path = write(
            tmp_path, "w.csv", [header, "resnet50,M40,1,128,mnist,8,\n", "resnet50,M40,0,128,mnist,8,\n"]
        )
        expect(path, 3, "field 'Num of GPUs'", load_slurm_workload, path)

    def test_bad_epochs(self, tmp_path: Path) -> None:
        header = "model,GPU type,Num of GPUs,batch_size,dataset,epochs,mode\n"
        path = write(tmp_path, "w.csv", [header, "resnet50,M40,1,128,mnist,eight,\n"])
        expect(path, 2, "field 'epochs'", load_slurm_workload, path)


class TestBrokenRealCopies:
    """Full copies of the public files with one line broken."""

    def test_philly_copy(self, traces_dir: Path, tmp_path: Path) -> None:
        lines = (traces_dir / "philly/pollux_philly.csv").read_text().splitlines(keepends=True)
        lines[40_000] = re.sub(r",\d+,", ",-3,", lines[40_000], count=1)  # num_gpus of line 40,001
        path = write(tmp_path, "pollux_philly.csv", lines)
        err = expect(path, 40_001, "field 'num_gpus'", load_philly, path)
        assert "'-3'" in str(err)

    def test_openb_copy(self, traces_dir: Path, tmp_path: Path) -> None:
        lines = (traces_dir / "alibaba/openb_pod_list_default.csv").read_text().splitlines(keepends=True)
        lines[5000] = lines[5000].replace(",", ";", 1)  # name and cpu_milli merge: one field short
        path = write(tmp_path, "openb.csv", lines)
        expect(path, 5001, "row", load_openb, path)

    def test_hpc2n_copy(self, traces_dir: Path, tmp_path: Path) -> None:
        text = gzip.decompress((traces_dir / "swf/HPC2N-2002-2.2-cln.swf.gz").read_bytes()).decode()
        lines = text.splitlines(keepends=True)
        lines[100_000] = lines[100_000].replace(" ", " abc ", 1)  # one extra field
        path = tmp_path / "hpc2n.swf.gz"
        path.write_bytes(gzip.compress("".join(lines).encode(), compresslevel=1))
        expect(path, 100_001, "row", load_swf, path)

    def test_rltune_copy(self, traces_dir: Path, tmp_path: Path) -> None:
        lines = (traces_dir / "rltune/synthetic_trace.csv").read_text().splitlines(keepends=True)
        fields = lines[499].split(",")
        fields[1] = "soon"
        lines[499] = ",".join(fields)
        path = write(tmp_path, "synthetic_trace.csv", lines)
        err = expect(path, 500, "field 'submit_time' (column 2)", load_rltune, path)
        assert "'soon'" in str(err)
