"""A checkpoint is bounded before its network is built or its weights are read (issue 20, "Bounded
resources everywhere"): a card that describes a huge model (``actor_hidden=(20000, 20000)`` cost 134 s
and 6.6 GB before the weights were refused), a huge card, and a weights file whose zip records
inflate far past what the card's parameters need are all refused at once, with a one-line error
naming the file and the limit."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
import torch

from shared.model import (
    ActorCritic,
    CheckpointError,
    ModelCard,
    ModelConfig,
    load_checkpoint,
    read_card,
    save_checkpoint,
)
from shared.model.checkpoint import (
    MAX_CARD_BYTES,
    MAX_HIDDEN_LAYERS,
    CheckpointSettings,
    CheckpointTooLargeError,
    _declared_record_bytes,
    check_model_size,
)
from tests.model.test_model_checkpoint import CFG, FEATURES, TRAINING, make_model
from tests.rss_probe import probe

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "docs" / "results" / "runs").glob("*/checkpoint"))
DEFAULT_LIMIT = CheckpointSettings.model_fields["max_model_params"].default


def _card_for(tmp_path: Path, **model: object) -> Path:
    """A checkpoint folder whose card describes ``CFG`` changed by ``model`` and whose (empty)
    weights match the card's sha256: only the bounds can refuse it before the network is built."""
    folder = tmp_path / "ckpt"
    save_checkpoint(folder, make_model(), _card())
    torch.save({}, folder / "weights.pt")
    raw = json.loads((folder / "card.json").read_text())
    raw["model"].update(model)
    raw["weights_sha256"] = hashlib.sha256((folder / "weights.pt").read_bytes()).hexdigest()
    (folder / "card.json").write_text(json.dumps(raw))
    return folder


def _card() -> ModelCard:
    return ModelCard(model=CFG, features=FEATURES, training=TRAINING)


@pytest.mark.parametrize(
    "config",
    [
        CFG,
        ModelConfig(),
        ModelConfig(obs_features=5, critic_features=0, actor_hidden=(), critic_hidden=(7, 3, 2)),
        ModelConfig(critic_pool=False, actor_hidden=(64, 64, 64), critic_hidden=()),
    ],
)
def test_the_parameter_count_is_the_networks(config: ModelConfig) -> None:
    assert config.parameter_count == sum(p.numel() for p in ActorCritic(config).parameters())


def test_the_shipped_models_are_far_below_the_default_limit() -> None:
    assert SHIPPED, "docs/results/runs/*/checkpoint"
    sizes = {read_card(folder).model.parameter_count for folder in SHIPPED}
    assert max(sizes) * 500 < DEFAULT_LIMIT
    model, _ = load_checkpoint(SHIPPED[0])  # and still load, weights and all
    assert sum(p.numel() for p in model.parameters()) in sizes


def test_a_card_describing_a_huge_model_is_refused_before_building_it(tmp_path: Path) -> None:
    """The issue's card: 400 million parameters, refused from its shapes."""
    folder = _card_for(tmp_path, actor_hidden=[20000, 20000])
    huge = CFG.model_copy(update={"actor_hidden": (20000, 20000)}).parameter_count
    assert huge > 400_000_000
    for read in (read_card, load_checkpoint):
        with pytest.raises(CheckpointTooLargeError) as caught:
            read(folder)
        text = str(caught.value)
        assert "\n" not in text and isinstance(caught.value, CheckpointError)
        assert text.startswith(f"{folder / 'card.json'}: the model has {huge:,} parameters (obs_features 3, ")
        assert "actor_hidden (20000, 20000)" in text
        assert f"more than the limit of {DEFAULT_LIMIT:,} (HYLO_MAX_MODEL_PARAMS)" in text


def test_the_limit_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ok"
    save_checkpoint(folder, make_model(), _card())
    count = CFG.parameter_count
    monkeypatch.setenv("HYLO_MAX_MODEL_PARAMS", str(count - 1))
    assert CheckpointSettings().max_model_params == count - 1
    with pytest.raises(CheckpointTooLargeError, match=f"more than the limit of {count - 1:,}"):
        load_checkpoint(folder)
    monkeypatch.setenv("HYLO_MAX_MODEL_PARAMS", str(count))
    load_checkpoint(folder)
    assert read_card(folder, max_params=count).model == CFG
    with pytest.raises(CheckpointTooLargeError):
        read_card(folder, max_params=count - 1)


