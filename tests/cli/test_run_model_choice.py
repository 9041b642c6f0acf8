"""Which model ``hylo run`` gives the prioritizer (issue 21): the shipped one by default on the embedded
workload (card sha256 pinned, weights checked), none with ``--no-model`` or on another workload,
``--model`` over both; and the shipped files are in the package data."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
import typer

from shared.cli.run import _model_choice
from shared.model.locate import checkpoint_sha256
from shared.presets import shipped
from shared.presets.shipped import SHIPPED, shipped_for, verified_card

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_model_is_the_default_on_the_embedded_workload_only() -> None:
    model = shipped_for("embedded")
    assert model is not None and model.folder == ROOT / "shared/presets/models/embedded"
    card, label = _model_choice(None, False, None, None)
    assert card == verified_card(model) and label.startswith("the shipped embedded model")
    assert _model_choice(None, False, "embedded", "embedded")[0] == card
    assert checkpoint_sha256(card) == model.card_sha256
    for trace, cluster in (("philly", None), (None, "small.toml"), (None, "philly")):
        none, why = _model_choice(None, False, trace, cluster)
        assert none is None and "the shipped model is for the embedded cluster" in why
    assert _model_choice(None, True, None, None) == (None, "none (--no-model): the base policy decides")


def test_model_overrides_and_conflicts(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    shutil.copytree(SHIPPED["embedded"].folder, folder)
    card, label = _model_choice(folder, False, None, None)
    assert card == folder.resolve() / "card.json" and label == f"--model {folder}"
    with pytest.raises(typer.Exit):
        _model_choice(folder, True, None, None)


def test_an_edited_shipped_card_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "models"
    shutil.copytree(shipped.MODELS_DIR, copy)
    card = copy / "embedded" / "card.json"
    doc = json.loads(card.read_text(encoding="utf-8"))
    doc["training"]["seed"] = 99  # a valid card, but not the one Hylo was released with
    card.write_text(json.dumps(doc), encoding="utf-8")
    monkeypatch.setattr(shipped, "MODELS_DIR", copy)
    with pytest.raises(typer.Exit):
        _model_choice(None, False, None, None)
    out = " ".join(capsys.readouterr().out.split())
    assert "the shipped model 'embedded' is not the one Hylo was released with" in out
    assert "--no-model" in out
    (copy / "embedded" / "card.json").unlink()
    with pytest.raises(typer.Exit):
        _model_choice(None, False, None, None)
    assert "the shipped model 'embedded' is missing" in " ".join(capsys.readouterr().out.split())


def test_the_shipped_files_are_package_data() -> None:
    """``pip install`` (not editable) carries them: the patterns of pyproject.toml match both files."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = data["tool"]["setuptools"]["package-data"]["shared.presets"]
    presets = ROOT / "shared/presets"
    matched = {p.relative_to(presets).as_posix() for pattern in patterns for p in presets.glob(pattern)}
    for model in SHIPPED.values():
        for name in ("card.json", "weights.pt"):
            assert (model.folder / name).relative_to(presets).as_posix() in matched
