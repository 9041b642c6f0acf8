"""PolicyComparison: table, JSON and plots built from per-window summaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from shared.metrics import (
    METRICS,
    DistStats,
    PolicyComparison,
    Window,
    WindowMetrics,
    get_spec,
    summarize_window,
)
from shared.scheduling.result import SimResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fake_window(label: str, wait: float, util: float, *, unfinished: int = 0, seed: int = 0) -> WindowMetrics:
    """A WindowMetrics with chosen mean wait and utilization (other fields derived, plausible)."""
    rng = np.random.default_rng(seed)
    waits = rng.exponential(wait, size=20) if wait > 0 else np.zeros(20)
    if wait > 0:
        waits *= wait / waits.mean()  # exact mean
    stats = DistStats.of(waits)
    jct = DistStats.of(waits + 600.0)
    bsld = DistStats.of(1.0 + waits / 600.0)
    return WindowMetrics(
        label=label,
        n_jobs=20,
        n_unstarted=unfinished,
        n_unfinished=unfinished,
        excluded=1,
        capacity_gpus=8,
        bsld_bound_s=10.0,
        t0_s=0.0,
        t1_s=3600.0,
        makespan_s=3600.0,
        wait_s=stats,
        jct_s=jct,
        bsld=bsld,
        busy_gpu_hours=8 * util,
        utilization=util,
        idle_gpu_hours_while_waiting=8 * (1 - util) / 2,
        idle_frac_while_waiting=(1 - util) / 2,
        job_waits_s=tuple(waits.tolist()),
    )


def make_comparison(**kwargs: object) -> PolicyComparison:
    """FCFS baseline, SJF 20% lower wait and better utilization, 'random' worse; 12 windows."""
    loads = np.random.default_rng(0).uniform(500, 5000, size=12)
    labels = [f"jobs[{100 * k}:{100 * k + 100}]" for k in range(12)]
    data = {
        "fcfs": [
            fake_window(lbl, w, 0.7, seed=k) for k, (lbl, w) in enumerate(zip(labels, loads, strict=True))
        ],
        "sjf": [
            fake_window(lbl, 0.8 * w, 0.75, seed=k)
            for k, (lbl, w) in enumerate(zip(labels, loads, strict=True))
        ],
        "random": [
            fake_window(lbl, 1.3 * w, 0.6, unfinished=1, seed=k)
            for k, (lbl, w) in enumerate(zip(labels, loads, strict=True))
        ],
    }
    return PolicyComparison(data, **kwargs)  # type: ignore[arg-type]


def render(table: object, width: int = 250) -> str:
    console = Console(record=True, width=width, force_terminal=False)
    console.print(table)
    return console.export_text()


def test_summary_and_baseline() -> None:
    cmp = make_comparison(baseline="fcfs")
    assert cmp.policies == ["fcfs", "sjf", "random"] and cmp.n_windows == 12
    assert cmp.vs_baseline("wait_mean", "fcfs") is None
    sjf = cmp.vs_baseline("wait_mean", "sjf")
    assert sjf is not None
    assert sjf.rel_improvement == pytest.approx(0.2)  # 20% lower wait, positive = better
    assert sjf.rel_low > 0 and sjf.frac_a_better == 1.0
    util = cmp.vs_baseline("utilization", "random")
    assert util is not None and util.rel_improvement == pytest.approx(-1 / 7)  # (0.6 - 0.7) / 0.7
    s = cmp.summary("wait_mean", "fcfs")
    assert s.low <= s.mean <= s.high
    assert cmp.summary("wait_mean", "fcfs") is s  # cached: table, JSON and plots share numbers


def test_default_baseline_is_first_policy() -> None:
    assert make_comparison().baseline == "fcfs"


def test_table_renders() -> None:
    cmp = make_comparison(baseline="fcfs", title="Test run")
    text = render(cmp.table())
    assert "Test run" in text
    for policy in ("fcfs", "sjf", "random"):
        assert policy in text
    assert "baseline" in text and "vs fcfs" in text
    assert "+20.0%" in text and "[+20.0, +20.0]" in text  # sjf's wait gain and its interval
    assert "12 / 240" in text  # random left 1 job per window unfinished, shown, not hidden
    assert "95% bootstrap CI" in text
    for header in ("Wait ↓", "(min)", "JCT ↓", "BSLD ↓", "GPU util ↑", "(%)", "Idle|queued ↓"):
        assert header in text


def test_compact_table_fits_narrow_console() -> None:
    text = render(make_comparison().table(compact=True), width=120)
    assert "+20.0%" in text and "[+20.0, +20.0]" in text  # not wrapped
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 120


def test_json_is_strict_and_complete(tmp_path: Path) -> None:
    cmp = make_comparison(baseline="sjf")
    path = cmp.write_json(tmp_path / "sub" / "report.json")
    data = json.loads(path.read_text())
    assert data["baseline"] == "sjf" and data["n_windows"] == 12 and data["seed"] == 0
    assert data["window_labels"][0] == "jobs[0:100]"
    fcfs = data["policies"]["fcfs"]
    assert set(fcfs["metrics"]) == {
        "wait_mean",
        "jct_mean",
        "bsld_mean",
        "utilization",
        "idle_frac_while_waiting",
    }
    assert fcfs["metrics"]["wait_mean"]["vs_baseline"]["rel_improvement"] == pytest.approx(
        -0.25
    )  # (0.8-1)/0.8
    assert data["policies"]["sjf"]["metrics"]["wait_mean"]["vs_baseline"] is None
    assert len(fcfs["metrics"]["wait_mean"]["values"]) == 12
    assert len(fcfs["windows"]) == 12
    assert data["policies"]["random"]["totals"] == {
        "n_jobs": 240,
        "n_unstarted": 12,
        "n_unfinished": 12,
        "excluded": 12,
    }
    # the windows read back as WindowMetrics
    back = WindowMetrics.model_validate(fcfs["windows"][0])
    assert back.label == "jobs[0:100]"


def test_no_data_becomes_null_and_na(cut_off: SimResult) -> None:
    # cut_off's window of job D has no wait data at all: its mean is NaN -> null in JSON, never
    # "NaN", and "n/a" in the table
    cmp = PolicyComparison({"a": [summarize_window(cut_off, [3])], "b": [summarize_window(cut_off, [3])]})
    data = cmp.to_dict()
    json.dumps(data, allow_nan=False)
    wait = data["policies"]["a"]["metrics"]["wait_mean"]
    assert (wait["mean"], wait["n"], wait["n_nan"]) == (None, 0, 1)
    assert data["policies"]["b"]["metrics"]["wait_mean"]["vs_baseline"]["rel_improvement"] is None
    assert "n/a" in render(cmp.table())


def test_pairing_is_checked() -> None:
    a = [fake_window("jobs[0:10]", 10, 0.5), fake_window("jobs[10:20]", 10, 0.5)]
    b = [fake_window("jobs[0:10]", 10, 0.5), fake_window("jobs[20:30]", 10, 0.5)]
    with pytest.raises(ValueError, match="window 1"):
        PolicyComparison({"a": a, "b": b})
    with pytest.raises(ValueError, match="same windows"):
        PolicyComparison({"a": a, "b": a[:1]})
    with pytest.raises(ValueError, match="at least one window"):
        PolicyComparison({"a": [], "b": []})
    with pytest.raises(ValueError, match="at least one policy"):
        PolicyComparison({})
    with pytest.raises(KeyError, match="baseline"):
        PolicyComparison({"a": a}, baseline="nope")
    with pytest.raises(KeyError, match="unknown metric"):
        PolicyComparison({"a": a}, metrics=["speed"])
    # unlabeled windows cannot be checked and are accepted
    PolicyComparison({"a": a, "c": [fake_window("", 1, 0.5), fake_window("", 1, 0.5)]})


def test_metric_registry_directions() -> None:
    assert not get_spec("utilization").lower_is_better
    assert all(METRICS[k].lower_is_better for k in ("wait_mean", "jct_mean", "bsld_mean", "makespan"))


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"


def test_plots_written(tmp_path: Path) -> None:
    cmp = make_comparison(baseline="fcfs", title="Philly, 12 windows")
    paths = cmp.plot(tmp_path / "plots", prefix="philly_")
    names = [p.name for p in paths]
    assert names == [
        "philly_box_wait_mean.png",
        "philly_box_jct_mean.png",
        "philly_box_bsld_mean.png",
        "philly_box_utilization.png",
        "philly_cdf_wait.png",
    ]
    for p in paths:
        _assert_png(p)


def test_plots_from_real_summaries(tmp_path: Path, three_jobs: SimResult, cut_off: SimResult) -> None:
    windows = [Window(0, 3)]
    cmp = PolicyComparison(
        {
            "complete": [summarize_window(three_jobs, w) for w in windows],
            "cut off": [summarize_window(cut_off, range(4), label=w.label) for w in windows],
        }
    )
    paths = cmp.plot(tmp_path, metrics=["wait_p95", "idle_frac_while_waiting"])
    assert [p.name for p in paths] == ["box_wait_p95.png", "box_idle_frac_while_waiting.png", "cdf_wait.png"]
    for p in paths:
        _assert_png(p)


def test_cdf_skipped_without_per_job_waits(tmp_path: Path) -> None:
    # summaries read back from JSON carry no per-job waits: no empty CDF is drawn
    loaded = [WindowMetrics.model_validate_json(fake_window("w", 5, 0.5).model_dump_json())]
    paths = PolicyComparison({"a": loaded}).plot(tmp_path, metrics=["wait_mean"])
    assert [p.name for p in paths] == ["box_wait_mean.png"]
    assert PolicyComparison({"a": loaded}).plot(tmp_path, metrics=[], cdf=False) == []


def test_load_table_from_real_summaries(three_jobs: SimResult, cut_off: SimResult) -> None:
    # three jobs over [0, 20]: utilization 50%, queue 0.5 jobs, non-empty 50% of the time;
    # with D over [0, 130]: 325 / 520 = 62.5%, 90 / 130 = 0.692 jobs, 69.2% of the time
    cmp = PolicyComparison(
        {
            "complete": [summarize_window(three_jobs, range(3), label="w")],
            "cut off": [summarize_window(cut_off, range(4), label="w")],
        }
    )
    text = render(cmp.load_table(), width=120)
    assert "Mean queue" in text and "Queue non-empty" in text
    complete = next(line for line in text.splitlines() if line.startswith(" complete"))
    assert complete.split()[1:] == ["50.0", "0.5", "50.0"]
    cut = next(line for line in text.splitlines() if line.startswith(" cut off"))
    assert cut.split()[2:] == ["62.5", "0.692", "69.2"]
    load = cmp.to_dict()["policies"]["cut off"]["load"]
    assert load["queue_mean"]["mean"] == pytest.approx(90.0 / 130.0)


def test_load_table_puts_the_offered_load_beside_utilization(three_jobs: SimResult) -> None:
    cmp = PolicyComparison({"complete": [summarize_window(three_jobs, range(3), label="w")]})
    text = render(cmp.load_table([0.6]), width=120)
    offered = next(line for line in text.splitlines() if line.lstrip().startswith("offered load"))
    assert offered.split()[2:] == ["60.0", "-", "-"]  # under utilization; queues are the policies'
    assert "every job" in text and "started on arrival" in text  # the caption says what it is
    with pytest.raises(ValueError, match="2 offered loads for 1 windows"):
        cmp.load_table([0.6, 0.7])


def test_best_baseline_is_the_best_mean_among_the_baselines_only() -> None:
    """SJF has the lowest wait of the baselines; 'random' is not one, so it is never the best.
    Against SJF, FCFS's wait is worse by 1/0.8 - 1 = 25% (lower is better: gain -25%)."""
    cmp = make_comparison(baselines=["fcfs", "sjf"])
    assert cmp.best_baseline("wait_mean") == "sjf"
    assert cmp.best_baseline("utilization") == "sjf"  # 0.75 > 0.7, higher is better
    assert cmp.vs_best("wait_mean", "sjf") is None
    diff = cmp.vs_best("wait_mean", "fcfs")
    assert diff is not None
    assert diff.rel_improvement == pytest.approx(-0.25)
    assert diff.rel_high < 0
    only_fcfs = make_comparison(baselines=["fcfs"])
    assert only_fcfs.best_baseline("wait_mean") == "fcfs"
    assert make_comparison().best_baseline("wait_mean") is None
    with pytest.raises(KeyError, match="baselines"):
        make_comparison(baselines=["lifo"])