def test_too_many_layers_are_refused(tmp_path: Path) -> None:
    folder = _card_for(tmp_path, critic_hidden=[1] * (MAX_HIDDEN_LAYERS + 1))
    with pytest.raises(
        CheckpointTooLargeError, match=r"model\.critic_hidden has 65 layers, more than the limit of 64"
    ):
        read_card(folder)
    check_model_size(ModelConfig(critic_hidden=(1,) * MAX_HIDDEN_LAYERS), "card.json")


def test_a_huge_card_file_is_refused_unparsed(tmp_path: Path) -> None:
    folder = _card_for(tmp_path)
    with (folder / "card.json").open("ab") as handle:
        handle.write(b" " * MAX_CARD_BYTES)  # valid JSON still, but no card is that big
    with pytest.raises(
        CheckpointTooLargeError, match=r"card\.json: more than 1048576 bytes, the limit for a model card"
    ):
        read_card(folder)


def _inflating_weights(folder: Path, extra_mib: int) -> None:
    """Rewrite ``weights.pt`` with its biggest record (a tensor's storage) deflated and grown by
    ``extra_mib`` MiB of zeros, and point the card's sha256 at it: torch would inflate that record to
    its declared size (a few kB on disk), only then finding it does not fit."""
    weights = folder / "weights.pt"
    with zipfile.ZipFile(weights) as source:
        records = [(info.filename, source.read(info)) for info in source.infolist()]
    biggest = max(range(len(records)), key=lambda i: len(records[i][1]))
    rewritten = folder / "rewritten.pt"
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as target:
        for i, (name, data) in enumerate(records):
            with target.open(name, "w") as out:
                out.write(data)
                for _ in range(extra_mib if i == biggest else 0):
                    out.write(bytes(1 << 20))
    rewritten.replace(weights)
    raw = json.loads((folder / "card.json").read_text())
    raw["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (folder / "card.json").write_text(json.dumps(raw))


def test_weights_whose_records_inflate_past_the_card_are_refused_before_loading(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    save_checkpoint(folder, make_model(), _card())
    real = _declared_record_bytes(folder / "weights.pt")
    assert real == sum(i.file_size for i in zipfile.ZipFile(folder / "weights.pt").infolist())
    _inflating_weights(folder, extra_mib=64)
    assert (folder / "weights.pt").stat().st_size < 1 << 20
    assert _declared_record_bytes(folder / "weights.pt") == real + (64 << 20)
    with pytest.raises(CheckpointTooLargeError) as caught:
        load_checkpoint(folder)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(
        f"{folder / 'weights.pt'}: declares, once extracted, {real + (64 << 20)}"
    )
    assert (
        f"the {CFG.parameter_count:,} parameters of {folder / 'card.json'} can need; refused before loading"
        in text
    )


def test_weights_that_are_not_a_zip_cannot_be_bounded(tmp_path: Path) -> None:
    folder = _card_for(tmp_path)
    (folder / "weights.pt").write_bytes(b"not torch")
    raw = json.loads((folder / "card.json").read_text())
    raw["weights_sha256"] = hashlib.sha256(b"not torch").hexdigest()
    (folder / "card.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointTooLargeError, match="cannot be bounded before loading: not a zip file"):
        load_checkpoint(folder)


def test_the_shipped_weights_are_bounded_as_torch_reads_them() -> None:
    for folder in SHIPPED:
        weights = folder / "weights.pt"
        declared = sum(i.file_size for i in zipfile.ZipFile(weights).infolist())
        assert _declared_record_bytes(weights) == declared
        assert declared < read_card(folder).model.parameter_count * 8


def test_the_huge_card_costs_neither_memory_nor_time(tmp_path: Path) -> None:
    """Before the bound, (4000, 4000) cost 4.8 s and 261 MiB here, (8000, 8000) 40 s and 1 GB."""
    folder = _card_for(tmp_path, actor_hidden=[20000, 20000])
    found = probe(
        "import torch\nfrom shared.model import load_checkpoint\ntorch.set_num_threads(1)",
        f"load_checkpoint({str(folder)!r})",
    )
    assert found.error is not None and found.error.startswith("CheckpointTooLargeError: ")
    assert found.rss_mib < 16 and found.seconds < 0.5, found


def test_the_inflating_weights_cost_neither_memory_nor_time(tmp_path: Path) -> None:
    """Before the bound, torch inflated such a record (200 MB from 195 kB) before refusing it."""
    folder = tmp_path / "ckpt"
    save_checkpoint(folder, make_model(), _card())
    _inflating_weights(folder, extra_mib=200)
    found = probe(
        "import torch\nfrom shared.model import load_checkpoint\ntorch.set_num_threads(1)",
        f"load_checkpoint({str(folder)!r})",
    )
    assert found.error is not None and "declares, once extracted," in found.error
    assert found.rss_mib < 16 and found.seconds < 0.5, found
