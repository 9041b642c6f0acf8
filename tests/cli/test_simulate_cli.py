"""`hylo simulate` end to end: the embedded default, its outputs, and clear errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.cli.app import app

runner = CliRunner()


def test_simulate_embedded_writes_report_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--jobs",
            "1500",
            "--windows",
            "3",
            "--window-size",
            "300",
            "--policies",
            "fcfs,sjf,multifactor",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "simulate.json").read_text())
    assert report["setup"]["cluster"] == "embedded"
    assert len(report["setup"]["windows"]) == 3
    assert set(report["setup"]["sim_seconds"]) == {"fcfs", "sjf", "multifactor"}
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "box_wait_mean.png" in pngs and "cdf_wait.png" in pngs
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 5_000


def test_simulate_paper_setting_runs_cold_windows(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--jobs",
            "800",
            "--windows",
            "2",
            "--window-size",
            "200",
            "--policies",
            "fcfs",
            "--paper",
            "--no-plots",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "simulate.json").read_text())
    cfg = report["setup"]["config"]
    assert (cfg["backfill"], cfg["placement"], cfg["oracle_runtimes"]) == ("none", "first-fit", True)
    assert report["setup"]["warmup"] == 0


def test_unknown_policy_is_a_clear_error() -> None:
    result = runner.invoke(app, ["simulate", "--policies", "fcfs,nope"])
    assert result.exit_code == 2
    assert "unknown policy nope" in result.output
    assert "Traceback" not in result.output


def test_missing_trace_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.csv"
    result = runner.invoke(app, ["simulate", "--trace", str(missing), "--cluster", "philly"])
    assert result.exit_code == 2
    assert "nothing.csv" in result.output
    assert "Traceback" not in result.output


def test_malformed_trace_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "philly.csv"
    bad.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        "2017-10-09 07:02:55,abc,1,66.0,11cb48\n"
    )
    result = runner.invoke(app, ["simulate", "--trace", str(bad), "--cluster", "philly"])
    assert result.exit_code == 2
    assert "philly.csv" in result.output and "line 3" in result.output and "duration" in result.output
    assert "Traceback" not in result.output


def test_bad_cluster_spec_names_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text(
        'name = "x"\n[[node_groups]]\nname = "a"\ngpu_type = "T4"\ncount = 0\ngpus = 2\ncpus = 8\nmem_gib = 16\n'
    )
    result = runner.invoke(app, ["simulate", "--cluster", str(spec), "--jobs", "100"])
    assert result.exit_code == 2
    assert "c.toml" in result.output and "node_groups.0.count" in result.output
    assert "Traceback" not in result.output


def test_placement_ablation_rows_are_policy_at_placement(tmp_path: Path) -> None:
    """--placement with several values runs every policy with every placement, paired."""
    import json

    out = tmp_path / "abl"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--jobs",
            "400",
            "--windows",
            "2",
            "--window-size",
            "100",
            "--policies",
            "fcfs",
            "--placement",
            "best-fit,cp-sat",
            "--no-plots",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "simulate.json").read_text())
    assert report["setup"]["placements"] == ["best-fit", "cp-sat"]
    stats = report["setup"]["placer_stats"]
    assert list(stats) == ["fcfs@cp-sat"] and stats["fcfs@cp-sat"][0]["solves"] > 0


def test_unknown_placement_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["simulate", "--jobs", "200", "--placement", "best-fit,worst-fit", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--placement must be from first-fit, best-fit, cp-sat" in result.output


CHECKPOINT = Path(__file__).parents[2] / "docs/results/runs/rltune-easy-fcfs-wait/checkpoint"


def test_simulate_compares_a_trained_prioritizer_under_every_placement(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "2000", "--windows", "2", "--window-size", "64", "--policies", "fcfs"]
    args += ["--placement", "first-fit,best-fit", "--model", str(CHECKPOINT), "--no-plots"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "simulate.json").read_text())
    rows = set(report["policies"])
    expected = {f"{p}@{pl}" for p in ("fcfs", "learned/fcfs") for pl in ("first-fit", "best-fit")}
    assert expected <= rows, rows


def test_simulate_with_a_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--jobs", "500", "--model", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "cannot use checkpoint" in result.output and "nowhere" in result.output


def test_unknown_baseline_is_refused_before_anything_runs(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "200", "--policies", "fcfs,sjf", "--out", str(tmp_path)]
    result = runner.invoke(app, [*args, "--baseline", "bogus"])
    assert result.exit_code == 2
    assert "unknown --baseline 'bogus'; choose from fcfs, sjf" in result.output
    assert "Traceback" not in result.output and "loading workload" not in result.output
    assert not (tmp_path / "simulate.json").exists()
    # in a placement ablation the rows are policy@placement, and so is the baseline
    ablation = [*args, "--placement", "first-fit,best-fit", "--baseline", "sjf"]
    result = runner.invoke(app, ablation)
    assert result.exit_code == 2
    assert "choose from fcfs@first-fit, sjf@first-fit, fcfs@best-fit, sjf@best-fit" in result.output


def test_load_table_and_per_window_excluded_counts(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "900", "--windows", "3", "--window-size", "300", "--policies", "fcfs"]
    result = runner.invoke(app, [*args, "--load", "0.9", "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Load over each window's span" in result.output
    assert "offered load" in result.output  # the load beside the utilization
    report = json.loads((tmp_path / "simulate.json").read_text())
    offered = report["setup"]["offered_load"]
    assert report["setup"]["load_definition"] == "in-span" and offered["definition"] == "in-span"
    assert offered["workload"] == pytest.approx(0.9)
    assert len(offered["windows"]) == 3 and all(0 < x < 2 for x in offered["windows"])
    fcfs = report["policies"]["fcfs"]
    assert set(fcfs["load"]) == {"utilization", "queue_mean", "queued_frac"}
    windows = fcfs["windows"]
    assert all(w["t0_s"] <= w["last_arrival_s"] <= w["t1_s"] for w in windows)
    assert fcfs["totals"]["excluded"] == sum(w["excluded"] for w in windows)


def test_a_load_out_of_reach_names_the_option_and_the_reach(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "50", "--windows", "1", "--window-size", "20", "--policies", "fcfs"]
    result = runner.invoke(app, [*args, "--load", "0.9", "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "offered load 0.9 is out of reach" in result.output
    assert "reachable loads are up to" in result.output and "pass --load" in result.output
    assert "Traceback" not in result.output


def test_the_capped_definition_stays_available(tmp_path: Path) -> None:
    args = ["simulate", "--jobs", "900", "--windows", "1", "--window-size", "300", "--policies", "fcfs"]
    args += ["--load", "0.9", "--no-plots", "--out", str(tmp_path)]
    result = runner.invoke(app, [*args, "--load-definition", "capped"])
    assert result.exit_code == 0, result.output
    setup = json.loads((tmp_path / "simulate.json").read_text())["setup"]
    assert setup["load_definition"] == "capped" and setup["workload"].endswith("(capped)")
    assert setup["offered_load"]["workload"] < 0.9  # in-span, what the capped 0.9 really offers
    bad = runner.invoke(app, [*args, "--load-definition", "uncapped"])
    assert bad.exit_code == 2 and "choose from in-span, capped" in bad.output
