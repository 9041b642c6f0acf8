"""PPO: GAE by hand, the update on fixed batches, learning on a toy problem, reproducibility."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from shared.metrics import make_windows
from shared.model import ActorCritic, ModelConfig, sample_order
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.rl.policy import Decision
from shared.rl.ppo import PPOConfig, RolloutBatch, gae, ppo_update
from shared.rl.reward import RewardSpec
from shared.rl.trainer import TrainConfig, train
from shared.scheduling.binding import BoundWorkload
from shared.sim.config import SimConfig


def test_gae_terminal_reward_by_hand() -> None:
    # gamma = lambda = 1: every advantage is R - V_t, every return R
    adv, ret = gae([0.5, 0.2], 1.0, 1.0, 1.0)
    np.testing.assert_allclose(adv, [0.5, 0.8])
    np.testing.assert_allclose(ret, [1.0, 1.0])
    # gamma 0.9, lambda 0.5: delta_1 = 1 - 0.2 = 0.8; delta_0 = 0.9 * 0.2 - 0.5 = -0.32;
    # A_1 = 0.8; A_0 = -0.32 + 0.45 * 0.8 = 0.04
    adv, ret = gae([0.5, 0.2], 1.0, 0.9, 0.5)
    np.testing.assert_allclose(adv, [0.04, 0.8], atol=1e-12)
    np.testing.assert_allclose(ret, [0.54, 1.0], atol=1e-12)


def bandit_batch(model: ActorCritic, rng: np.random.Generator, gen: torch.Generator, n: int) -> RolloutBatch:
    """One-decision episodes of 5 jobs; reward 1 when the job with the largest feature 0 goes first."""
    obs = rng.random((n, 5, 8)).astype(np.float32)
    mask = torch.ones(n, 5, dtype=torch.bool)
    with torch.no_grad():
        orders = sample_order(model.scores(torch.from_numpy(obs), mask), mask, 2, gen).numpy()
    episodes = []
    for k in range(n):
        reward = float(orders[k, 0] == int(np.argmax(obs[k, :, 0])))
        episodes.append(([Decision(obs[k], rng.random(5).astype(np.float32), orders[k], 0.0)], reward))
    return RolloutBatch.build(model, episodes, 1.0, 1.0)


def p_best_first(model: ActorCritic, rng: np.random.Generator) -> float:
    obs = torch.from_numpy(rng.random((400, 5, 8)).astype(np.float32))
    with torch.no_grad():
        probs = torch.softmax(model.scores(obs, torch.ones(400, 5, dtype=torch.bool)), dim=-1)
    return float(probs.gather(1, obs[:, :, 0].argmax(dim=1, keepdim=True)).mean())


def test_ppo_learns_a_known_best_first_pick() -> None:
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig(max_queue=5, top_k=2))
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    before = p_best_first(model, np.random.default_rng(1))
    assert before == pytest.approx(0.2, abs=0.05)  # near-uniform initial policy
    cfg = PPOConfig(update_epochs=4, minibatch_size=64, target_kl=None)
    for _ in range(12):
        ppo_update(model, opt, bandit_batch(model, rng, gen, 128), cfg, rng)
    assert p_best_first(model, np.random.default_rng(1)) > 0.6


def test_update_lowers_the_surrogate_loss_on_a_fixed_batch() -> None:
    torch.manual_seed(1)
    model = ActorCritic(ModelConfig(max_queue=5, top_k=2))
    rng, gen = np.random.default_rng(2), torch.Generator().manual_seed(2)
    batch = bandit_batch(model, rng, gen, 256)

    def surrogate() -> float:
        obs, mask, critic, order, old, adv, _ = batch.tensors(np.arange(len(batch)))
        with torch.no_grad():
            _, new, _, _ = model.get_action_and_value(obs, mask, critic, action=order)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return float(-(adv * (new - old).exp()).mean())

    assert surrogate() == pytest.approx(0.0, abs=1e-5)  # ratio 1 before any step
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    stats = ppo_update(model, opt, batch, PPOConfig(update_epochs=4, minibatch_size=256, target_kl=None), rng)
    assert stats["updates"] == 4
    assert surrogate() < -0.01


@pytest.mark.parametrize(("kl_min_epochs", "updates"), [(0, 2), (1, 5), (2, 9)])
def test_kl_min_epochs_delays_the_early_stop(kl_min_epochs: int, updates: int) -> None:
    """4 minibatches per pass, a target KL any step exceeds: the first minibatch of a pass sees
    the rollout's own policy (KL 0), the next one stops the update, unless the pass is one of the
    first ``kl_min_epochs``, which run in full."""
    torch.manual_seed(3)
    model = ActorCritic(ModelConfig(max_queue=5, top_k=2))
    rng, gen = np.random.default_rng(3), torch.Generator().manual_seed(3)
    batch = bandit_batch(model, rng, gen, 256)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cfg = PPOConfig(update_epochs=4, minibatch_size=64, target_kl=1e-9, kl_min_epochs=kl_min_epochs)
    stats = ppo_update(model, opt, batch, cfg, rng)
    assert stats["updates"] == updates
    assert stats["kl_stop"] == 1.0


def toy_runner(toy: BoundWorkload) -> EpisodeRunner:
    settings = EpisodeSettings(
        base_policy="fcfs", reward=RewardSpec.parse("wait"), config=SimConfig.paper(), warmup=0
    )
    return EpisodeRunner(toy, settings)


def toy_config(epochs: int, seed: int = 0) -> TrainConfig:
    return TrainConfig(
        epochs=epochs,
        windows_per_epoch=6,
        window_size=24,
        seed=seed,
        validation_windows=0,
        train_fraction=0.8,
        model=ModelConfig(max_queue=32, top_k=8),
        ppo=PPOConfig(learning_rate=2e-2, update_epochs=4, minibatch_size=64),
    )


def test_training_lowers_wait_on_a_one_node_cluster(toy: BoundWorkload) -> None:
    """Short jobs queue behind long ones: ordering short first cuts waits, and PPO finds it."""
    runner = toy_runner(toy)
    windows = make_windows(range(0, 120), 24, 4, seed=0)

    def mean_wait(model: ActorCritic) -> float:
        return float(np.mean([runner.run(model, w, "greedy").agent_scores["wait"] for w in windows]))

    torch.manual_seed(0)
    initial = mean_wait(ActorCritic(toy_config(0).model))
    result = train(runner, toy_config(5))
    assert mean_wait(result.model) < 0.8 * initial


def test_same_seed_same_losses(toy: BoundWorkload) -> None:
    def losses(seed: int) -> list[tuple[float, ...]]:
        history = train(toy_runner(toy), toy_config(2, seed)).history[1:]
        return [(r["reward"], r["pg_loss"], r["v_loss"], r["approx_kl"], r["decisions"]) for r in history]

    first = losses(0)
    assert first == losses(0)
    assert first != losses(1)


@pytest.mark.slow
def test_workers_do_not_change_the_losses(toy: BoundWorkload) -> None:
    def history(workers: int) -> list[tuple[float, ...]]:
        cfg = replace(toy_config(1), workers=workers)
        return [
            (r["reward"], r["pg_loss"], r["v_loss"], r["decisions"])
            for r in train(toy_runner(toy), cfg).history[1:]
        ]

    assert history(1) == history(2)
