"""PPO over recorded scheduling decisions, in the style of CleanRL's ``ppo.py``.

Read top to bottom: ``gae`` turns one episode's values and terminal reward into advantages and
returns; ``RolloutBatch`` stacks the decisions of many episodes; ``ppo_update`` runs the clipped
objective over shuffled minibatches for a few epochs, with a value loss, an entropy bonus,
advantage normalization per minibatch, gradient clipping and a KL early stop.

Rewards are terminal (one normalized gap per window, ``shared.rl.reward``): every decision but the
last gets reward 0. With ``gamma = 1`` and ``gae_lambda = 1`` each decision's advantage is the
episode's reward minus its value (a Monte-Carlo return with the critic as baseline); ``gae_lambda
< 1`` mixes in the critic's bootstrapped estimates, lowering variance once the critic is useful.
Defaults follow the paper's code (gamma 1, lambda 0.97, clip 0.2, target KL 0.01).

**KL early stop after a warm start** (``kl_min_epochs``). The stop guards sample *re-use*: each
further pass over the same rollout moves the policy further from the one that collected it, and
the surrogate stops being trustworthy. A sharp policy (one imitated from the base policy) reaches
the limit within a few minibatches of the first pass: on Philly after imitation the stop fired in
nearly every epoch after 12-32 of ~120 updates, so most of each rollout's decisions never
contributed a gradient, and PPO barely moved the warm start (``docs/results/trainer.md``, section
1). ``kl_min_epochs = 1`` lets every decision of a rollout be used once, each ratio still bounded by
the clip (a plain clipped policy-gradient pass), and keeps the stop for the re-use passes after it.
Runs whose KL never reaches the target (PPO from random weights, in those runs) are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from shared.model import ActorCritic, pad_queues
from shared.rl.policy import Decision


class PPOConfig(BaseModel):
    """PPO hyperparameters (the model's shape lives in ``ModelConfig``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    learning_rate: float = Field(default=3e-4, gt=0)
    gamma: float = Field(default=1.0, ge=0, le=1)
    gae_lambda: float = Field(default=0.97, ge=0, le=1)
    update_epochs: int = Field(default=4, ge=1)
    minibatch_size: int = Field(default=256, ge=1)
    clip_coef: float = Field(default=0.2, gt=0)
    ent_coef: float = Field(default=0.0, ge=0)
    vf_coef: float = Field(default=0.5, ge=0)
    max_grad_norm: float = Field(default=0.5, gt=0)
    target_kl: float | None = Field(default=0.02, gt=0)
    kl_min_epochs: int = Field(
        default=0,
        ge=0,
        description="update epochs always run in full before the KL early stop is checked",
    )
    norm_adv: bool = True


def gae(values: npt.ArrayLike, reward: float, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and returns of one episode with a single terminal ``reward``.

    ``delta_t = r_t + gamma V_{t+1} - V_t`` with ``r_t = 0`` except at the last decision, whose
    next value is 0 (the episode ends). ``A_t = sum_k (gamma lam)^k delta_{t+k}``; returns
    ``A_t + V_t``.
    """
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    adv = np.zeros(n)
    last = 0.0
    for t in range(n - 1, -1, -1):
        nxt = v[t + 1] if t + 1 < n else 0.0
        r = reward if t == n - 1 else 0.0
        delta = r + gamma * nxt - v[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + v


@dataclass
class RolloutBatch:
    """The decisions of an epoch's episodes with their old log-probabilities, values, advantages
    and returns."""

    decisions: list[Decision]
    logp: np.ndarray
    values: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray

    @classmethod
    def build(
        cls,
        model: ActorCritic,
        episodes: Sequence[tuple[Sequence[Decision], float]],
        gamma: float,
        lam: float,
        chunk: int = 512,
    ) -> RolloutBatch:
        """Stack the episodes; the rollout's log-probabilities and values are computed here, in
        batches, with the weights that sampled the orderings (identical to computing them one
        decision at a time during the rollout, and several times cheaper)."""
        decisions = [d for decs, _ in episodes for d in decs]
        n = len(decisions)
        logp = np.zeros(n, dtype=np.float32)
        values = np.zeros(n, dtype=np.float32)
        model.eval()
        with torch.no_grad():
            for start in range(0, n, chunk):
                obs, mask, critic, order = _stack(decisions[start : start + chunk])
                dist = model.distribution(obs, mask)
                logp[start : start + chunk] = dist.log_prob(order).numpy()
                values[start : start + chunk] = model.value(obs, mask, critic).numpy()
        advs: list[np.ndarray] = [np.zeros(0)]
        rets: list[np.ndarray] = [np.zeros(0)]
        pos = 0
        for decs, reward in episodes:
            k = len(decs)
            if k:
                a, r = gae(values[pos : pos + k], reward, gamma, lam)
                advs.append(a)
                rets.append(r)
            pos += k
        return cls(decisions, logp, values, np.concatenate(advs), np.concatenate(rets))

    def __len__(self) -> int:
        return len(self.decisions)

    def tensors(self, index: np.ndarray) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Minibatch ``index``: obs, mask, critic, order, old log-prob, advantages, returns."""
        obs, mask, critic, order = _stack([self.decisions[i] for i in index])
        logp = torch.from_numpy(self.logp[index])
        adv = torch.from_numpy(self.advantages[index]).float()
        ret = torch.from_numpy(self.returns[index]).float()
        return obs, mask, critic, order, logp, adv, ret


def _stack(decs: Sequence[Decision]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Padded obs, mask, critic features and orderings of some decisions.

    Padding goes to the longest queue among them, not to ``max_queue``: cheaper, and the model's
    outputs do not depend on the padding width.
    """
    width = max(len(d.obs) for d in decs)
    obs, mask = pad_queues([d.obs for d in decs], width, decs[0].obs.shape[1])
    critic = torch.from_numpy(np.stack([d.critic for d in decs]))
    k = max(len(d.order) for d in decs)
    order = torch.full((len(decs), k), -1, dtype=torch.int64)
    for row, d in enumerate(decs):
        order[row, : len(d.order)] = torch.from_numpy(d.order)
    return obs, mask, critic, order


def ppo_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: RolloutBatch,
    cfg: PPOConfig,
    rng: np.random.Generator,
) -> dict[str, float]:
    """CleanRL's PPO update over ``batch``; returns the last epoch's mean losses and diagnostics."""
    n = len(batch)
    stats = {"pg_loss": 0.0, "v_loss": 0.0, "entropy": 0.0, "approx_kl": 0.0, "clipfrac": 0.0, "updates": 0.0}
    if n == 0:
        return stats
    model.train()
    stopped = False
    for epoch in range(cfg.update_epochs):
        perm = rng.permutation(n)
        sums = {key: 0.0 for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac")}
        n_mb = 0
        for start in range(0, n, cfg.minibatch_size):
            mb = perm[start : start + cfg.minibatch_size]
            obs, mask, critic, order, old_logp, adv, ret = batch.tensors(mb)
            _, new_logp, entropy, value = model.get_action_and_value(obs, mask, critic, action=order)
            logratio = new_logp - old_logp
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
                clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
            if cfg.norm_adv and len(mb) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)

            pg_loss = torch.max(
                -adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)
            ).mean()
            v_loss = 0.5 * ((value - ret) ** 2).mean()
            ent = entropy.mean()
            loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss

            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()

            for key, val in (
                ("pg_loss", pg_loss),
                ("v_loss", v_loss),
                ("entropy", ent),
                ("approx_kl", approx_kl),
                ("clipfrac", clipfrac),
            ):
                sums[key] += float(val.detach())
            n_mb += 1
            stats["updates"] += 1
            if cfg.target_kl is not None and epoch >= cfg.kl_min_epochs and float(approx_kl) > cfg.target_kl:
                stopped = True
                break
        for key, total in sums.items():
            stats[key] = total / max(n_mb, 1)
        if stopped:
            break
    stats["kl_stop"] = float(stopped)
    model.eval()
    return stats
