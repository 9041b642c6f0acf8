"""A checkpoint's ``load`` keeps the definition it was trained under (issue 18, item 3).

Every card written before the ``in-span`` definition rescaled arrivals with the ``capped`` one and
does not say so: evaluating it "as trained" must keep using ``capped``, or the same ``--load``
would replay other arrival times than the model was trained on. New cards record the definition.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from shared.cli.evaluate import _run_setup
from shared.model import TrainingInfo, read_card
from shared.rl.setup import RunSetup, trained_load_definition

ROOT = Path(__file__).resolve().parents[2]
#: a shipped checkpoint trained with --load 1.5 (openb, 15-node slice) before the field existed
SHIPPED = ROOT / "docs/results/runs/openb15-easy-fcfs-bsld/checkpoint"


def _setup(info: TrainingInfo, load: float | None = None, definition: str | None = None) -> RunSetup:
    return _run_setup(
        info,
        "state",
        paper=None,
        warmup=None,
        estimates="noisy",
        jobs=None,
        load=load,
        placement=None,
        load_definition=definition,
    )


def _info(**extra: object) -> TrainingInfo:
    return TrainingInfo(
        trace="embedded", cluster="embedded", base_policy="fcfs", metric="bsld", seed=0, epochs=1, extra=extra
    )


def test_a_shipped_card_without_the_field_evaluates_capped_as_trained() -> None:
    card = read_card(SHIPPED)
    assert "load_definition" not in card.training.extra and card.training.extra["load"] == 1.5
    assert trained_load_definition(card.training) == "capped"
    setup = _setup(card.training)
    assert (setup.target_load, setup.load_definition) == (1.5, "capped")


def test_a_load_given_at_evaluation_means_todays_definition_unless_told() -> None:
    old = read_card(SHIPPED).training
    assert (_setup(old, load=0.8).target_load, _setup(old, load=0.8).load_definition) == (0.8, "in-span")
    assert _setup(old, load=0.8, definition="capped").load_definition == "capped"
    assert _setup(old, definition="in-span").load_definition == "in-span"  # the trained 1.5, re-read


def test_a_new_card_says_which_definition() -> None:
    assert trained_load_definition(_info(load=0.9, load_definition="in-span")) == "in-span"
    assert _setup(_info(load=0.9, load_definition="in-span")).load_definition == "in-span"
    assert _setup(_info(load=0.9, load_definition="capped")).load_definition == "capped"
    assert trained_load_definition(_info()) == "capped"  # no load, no field: as before


def test_an_unknown_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown load definition 'other'"):
        trained_load_definition(_info(load=0.9, load_definition="other"))
    with pytest.raises(typer.Exit):
        _setup(_info(load=0.9, load_definition="other"))
    with pytest.raises(typer.Exit):
        _setup(_info(load=0.9), load=0.5, definition="uncapped")
