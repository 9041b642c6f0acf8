"""``hylo train`` and ``hylo evaluate`` end to end on a small embedded workload, and the refusal of
a checkpoint whose feature schema differs from this code's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.cli.app import app
from shared.features import FeatureConfig, FeatureSchema

runner = CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("train")
    args = ["train", "--jobs", "1500", "--epochs", "1", "--windows-per-epoch", "2", "--window-size", "48"]
    args += ["--warmup", "16", "--validation-windows", "1", "--test-windows", "1", "--metric", "wait"]
    args += ["--load", "0.9", "--placement", "cp-sat"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_train_writes_checkpoint_log_and_curve(trained: Path) -> None:
    card = json.loads((trained / "checkpoint" / "card.json").read_text())
    assert card["training"]["base_policy"] == "fcfs" and card["training"]["metric"] == "wait"
    assert card["training"]["held_out"]["windows"] == 1
    assert card["training"]["extra"]["load"] == 0.9  # evaluate replays the same arrivals
    assert card["training"]["extra"]["load_definition"] == "in-span"  # under the same definition
    assert card["training"]["extra"]["placement"] == "cp-sat"  # and places as trained
    assert card["training"]["extra"]["estimates"] == "noisy"  # with the information it had
    assert len(card["features"]["schema_hash"]) == 64
    log = json.loads((trained / "train_log.json").read_text())
    assert [row["epoch"] for row in log["history"]] == [0, 1]
    assert (trained / "train_log.csv").read_text().startswith("")
    assert (trained / "training_curve.png").stat().st_size > 1000


def test_evaluate_compares_with_baselines_on_held_out_windows(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    args = [
        "evaluate",
        "--checkpoint",
        str(trained / "checkpoint"),
        "--windows",
        "2",
        "--policies",
        "fcfs,sjf",
    ]
    result = runner.invoke(app, [*args, "--transfer", "sjf", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "evaluate.json").read_text())
    assert set(report["policies"]) == {"fcfs", "sjf", "learned-greedy", "learned-sampled", "learned/sjf"}
    test_start, _ = report["setup"]["test_jobs"]
    assert test_start == 1350  # the last 10% of 1,500 jobs
    assert all(int(label.split("[")[1].split(":")[0]) >= test_start for label in report["window_labels"])
    assert report["policies"]["learned-greedy"]["metrics"]["wait_mean"]["vs_baseline"]["n"] == 2
    assert (out / "box_bsld_mean.png").exists()
    assert report["setup"]["estimates"] == "noisy"  # the card's
    assert report["best_baseline"]["wait_mean"] in {"fcfs", "sjf"}


def test_evaluate_uses_the_cards_estimates_unless_told(trained: Path, tmp_path: Path) -> None:
    """A card trained on history estimates is evaluated on them; --estimates overrides it."""
    folder = tmp_path / "history-card"
    folder.mkdir()
    (folder / "weights.pt").write_bytes((trained / "checkpoint" / "weights.pt").read_bytes())
    card = json.loads((trained / "checkpoint" / "card.json").read_text())
    card["training"]["extra"]["estimates"] = "history"
    (folder / "card.json").write_text(json.dumps(card))
    base = ["evaluate", "--checkpoint", str(folder), "--windows", "1", "--policies", "fcfs", "--no-plots"]
    base += ["--no-sampled"]
    for extra, expected in (([], "history"), (["--estimates", "oracle"], "oracle")):
        out = tmp_path / f"eval-{expected}"
        result = runner.invoke(app, [*base, *extra, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "evaluate.json").read_text())["setup"]["estimates"] == expected


def test_evaluate_keeps_an_old_cards_load_definition(trained: Path, tmp_path: Path) -> None:
    """A card without ``load_definition`` (every card before it) was trained with the capped load:
    evaluated as trained, its arrivals are rescaled the capped way; this card's own, in-span."""
    old = tmp_path / "old"
    old.mkdir()
    (old / "weights.pt").write_bytes((trained / "checkpoint" / "weights.pt").read_bytes())
    card = json.loads((trained / "checkpoint" / "card.json").read_text())
    del card["training"]["extra"]["load_definition"]
    (old / "card.json").write_text(json.dumps(card))
    args = ["--windows", "1", "--policies", "fcfs", "--no-sampled", "--no-plots"]
    for checkpoint, definition in ((old, "capped"), (trained / "checkpoint", "in-span")):
        out = tmp_path / definition
        result = runner.invoke(app, ["evaluate", "--checkpoint", str(checkpoint), *args, "--out", str(out)])
        assert result.exit_code == 0, result.output
        report = json.loads((out / "evaluate.json").read_text())
        assert report["setup"]["load"] == {"target": 0.9, "definition": definition}
        assert report["setup"]["workload"].endswith("(capped)") == (definition == "capped")


def test_evaluate_runs_a_transfer_base_missing_from_policies(trained: Path, tmp_path: Path) -> None:
    """--transfer Y compares the model laid over Y with Y alone: Y runs even when --policies
    leaves it out (it raised a KeyError traceback before)."""
    out = tmp_path / "eval"
    args = ["evaluate", "--checkpoint", str(trained / "checkpoint"), "--windows", "1", "--policies", "fcfs"]
    result = runner.invoke(app, [*args, "--transfer", "wfp3", "--no-sampled", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "evaluate.json").read_text())
    assert {"fcfs", "wfp3", "learned/wfp3"} <= set(report["policies"])
    assert set(report["transfer"]) == {"wfp3"}


def test_evaluate_refuses_a_checkpoint_with_another_feature_schema(trained: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "weights.pt").write_bytes((trained / "checkpoint" / "weights.pt").read_bytes())
    card = json.loads((trained / "checkpoint" / "card.json").read_text())
    # as if trained by an older featurizer with another time horizon: its schema and hash differ
    older = FeatureSchema.current(config=FeatureConfig(horizon_s=3600.0))
    card["training"]["extra"]["feature_schema"] = older.to_dict()
    card["features"]["schema_hash"] = older.hash
    (bad / "card.json").write_text(json.dumps(card))
    result = runner.invoke(
        app, ["evaluate", "--checkpoint", str(bad), "--windows", "1", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "feature schema" in result.output and older.hash in result.output
    assert "horizon_s" in result.output  # the difference is named


def test_load_rescales_the_training_workload() -> None:
    from shared.rl.setup import RunSetup, load_runner

    natural, _ = load_runner(None, None, RunSetup(n_jobs=1500))
    loaded, _ = load_runner(None, None, RunSetup(n_jobs=1500, target_load=0.9))
    span = lambda w: float(w.bound.jobs.submit.max() - w.bound.jobs.submit.min())  # noqa: E731
    assert len(loaded.bound.jobs) == len(natural.bound.jobs)
    assert span(loaded) != span(natural)  # arrivals moved to offer load 0.9


def test_train_refuses_an_unknown_feature_set(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--feature-set", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown --feature-set 'nope'; choose from classic, predicted" in result.output
