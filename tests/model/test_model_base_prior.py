"""The base-order prior (``ModelConfig.base_prior``): a model that starts as its base policy.

What must hold: a new model ranks its slots exactly in slot (base) order on every path (the
module's scores and priorities, ``FastActor``'s scores, greedy priorities and samples at a low
temperature), the two paths give the same floats, a trained kernel can still move a job, the
prior survives a checkpoint round trip, and a card written before the field existed loads with
the prior off.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shared.model import (
    ActorCritic,
    CardFeatures,
    ModelCard,
    ModelConfig,
    TrainingInfo,
    load_checkpoint,
    save_checkpoint,
)
from shared.model.fast import FastActor, greedy_priorities, gumbel_log

PRIOR = ModelConfig(obs_features=4, critic_features=2, max_queue=64, top_k=None, base_prior=0.05)
FEATURES = CardFeatures(obs=("a", "b", "c", "d"), critic=("e", "f"), schema_hash="h")
TRAINING = TrainingInfo(trace="t", cluster="c", base_policy="sjf", metric="wait", seed=0, epochs=0)


def _obs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


@pytest.mark.parametrize("n", [1, 7, 64, 300, 3000])
def test_a_new_model_ranks_in_slot_order_on_every_path(n: int) -> None:
    torch.manual_seed(0)
    model = ActorCritic(PRIOR)
    obs = _obs(n)
    mask = torch.ones((1, n), dtype=torch.bool)
    slot_order = np.arange(n)
    expected = np.arange(n, 0, -1)  # the first slot gets the highest priority

    torch_scores = model.scores(torch.from_numpy(obs).unsqueeze(0), mask)[0].detach().numpy()
    assert np.all(np.diff(torch_scores) < 0)
    assert np.array_equal(model.priorities(torch.from_numpy(obs).unsqueeze(0), mask)[0].numpy(), expected)

    actor = FastActor(model)
    fast_scores = actor.scores(obs)
    np.testing.assert_array_equal(fast_scores, torch_scores)
    assert np.array_equal(greedy_priorities(fast_scores, None), expected)
    assert actor.forward_args(n) is None  # the compiled sample ranks the kernel alone: not used
    order, _, _ = actor.sample(obs, gumbel_log(np.random.default_rng(1), n), None)
    assert sorted(order.tolist()) == slot_order.tolist()  # a sample is an ordering of every slot


def test_a_trained_kernel_moves_a_job_past_the_prior() -> None:
    """The kernel's score adds to the prior: a job the kernel scores 1.02 logits above the others
    moves up 20 slots (20 x 0.05 < 1.02 < 21 x 0.05) and no further."""
    torch.manual_seed(0)
    model = ActorCritic(PRIOR)
    obs = np.zeros((30, 4), dtype=np.float32)
    obs[25] = 3.0  # one job looks different from the others
    hidden = model.actor[:-1](torch.from_numpy(obs)).detach()
    unit = int(torch.argmax((hidden[25] - hidden[0]).abs()))
    margin = float(hidden[25, unit] - hidden[0, unit])
    out = model.actor[-1]
    assert isinstance(out, torch.nn.Linear)
    with torch.no_grad():
        out.weight[0, unit] = 1.02 / margin  # the kernel: +1.02 for job 25, 0 for the others
    scores = FastActor(model).scores(obs)
    torch_scores = model.scores(torch.from_numpy(obs).unsqueeze(0), torch.ones((1, 30), dtype=torch.bool))
    np.testing.assert_array_equal(scores, torch_scores[0].detach().numpy())
    ranked = np.argsort(-greedy_priorities(scores, None), kind="stable").tolist()
    # slot 25 starts 25 x 0.05 = 1.25 below slot 0; +1.02 puts it between slots 4 and 5
    assert ranked == [0, 1, 2, 3, 4, 25, *range(5, 25), 26, 27, 28, 29]


def test_without_the_prior_a_new_model_does_not_follow_slot_order() -> None:
    """The control: the default model (prior off) ranks by its random kernel, not by slot."""
    torch.manual_seed(0)
    model = ActorCritic(PRIOR.model_copy(update={"base_prior": 0.0}))
    scores = FastActor(model).scores(_obs(64))
    assert not np.array_equal(greedy_priorities(scores, None), np.arange(64, 0, -1))


def test_the_prior_survives_a_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = ActorCritic(PRIOR)
    save_checkpoint(tmp_path / "ckpt", model, ModelCard(model=PRIOR, features=FEATURES, training=TRAINING))
    loaded, card = load_checkpoint(tmp_path / "ckpt", expected_schema_hash="h")
    assert card.model.base_prior == PRIOR.base_prior
    obs = _obs(20)
    np.testing.assert_array_equal(FastActor(loaded).scores(obs), FastActor(model).scores(obs))


def test_a_card_without_the_field_loads_with_the_prior_off(tmp_path: Path) -> None:
    config = PRIOR.model_copy(update={"base_prior": 0.0})
    torch.manual_seed(0)
    model = ActorCritic(config)
    save_checkpoint(tmp_path / "ckpt", model, ModelCard(model=config, features=FEATURES, training=TRAINING))
    card_file = tmp_path / "ckpt" / "card.json"
    card = json.loads(card_file.read_text())
    del card["model"]["base_prior"]  # a card written before the field existed
    card_file.write_text(json.dumps(card))
    loaded, loaded_card = load_checkpoint(tmp_path / "ckpt", expected_schema_hash="h")
    assert loaded_card.model.base_prior == 0.0
    obs = _obs(20)
    np.testing.assert_array_equal(FastActor(loaded).scores(obs), FastActor(model).scores(obs))


def test_a_negative_prior_is_refused() -> None:
    with pytest.raises(ValueError, match="base_prior"):
        ModelConfig(base_prior=-0.1)


def test_one_actor_scores_a_short_queue_after_a_long_one_as_the_module_does() -> None:
    """``FastActor`` keeps the prior of the longest queue and slices it for shorter ones."""
    torch.manual_seed(0)
    model = ActorCritic(PRIOR)
    actor = FastActor(model)
    for n in (300, 7, 1, 3000, 64):
        obs = _obs(n, seed=n)
        expected = model.scores(torch.from_numpy(obs).unsqueeze(0), torch.ones((1, n), dtype=torch.bool))
        np.testing.assert_array_equal(actor.scores(obs), expected[0].detach().numpy())
