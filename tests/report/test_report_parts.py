"""The report's arithmetic and its HTML escaping, on small inputs worked out by hand.

The arithmetic is that of the numpy reference (``reference.py``), which the database's aggregates
are held to in ``test_report_sql.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.report.page import Html, el, esc, number
from shared.report.stats import NO_MODEL_YET
from tests.report.reference import (
    Jobs,
    SnapshotRecord,
    binned_percentiles,
    busy_timeline,
    fallback_counts,
    model_in_charge,
    stage_names,
    time_edges,
)


def snap(seq: int, version: str | None, fallback: str | None = None, rows: int = 1) -> SnapshotRecord:
    return SnapshotRecord(
        correlation_id=f"s{seq}",
        snapshot_time=float(seq),
        sequence=seq,
        policy="model" if version else "fcfs",
        model_version=version,
        fallback=fallback,
        latencies_ms={"featurizer_wait": 0.1, "featurizer": 1.0},
        latency_ms=1.1,
        rows=rows,
        placed=0,
    )


def running(*jobs: tuple[float, float, int]) -> Jobs:
    start = np.array([j[0] for j in jobs], dtype=np.float64)
    end = np.array([j[1] for j in jobs], dtype=np.float64)
    gpus = np.array([j[2] for j in jobs], dtype=np.float64)
    return Jobs(start, end, gpus)


def test_busy_gpus_is_a_step_function_of_the_running_jobs() -> None:
    # 2 GPUs on [0, 10), 3 on [5, 20), 1 on [10, 12): 2 | 5 | 4 | 3 between 0, 5, 10, 12, 20
    t = busy_timeline(running((0, 10, 2), (5, 20, 3), (10, 12, 1)), None, None)
    assert t is not None
    assert t.times.tolist() == [0, 5, 10, 12]
    assert t.busy.tolist() == [2, 5, 4, 3]
    assert t.mean == pytest.approx((2 * 5 + 5 * 5 + 4 * 2 + 3 * 8) / 20)
    assert t.peak == 5


def test_busy_gpus_resampled_keeps_the_area_and_the_peaks() -> None:
    t = busy_timeline(running((0, 10, 2), (5, 20, 3), (10, 12, 1)), None, None)
    assert t is not None
    edges, mean, peak = t.resample(2)
    assert edges.tolist() == [0, 10, 20]
    assert mean.tolist() == pytest.approx([(2 * 5 + 5 * 5) / 10, (4 * 2 + 3 * 8) / 10])
    assert peak.tolist() == [5, 4]
    _, mean4, peak4 = t.resample(4)  # bins [0,5) [5,10) [10,15) [15,20)
    assert mean4.tolist() == pytest.approx([2, 5, (4 * 2 + 3 * 3) / 5, 3])
    assert peak4.tolist() == [2, 5, 4, 3]


def test_busy_gpus_is_cut_to_the_range() -> None:
    # within [4, 11): 2 GPUs on [4, 5), 5 on [5, 10), 4 on [10, 11)
    t = busy_timeline(running((0, 10, 2), (5, 20, 3), (10, 12, 1)), 4.0, 11.0)
    assert t is not None
    assert t.times.tolist() == [4, 5, 10]
    assert t.mean == pytest.approx((2 * 1 + 5 * 5 + 4 * 1) / 7)
    assert busy_timeline(running((0, 3, 1)), 4.0, 11.0) is None  # ended before the range
    assert busy_timeline(running(), None, None) is None


def test_a_job_ending_when_another_starts_leaves_no_spike() -> None:
    t = busy_timeline(running((0, 10, 4), (10, 20, 4)), None, None)
    assert t is not None
    assert t.busy.tolist() == [4, 4] and t.peak == 4


def test_fallbacks_are_charged_to_the_model_in_charge() -> None:
    snaps = [
        snap(1, None, "no model loaded", rows=3),
        snap(2, "m1"),
        snap(3, None, "deadline"),
        snap(4, None, "deadline", rows=2),
        snap(5, "m2"),
        snap(6, None, "deadline"),
    ]
    assert model_in_charge(snaps) == [NO_MODEL_YET, "m1", "m1", "m1", "m2", "m2"]
    counts = {(f.model_version, f.reason): (f.snapshots, f.rows) for f in fallback_counts(snaps)}
    assert counts == {
        (NO_MODEL_YET, "no model loaded"): (1, 3),
        ("m1", "deadline"): (2, 3),
        ("m2", "deadline"): (1, 1),
    }
    assert fallback_counts(snaps)[0].model_version == "m1"  # most snapshots first


def test_stages_keep_the_pipeline_order() -> None:
    assert stage_names([snap(1, "m")]) == ["featurizer_wait", "featurizer"]


def test_percentiles_per_time_bin() -> None:
    edges = np.array([0.0, 10.0, 20.0])
    times = np.array([1.0, 2.0, 3.0, 20.0])  # the last edge belongs to the last bin
    values = np.array([1.0, 2.0, 3.0, 7.0])
    centres, p = binned_percentiles(times, values, edges, (50, 100))
    assert centres.tolist() == [5.0, 15.0]
    assert p.tolist() == [[2.0, 3.0], [7.0, 7.0]]
    _, empty = binned_percentiles(np.array([1.0]), np.array([1.0]), edges, (50,))
    assert np.isnan(empty[1, 0])


def test_time_bins_cover_the_range() -> None:
    edges = time_edges(np.arange(100, dtype=np.float64), None, None)
    assert edges[0] == 0 and edges[-1] == 99 and len(edges) == 21  # 100 times: 20 bins
    assert time_edges(np.arange(1000, dtype=np.float64), 50.0, 60.0).tolist()[::24] == [50.0, 60.0]
    assert len(time_edges(np.array([5.0]), None, None)) == 2  # one time: one bin, one second wide


def test_text_is_escaped_and_markup_is_not_escaped_twice() -> None:
    cell = el("td", '<img src=x onerror="alert(1)">', title='a"b', data_value=None, hidden=True)
    assert cell == '<td title="a&quot;b" hidden>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</td>'
    inner = el("em", "a & b")
    assert el("p", inner, " & ", esc("<x>")) == "<p><em>a &amp; b</em> &amp; &lt;x&gt;</p>"
    assert isinstance(esc("x"), Html) and el("img", src="data:,", alt="<") == '<img src="data:," alt="&lt;">'


def test_numbers_read_well() -> None:
    assert number(1234567) == "1,234,567"
    assert number(58.3333) == "58.3"
    assert number(0.000123) == "0.000123"
    assert number(123456.7) == "123,457"
    assert number(1651.26) == "1,651"
    assert number(-0.5) == "-0.5"
    assert number(float("nan")) == "–" and number(None) == "–"