def test_best_table_and_json_name_the_best_baseline() -> None:
    cmp = make_comparison(baselines=["fcfs", "sjf"])
    table = cmp.best_table(["random"])
    assert table is not None
    text = render(table)
    assert "vs sjf" in text and "random" in text
    doc = cmp.to_dict()
    assert doc["best_baseline"]["wait_mean"] == "sjf"
    gain = doc["policies"]["random"]["metrics"]["wait_mean"]["vs_best_baseline"]["rel_improvement"]
    assert gain == pytest.approx(1 - 1.3 / 0.8)
    assert "vs_best_baseline" not in doc["policies"]["sjf"]["metrics"]["wait_mean"]
    assert make_comparison().best_table(["random"]) is None


def test_no_wait_share_counts_windows_where_every_job_started_on_arrival() -> None:
    labels = ["a", "b", "c", "d"]
    quiet = [fake_window(lbl, 0.0, 0.5) for lbl in labels[:3]] + [fake_window("d", 100.0, 0.5)]
    cut = [fake_window(lbl, 0.0, 0.5, unfinished=1 if lbl == "a" else 0) for lbl in labels]
    cmp = PolicyComparison({"x": quiet, "y": cut})
    assert quiet[0].wait_s.mean == 0.0 and quiet[3].wait_s.mean == pytest.approx(100.0)
    assert cmp.no_wait_share("x") == pytest.approx(0.75)
    assert cmp.no_wait_share("y") == pytest.approx(0.75)  # an unstarted job waited
    assert "75%" in render(cmp.table())
    assert "no wait 75%" in render(cmp.table(compact=True))
    assert cmp.to_dict()["policies"]["x"]["no_wait_share"] == pytest.approx(0.75)
