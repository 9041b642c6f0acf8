"""SWF fields 3, 13-16 (wait, group, executable, queue, partition) survive loading, the parsed-trace
cache and row selection; a bad value in them is one line naming the file, line and field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from shared.cli.app import app
from shared.domain.jobs import UNKNOWN
from shared.traces import TraceFormatError, load_trace

# job submit wait run alloc cpu mem reqp reqt reqm status user group exe queue part prec think
SWF = """\
; UnixStartTime: 1000000000
; Queue: 1 batch
; Queue: 2 debug
; Partition: 1 DEFAULT
1  0   5   100 4 -1 -1 4 600  -1 1 7  3  12 1  1  -1 -1
2  10  -1  200 2 -1 -1 2 -1   -1 1 8  -1 -1 2  -1 -1 -1
3  20  0   50  1 -1 -1 1 300  -1 1 7  3  13 -1 2  -1 -1
4  30  7   -1  1 -1 -1 1 300  -1 1 7  3  13 1  1  -1 -1
"""


def _write(tmp_path: Path, text: str = SWF, name: str = "tiny.swf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("use_cache", [False, True])
def test_optional_fields_round_trip(tmp_path: Path, use_cache: bool) -> None:
    path = _write(tmp_path)
    if use_cache:
        load_trace(str(path))  # the first load writes the cache entry
    loaded = load_trace(str(path), use_cache=use_cache)
    assert loaded.from_cache == use_cache
    t = loaded.table
    assert t.ids.tolist() == ["1", "2", "3"]  # job 4 has no run time: excluded, counted
    assert [t.label("group", i) for i in range(3)] == ["3", None, "3"]
    assert [t.label("app", i) for i in range(3)] == ["12", None, "13"]
    assert [t.label("queue", i) for i in range(3)] == ["batch", "debug", None]
    assert [t.label("partition", i) for i in range(3)] == ["DEFAULT", None, "2"]
    np.testing.assert_array_equal(t.logged_wait, [5.0, np.nan, 0.0])
    # the scheduling view of the same labels keeps its neutral names
    assert [t.qoses[q] for q in t.qos] == ["batch", "debug", "normal"]
    assert [t.vcs[v] for v in t.vc] == ["DEFAULT", "default", "2"]
    sub = t.take([2, 0])
    assert sub.group.tolist() == [t.group[2], t.group[0]] and sub.groups == t.groups
    assert t.has_column("app") and t.has_column("logged_wait")


def test_traces_without_the_fields_mark_them_missing(tmp_path: Path) -> None:
    philly = tmp_path / "philly.csv"
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,vc1\n")
    t = load_trace(str(philly)).table
    assert t.group.tolist() == [UNKNOWN] and t.app.tolist() == [UNKNOWN] and t.groups == []
    assert np.isnan(t.logged_wait).all() and not t.has_column("group")


def test_bad_group_is_one_line_naming_file_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, SWF.replace("1 7  3  12", "1 7  x  12"), "broken.swf")
    with pytest.raises(TraceFormatError) as err:
        load_trace(str(path))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("broken.swf line 5, field 'group_id' (column 13)")


def test_cli_predicted_estimates_on_a_bad_trace_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, SWF.replace("1 7  3  12", "1 7  3.5  12"), "broken.swf")
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(path), "--cluster", "hpc2n", "--estimates", "predicted"]
    )
    assert result.exit_code == 2
    assert "broken.swf line 5" in result.output and "group_id" in result.output
    assert "Traceback" not in result.output


def test_cli_unknown_estimate_model_lists_predicted(tmp_path: Path) -> None:
    path = _write(tmp_path)
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(path), "--cluster", "hpc2n", "--estimates", "nope"]
    )
    assert result.exit_code == 2
    assert "unknown estimate model 'nope'" in result.output and "predicted" in result.output
    assert "Traceback" not in result.output
