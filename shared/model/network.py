"""The actor-critic: a per-job scoring kernel (actor) and a state-value MLP (critic).

Shapes, batched over decisions: ``obs [B, N, F_obs]`` per-job features, ``mask [B, N]`` True for
real jobs, ``critic [B, F_crit]`` cluster-level features. N is any queue length (training pads to
``config.max_queue``).

The actor applies the same MLP to every job row, so it is permutation-equivariant (reordering the
queue reorders the scores, nothing else) and its size does not grow with the queue, unlike the
paper's critic, which flattens the whole 128 x 7 observation. Padded rows never enter a layer (the
actor scores only real rows; the critic's pooling zeroes the others first), so whatever a featurizer
leaves in them (garbage, NaN) reaches neither scores, values nor gradients.

Initialisation follows CleanRL's ``ppo.py``: orthogonal weights with gain sqrt(2) on hidden layers,
0.01 on the actor's output (near-uniform initial policy) and 1 on the critic's output, zero biases.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from shared.model.config import ModelConfig
from shared.model.plackett_luce import PlackettLuce, greedy_order
from shared.model.priorities import scores_to_priorities

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights scaled by ``std`` and constant biases (CleanRL's ``layer_init``)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation: str, out_std: float) -> nn.Sequential:
    """Linear layers with ``activation`` between them and an orthogonally initialised output layer."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [layer_init(nn.Linear(in_dim, width)), _ACTIVATIONS[activation]()]
        in_dim = width
    layers.append(layer_init(nn.Linear(in_dim, out_dim), std=out_std))
    return nn.Sequential(*layers)


def slot_prior(base_prior: float, n: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``-base_prior * slot`` for slots 0 .. n-1: the logit each queue slot starts with.

    Why: the slots follow the base policy's order (the simulator's ``LearnedPolicy`` and the
    prioritizer lay the queue out so), so this prior alone ranks as the base policy does, and the
    kernel's score is a departure from it, in logits: a job moves up k slots when its score beats
    its neighbours' by more than ``k * base_prior``. A model trained over SJF thus starts exactly
    at SJF instead of an imitation of it that is a few percent behind, and sampling explores
    around the base order. Computed in float32 (the kernel's type) for every path alike
    (``shared.model.fast.FastActor`` adds the same numbers)."""
    return torch.arange(n, dtype=torch.float32).mul_(-float(base_prior)).to(dtype)


class ActorCritic(nn.Module):
    """Scores every queued job with one shared MLP; values a state with another."""

    def __init__(self, config: ModelConfig | None = None) -> None:
        super().__init__()
        self.config = config or ModelConfig()
        cfg = self.config
        self.actor = mlp(cfg.obs_features, cfg.actor_hidden, 1, cfg.activation, out_std=0.01)
        if cfg.base_prior > 0:
            # a residual policy: the kernel's output starts at exactly zero, so the base-order
            # prior alone ranks, and the model starts as its base policy (``slot_prior``)
            out = self.actor[-1]
            assert isinstance(out, nn.Linear)
            nn.init.zeros_(out.weight)
        self.critic = mlp(cfg.critic_input_dim, cfg.critic_hidden, 1, cfg.activation, out_std=1.0)
        #: the sampling rule (``shared.features.SamplingConfig``: feature set included) of the card
        #: the weights were loaded from (``shared.rl.setup.load_trained``); None for a model built
        #: here. Why: the model's inputs are that rule's columns, so a runner set up without the
        #: card's feature set still feeds it its own (``EpisodeRunner.sampling_for``)
        self.trained_sampling: object | None = None

    # -- inputs -----------------------------------------------------------------------------------

    def _check(self, obs: Tensor, mask: Tensor, critic: Tensor | None = None) -> None:
        """Readable shape errors instead of a matmul failure deep inside the MLP."""
        cfg = self.config
        if obs.dim() != 3 or obs.shape[-1] != cfg.obs_features:
            raise ValueError(f"obs must be [B, N, {cfg.obs_features}], got {tuple(obs.shape)}")
        if mask.dtype != torch.bool or tuple(mask.shape) != tuple(obs.shape[:2]):
            raise ValueError(
                f"mask must be bool {tuple(obs.shape[:2])}, got {mask.dtype} {tuple(mask.shape)}"
            )
        if critic is not None and tuple(critic.shape) != (obs.shape[0], cfg.critic_features):
            raise ValueError(
                f"critic features must be [{obs.shape[0]}, {cfg.critic_features}], got {tuple(critic.shape)}"
            )

    @staticmethod
    def _clean(obs: Tensor, mask: Tensor) -> Tensor:
        """Zero the padded rows (``where``, not a product, so NaN padding is removed too)."""
        return torch.where(mask.unsqueeze(-1), obs, torch.zeros_like(obs))

    # -- actor and critic -------------------------------------------------------------------------

    def scores(self, obs: Tensor, mask: Tensor) -> Tensor:
        """Priority score (logit) of every slot, ``[B, N]``; padded slots get 0 and must be masked."""
        self._check(obs, mask)
        # Only real rows go through the kernel: padding costs nothing and cannot leak into scores or
        # gradients. On CPU it costs about the same at full occupancy and is ~6x faster at 25%.
        real: Tensor = self.actor(obs[mask])
        scores = obs.new_zeros(mask.shape).masked_scatter(mask, real.squeeze(-1))
        if self.config.base_prior > 0:
            scores = scores + slot_prior(self.config.base_prior, mask.shape[-1], scores.dtype)
        return scores

    def value(self, obs: Tensor, mask: Tensor, critic: Tensor) -> Tensor:
        """State value ``[B]`` from the critic features and, if ``critic_pool``, the mean real job."""
        self._check(obs, mask, critic)
        inputs = critic
        if self.config.critic_pool:
            clean = self._clean(obs, mask)
            count = mask.sum(dim=-1, keepdim=True).clamp_min(1).to(obs.dtype)
            inputs = torch.cat([critic, clean.sum(dim=1) / count], dim=-1)
        out: Tensor = self.critic(inputs)
        return out.squeeze(-1)

    def distribution(self, obs: Tensor, mask: Tensor) -> PlackettLuce:
        """The Plackett-Luce action distribution over the queue, truncated to ``config.top_k``."""
        return PlackettLuce(self.scores(obs, mask), mask, self.config.top_k)

    def get_action_and_value(
        self,
        obs: Tensor,
        mask: Tensor,
        critic: Tensor,
        action: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """CleanRL's rollout/update call: (ordering, its log-prob, entropy, value).

        Samples an ordering when ``action`` is None (rollout), else scores the stored one (update).
        The entropy follows ``config.entropy``: exact first pick, or the sequential estimate along
        the ordering.
        """
        dist = self.distribution(obs, mask)
        if action is None:
            action = dist.sample(generator)
        entropy = dist.entropy(action if self.config.entropy == "sequential" else None)
        return action, dist.log_prob(action), entropy, self.value(obs, mask, critic)

    # -- deterministic use (evaluation, production) ------------------------------------------------

    @torch.no_grad()
    def greedy(self, obs: Tensor, mask: Tensor) -> Tensor:
        """Full deterministic ordering ``[B, N]``: score descending, ties by slot, -1 after the last job."""
        return greedy_order(self.scores(obs, mask), mask)

    @torch.no_grad()
    def priorities(self, obs: Tensor, mask: Tensor) -> Tensor:
        """Integer priority vector ``[B, N]``, higher first: the greedy top-``config.top_k`` by score,
        then the rest in slot order (``scores_to_priorities``). What production and evaluation use."""
        return scores_to_priorities(self.scores(obs, mask), mask, self.config.top_k)
