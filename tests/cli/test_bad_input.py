"""Every user error of ``hylo`` is one line (issue 21, item 7): a bad-input suite over each subcommand.

Each case runs in-process (Typer's CliRunner) and must end with a non-zero exit, no exception left to
Python (a traceback), exactly one ``error:`` line, and that line must name the option or file and
say what was expected. Nothing may start: ``hylo run``'s stack is replaced by one that fails the test
if it is ever built, and the cases run in an empty working directory that must stay free of a
``hylo.db``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shared.cli.app import app
from shared.config import HyloSettings

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = ROOT / "docs/results/runs/rltune-easy-fcfs-bsld/checkpoint"
PHILLY = HyloSettings().traces_dir / "philly"
needs_philly = pytest.mark.skipif(not PHILLY.is_dir(), reason="the public traces are not beside the checkout")
MYSQL = "mysql://user@db.example/hylo"
SUPPORTED = "expected a SQLite file path"


def _damaged_checkpoint(folder: Path, damage: str) -> Path:
    """The shipped checkpoint with its weights truncated or zeroed in the middle, and its card's
    sha256 rewritten to match, so that only reading the weights can tell."""
    shutil.copytree(CHECKPOINT, folder)
    weights = folder / "weights.pt"
    data = bytearray(weights.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 3]
    else:
        data[3000:20000] = bytes(17000)
    weights.write_bytes(bytes(data))
    card = json.loads((folder / "card.json").read_text())
    card["weights_sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    (folder / "card.json").write_text(json.dumps(card))
    return folder


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bad inputs, as files: a header-only trace, broken cluster specs, damaged checkpoints."""
    d = tmp_path_factory.mktemp("bad-inputs")
    (d / "header.csv").write_text("timestamp,duration,num_gpus,gpu_time,cluster\n")
    (d / "garbage.toml").write_text("this is [ not toml\n")
    (d / "empty.toml").write_text("")
    (d / "notadb.db").write_text("hello, not SQLite\n")
    (d / "a-file").write_text("")
    (d / "folder").mkdir()
    _damaged_checkpoint(d / "truncated", "truncated")
    _damaged_checkpoint(d / "corrupt", "zeroed")
    (d / "badcard").mkdir()
    (d / "badcard" / "card.json").write_text("{")
    (d / "badcard" / "weights.pt").write_bytes(b"x")
    return d


@pytest.fixture(autouse=True)
def _nothing_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shared.cli.run

    class NoStack:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("a bad input must fail before hylo run starts anything")

    monkeypatch.setattr(shared.cli.run, "LocalStack", NoStack)
    monkeypatch.chdir(tmp_path)
    for name in ("HYLO_DATABASE_URL", "HYLO_DEBUG", "HYLO_REGISTRY_CLUSTER", "HYLO_CONFIG"):
        monkeypatch.delenv(name, raising=False)


