"""The actor-critic: equivariance, padding invariance, initialisation, gradients, determinism."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from shared.model import ActorCritic, ModelConfig, check_order

CFG = ModelConfig(obs_features=8, critic_features=5, max_queue=16, top_k=6)


def make_inputs(
    batch: int = 3, slots: int = 16, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    obs = torch.rand(batch, slots, 8, generator=gen)
    lengths = torch.tensor([slots, 7, 1][:batch])
    mask = torch.arange(slots) < lengths[:, None]
    critic = torch.rand(batch, 5, generator=gen)
    return obs, mask, critic


def model(config: ModelConfig = CFG, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(config)


def test_permuting_jobs_permutes_scores_and_keeps_the_value() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    scores = net.scores(obs, mask)
    permuted = net.scores(obs[:, perm], mask[:, perm])
    torch.testing.assert_close(permuted, scores[:, perm])
    torch.testing.assert_close(net.value(obs[:, perm], mask[:, perm], critic), net.value(obs, mask, critic))


def test_padded_values_change_nothing() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    dirty = obs.clone()
    dirty[~mask] = 1e6
    dirty[1, 10, 3] = float("nan")
    clean_scores, dirty_scores = net.scores(obs, mask), net.scores(dirty, mask)
    torch.testing.assert_close(dirty_scores, clean_scores)
    assert (dirty_scores[~mask] == 0).all()
    torch.testing.assert_close(net.value(dirty, mask, critic), net.value(obs, mask, critic))

    order = net.distribution(obs, mask).sample(torch.Generator().manual_seed(0))
    assert int((order >= 0).sum()) == int(mask.sum(dim=1).clamp(max=6).sum())  # top_k = 6
    check_order(order, mask)
    _, logp, ent, value = net.get_action_and_value(dirty, mask, critic, action=order)
    (logp.sum() + ent.sum() + value.sum()).backward()
    for name, param in net.named_parameters():
        assert param.grad is not None
        assert torch.isfinite(param.grad).all(), name


def test_queue_length_and_batch_neighbours_do_not_matter() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    n = int(mask[1].sum())
    wide = torch.zeros(1, 300, 8)
    wide[0, :n] = obs[1, :n]
    wide_mask = torch.arange(300) < n
    alone = net.scores(wide, wide_mask[None])[0, :n]
    torch.testing.assert_close(alone, net.scores(obs, mask)[1, :n])
    torch.testing.assert_close(
        net.value(wide, wide_mask[None], critic[1:2]), net.value(obs, mask, critic)[1:2]
    )


def test_orthogonal_initialisation_like_cleanrl() -> None:
    net = model()
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert all((layer.bias == 0).all() for layer in linears)
    actor_out, critic_out = net.actor[-1], net.critic[-1]
    assert isinstance(actor_out, nn.Linear)
    assert isinstance(critic_out, nn.Linear)
    assert actor_out.weight.norm().item() == pytest.approx(0.01, rel=1e-4)
    assert critic_out.weight.norm().item() == pytest.approx(1.0, rel=1e-4)
    for layer in linears:
        if layer in (actor_out, critic_out):
            continue
        w = layer.weight.detach()
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(gram, 2.0 * torch.eye(gram.shape[0]), atol=1e-4, rtol=0)


def test_initial_policy_is_near_uniform() -> None:
    net = model()
    obs, mask, _ = make_inputs()
    entropy = net.distribution(obs, mask).entropy()
    expected = torch.log(mask.sum(dim=1).double()).float()
    torch.testing.assert_close(entropy, expected, atol=1e-3, rtol=0)


def test_gradients_reach_every_parameter() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    action, logp, ent, value = net.get_action_and_value(
        obs, mask, critic, generator=torch.Generator().manual_seed(1)
    )
    returns = torch.tensor([1.0, -0.5, 0.2])
    loss = -(logp * returns).mean() - 0.01 * ent.mean() + ((value - returns) ** 2).mean()
    loss.backward()
    for name, param in net.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name
    assert action.shape == (3, 6)


def test_stored_action_is_rescored_consistently() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    action, logp, _, _ = net.get_action_and_value(
        obs, mask, critic, generator=torch.Generator().manual_seed(5)
    )
    again, logp_again, _, _ = net.get_action_and_value(obs, mask, critic, action=action)
    assert torch.equal(again, action)
    torch.testing.assert_close(logp_again, logp)
    assert (logp <= 0).all()
    assert logp[2].item() == pytest.approx(0.0, abs=1e-6)  # one job: its only ordering is certain


def test_seeded_runs_are_identical_and_seeds_differ() -> None:
    a, b, c = model(seed=11), model(seed=11), model(seed=12)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.actor[0].weight, c.actor[0].weight)

    obs, mask, critic = make_inputs()
    first = a.get_action_and_value(obs, mask, critic, generator=torch.Generator().manual_seed(4))
    second = b.get_action_and_value(obs, mask, critic, generator=torch.Generator().manual_seed(4))
    for x, y in zip(first, second, strict=True):
        assert torch.equal(x, y)
    draws = {
        tuple(a.distribution(obs, mask).sample(torch.Generator().manual_seed(s))[0].tolist())
        for s in range(5)
    }
    assert len(draws) > 1


def test_greedy_and_priorities_agree() -> None:
    net = model()  # top_k = 6
    obs, mask, _ = make_inputs()
    order = net.greedy(obs, mask)
    prio = net.priorities(obs, mask)
    scores = net.scores(obs, mask)
    for row in range(3):
        n = int(mask[row].sum())
        real_order = order[row, :n]
        assert (order[row, n:] == -1).all()
        assert (scores[row, real_order[:-1]] >= scores[row, real_order[1:]]).all()
        # the 6 best by score first, then the other real jobs in slot order
        head = real_order[:6].tolist()
        tail = [j for j in range(n) if j not in head]
        expected = [0] * 16
        for rank, slot in enumerate(head + tail):
            expected[slot] = n - rank
        assert prio[row].tolist() == expected


def test_variants_build_and_run() -> None:
    for cfg in (
        ModelConfig(activation="relu", critic_pool=False, actor_hidden=(16, 8, 8), top_k=None),
        ModelConfig(critic_features=0, critic_pool=True, entropy="first_pick"),
    ):
        net = model(cfg)
        obs = torch.rand(2, 10, cfg.obs_features)
        mask = torch.ones(2, 10, dtype=torch.bool)
        critic = torch.rand(2, cfg.critic_features)
        action, logp, ent, value = net.get_action_and_value(obs, mask, critic)
        assert action.shape == (2, 10 if cfg.top_k is None else min(cfg.top_k, 10))
        assert logp.shape == ent.shape == value.shape == (2,)
        if cfg.entropy == "first_pick":
            torch.testing.assert_close(ent, torch.full((2,), math.log(10)), atol=1e-3, rtol=0)


def test_bad_shapes_are_reported() -> None:
    net = model()
    obs, mask, critic = make_inputs()
    with pytest.raises(ValueError, match="obs must be"):
        net.scores(obs[..., :7], mask)
    with pytest.raises(ValueError, match="mask must be bool"):
        net.scores(obs, mask.float())
    with pytest.raises(ValueError, match="critic features"):
        net.value(obs, mask, critic[:, :4])


def test_config_validation() -> None:
    with pytest.raises(ValidationError, match="critic has no input"):
        ModelConfig(critic_features=0, critic_pool=False)
    with pytest.raises(ValidationError, match="hidden sizes"):
        ModelConfig(actor_hidden=(32, 0))
    with pytest.raises(ValidationError):
        ModelConfig(top_k=0)
    assert ModelConfig().critic_input_dim == 13