# (arguments, with {d} for the inputs folder; what the error line must contain)
CASES: list[tuple[list[str], list[str]]] = [
    # -- hylo simulate
    (["simulate", "--jobs", "0"], ["'--jobs'", "greater than or equal to 1"]),
    (["simulate", "--jobs", "abc"], ["'--jobs'", "valid integer"]),
    (["simulate", "--window-size", "0"], ["'--window-size'", "greater than or equal to 1"]),
    (["simulate", "--windows", "0"], ["'--windows'", "greater than or equal to 1"]),
    (["simulate", "--warmup", "-1"], ["'--warmup'", "greater than or equal to 0"]),
    (["simulate", "--max-reservations", "-1"], ["'--max-reservations'", "greater than or equal to 0"]),
    (["simulate", "--node-slack", "-1"], ["'--node-slack'", "greater than or equal to 0"]),
    (["simulate", "--estimates", "bogus"], ["--estimates", "'bogus'", "noisy", "trace"]),
    (["simulate", "--load", "-1"], ["--load -1", "> 0"]),
    (["simulate", "--load-definition", "bogus"], ["--load-definition", "in-span, capped"]),
    (["simulate", "--policies", "fcfs,nope"], ["unknown policy nope", "choose from fcfs"]),
    (["simulate", "--placement", "worst-fit"], ["--placement", "first-fit, best-fit, cp-sat"]),
    (["simulate", "--backfill", "lazy"], ["--backfill", "easy, greedy or none"]),
    (["simulate", "--split", "middle"], ["--split", "all or test"]),
    (["simulate", "--trace", "{d}/missing.csv"], ["missing.csv", "no such file"]),
    (["simulate", "--trace", "{d}/header.csv"], ["header.csv", "pass --cluster"]),
    (["simulate", "--trace", "{d}/header.csv", "--cluster", "philly"], ["header.csv", "0 job(s)"]),
    (["simulate", "--cluster", "nosuchpreset"], ["'nosuchpreset'", "no such preset", "embedded"]),
    (["simulate", "--cluster", "{d}/garbage.toml"], ["garbage.toml", "not valid TOML"]),
    (["simulate", "--cluster", "{d}/empty.toml"], ["empty.toml", "name: Field required"]),
    (["simulate", "--model", "{d}/missing"], ["--model", "missing/card.json"]),
    (["simulate", "--model", "{d}/truncated"], ["--model", "truncated/weights.pt", "not a zip file"]),
    (["simulate", "--model", "{d}/corrupt"], ["--model", "corrupt", "weights cannot be read"]),
    (["simulate", "--model", "{d}/badcard"], ["--model", "card.json", "not a valid model card"]),
    (["simulate", "--out", "{d}/a-file"], ["--out", "a-file", "expected a folder"]),
    (
        ["simulate", "--jobs", "50", "--window-size", "100", "--policies", "fcfs"],
        ["--window-size", "50 jobs"],
    ),
    (["simulate", "--nosuch"], ["No such option: --nosuch", "hylo simulate --help"]),
    pytest.param(
        ["simulate", "--trace", "philly", "--estimates", "trace"],
        ["--estimates trace", "'philly'", "no runtime estimate", "noisy"],
        marks=needs_philly,
    ),
    # -- hylo train
    (["train", "--epochs", "-1"], ["--epochs", ">= 0"]),
    (["train", "--window-size", "0"], ["'--window-size'", "greater than or equal to 1"]),
    (["train", "--workers", "0"], ["'--workers'", "greater than or equal to 1"]),
    (["train", "--train-fraction", "1.5"], ["--train-fraction 1.5", "between 0 and 1"]),
    (["train", "--learning-rate", "0"], ["--learning-rate", "> 0"]),
    (["train", "--metric", "bogus"], ["unknown metric 'bogus'", "wait, jct, bsld"]),
    (["train", "--base-policy", "lifo"], ["base policy 'lifo'", "choose from fcfs"]),
    (["train", "--estimates", "guess"], ["--estimates", "'guess'"]),
    (["train", "--trace", "{d}/header.csv", "--cluster", "philly"], ["header.csv", "0 job(s)"]),
    (["train", "--jobs", "100", "--window-size", "500"], ["--window-size 500", "90 jobs"]),
    # -- hylo evaluate
    (["evaluate"], ["Missing option '--checkpoint'"]),
    (["evaluate", "--checkpoint", "{d}/missing"], ["--checkpoint", "card.json"]),
    (["evaluate", "--checkpoint", "{d}/truncated"], ["--checkpoint", "truncated", "not a zip file"]),
    (["evaluate", "--checkpoint", "{d}/corrupt"], ["--checkpoint", "corrupt", "weights cannot be read"]),
    (["evaluate", "--checkpoint", str(CHECKPOINT), "--windows", "0"], ["'--windows'", "greater than"]),
    (
        ["evaluate", "--checkpoint", str(CHECKPOINT), "--window-size", "5000", "--policies", "fcfs"],
        ["held-out windows", "fewer than one window of 5000", "--window-size", "--overlap"],
    ),
    # -- hylo report
    (["report", "--database", MYSQL], ["--database", "unsupported database 'mysql'", SUPPORTED]),
    (["report", "--database", "{d}/missing.db"], ["--database", "no SQLite file", "missing.db"]),
    (["report", "--database", "sqlite:///{d}/missing.db"], ["no SQLite file", "missing.db"]),
    (["report", "--database", "{d}/folder"], ["folder", "is a folder", SUPPORTED]),
    (["report", "--database", "{d}/notadb.db"], ["notadb.db", "file is not a database"]),
    (["report"], ["HYLO_DATABASE_URL", "no SQLite file", "hylo.db"]),
    (["report", "--database", "{d}/notadb.db", "--since", "yesterday"], ["--since 'yesterday'", "ISO 8601"]),
    (["report", "--database", "{d}/notadb.db", "--spec", "nosuch"], ["--spec 'nosuch'", "no such preset"]),
    # -- hylo models
    (["models", "list", "--database", "{d}/missing.db"], ["no SQLite file", "missing.db"]),
    (["models", "list"], ["HYLO_DATABASE_URL", "no SQLite file", "hylo.db"]),
    (["models", "list", "--database-url", MYSQL], ["unsupported database 'mysql'", SUPPORTED]),
    (["models", "history", "--database", "{d}/missing.db"], ["no SQLite file", "missing.db"]),
    (["models", "history", "--cluster", "bad name!"], ["cluster name 'bad name!'", "1-63 letters"]),
    (["models", "rollback"], ["no cluster", "--cluster NAME"]),
    (
        ["models", "register", "{d}/missing", "--cluster", "c1", "--database", "{d}/models.db"],
        ["'{d}/missing' does not exist", "card.json and weights.pt"],
    ),
    (
        ["models", "register", "{d}/truncated", "--cluster", "c1", "--database", "{d}/models.db"],
        ["truncated", "not a zip file"],
    ),
    (["models", "promote"], ["Missing argument 'version'"]),
    # -- hylo deadletters, retrain, serve
    (["deadletters", "replay", "--cluster", "bad!"], ["cluster name 'bad!'"]),
    (["deadletters", "replay", "--database", MYSQL], ["unsupported database 'mysql'", SUPPORTED]),
    (["retrain", "--timeout", "0"], ["--timeout", "> 0 seconds"]),
    (["retrain", "--url", "http://127.0.0.1:1"], ["cannot reach the trainer at http://127.0.0.1:1"]),
    (["retrain", "--local", "--database-url", MYSQL], ["unsupported database 'mysql'", SUPPORTED]),
    (["retrain", "--local", "--database", "{d}/missing.db"], ["no SQLite file", "missing.db"]),
    (["serve", "nope"], ["unknown service 'nope'", "featurizer", "query"]),
    (["serve"], ["Missing argument 'name'"]),
    (["serve", "featurizer", "--port", "9000"], ["--port", "query API's"]),
    (["serve", "query", "--port", "70000"], ["'--port'", "65535"]),
    # -- hylo jobs, job, status
    (["jobs", "--database", "{d}/missing.db"], ["no SQLite file", "missing.db"]),
    (["jobs", "--database", "{d}/notadb.db"], ["cannot read the database", "notadb.db", "not a database"]),
    (["jobs", "--state", "lost", "--database", "{d}/notadb.db"], ["--state 'lost'", "pending, running"]),
    (["jobs", "--format", "colour", "--database", "{d}/notadb.db"], ["--format 'colour'", "job_id"]),
    (["jobs", "--limit", "-1"], ["'--limit'", "greater than or equal to 0"]),
    (["job"], ["Missing argument 'job_id'"]),
    (["job", "x-1", "--database", MYSQL], ["unsupported database 'mysql'", SUPPORTED]),
    (["status", "--url", "placer"], ["--url 'placer'", "NAME=http://HOST:PORT"]),
    (["status", "--database", "{d}/missing.db"], ["no SQLite file", "missing.db"]),
    # -- hylo run and up: refused before anything starts
    (["run", "--jobs", "0"], ["'--jobs'", "greater than or equal to 1"]),
    (["run", "--base-policy", "lifo"], ["unknown base policy 'lifo'"]),
    (["run", "--cluster", "nosuchpreset"], ["'nosuchpreset'", "no such preset"]),
    (["run", "--model", "{d}/truncated"], ["--model", "truncated", "not a zip file"]),
    (["run", "--model", "{d}/corrupt"], ["--model", "corrupt", "weights cannot be read"]),
    (["up", "--nats-url", "nats://127.0.0.1:1", "--database-url", MYSQL], ["--database-url", SUPPORTED]),
    (["up", "--nats-url", "nats://127.0.0.1:1", "--database", MYSQL], ["--database-url", SUPPORTED]),
    (["up", "--database-url", "{d}/x.db"], ["Missing option '--nats-url'"]),
    # -- hylo tokens, bus, the root
    (["tokens", "create"], ["Missing option '--name'"]),
    (["tokens", "list", "--file", "{d}/missing-tokens"], ["missing-tokens", "cannot read the token file"]),
    (["bus", "credentials"], ["Missing option '--out'"]),
    (["bus", "credentials", "--out", "{d}/bus", "--cluster", "a b"], ["--cluster", "'a b'"]),
    (["nosuchcommand"], ["No such command 'nosuchcommand'", "hylo --help"]),
    (["--nosuch"], ["No such option: --nosuch"]),
    (["--debug"], ["Missing command"]),
]


def _ids() -> list[str]:
    out = []
    for case in CASES:
        args = case.values[0] if hasattr(case, "values") else case[0]
        out.append(" ".join(a.replace("{d}/", "") for a in args)[:60] or "(none)")
    return out


@pytest.mark.parametrize(("args", "expected"), CASES, ids=_ids())
def test_a_bad_input_is_one_line(inputs: Path, tmp_path: Path, args: list[str], expected: list[str]) -> None:
    argv = [a.replace("{d}", str(inputs)) for a in args]
    result = runner.invoke(app, argv)
    output = result.output
    assert result.exit_code != 0, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    assert "unexpected" not in errors[0], errors[0]
    for part in expected:
        assert part.replace("{d}", str(inputs)) in errors[0], errors[0]
    assert not (tmp_path / "hylo.db").exists()


def test_the_suite_covers_every_subcommand() -> None:
    """At least 40 cases (the issue's number), and every command of ``hylo --help`` has some."""
    assert len(CASES) >= 40
    covered = {(case.values[0] if hasattr(case, "values") else case[0])[0] for case in CASES}
    group = typer.main.get_command(app)
    commands = set(group.list_commands(typer.Context(group)))  # type: ignore[attr-defined]
    assert commands <= covered, commands - covered
