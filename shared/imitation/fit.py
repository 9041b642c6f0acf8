"""The supervised loop: fit the actor to the incumbent's order, the critic to its reward of 0.

Data: ``collect_base`` on the training windows (the states the incumbent visits), optionally
followed by ``dagger_rounds`` rounds that add the states the partly trained model visits
(``collect_on_policy``), all labelled with the incumbent's order.

Loss: ``listwise_nll`` on the actor's scores plus ``value_coef`` times the squared value. The
critic's target is 0 because PPO's reward is the normalized gap to the base policy
(``shared.rl.reward``), and a policy that reproduces the base policy earns exactly 0: starting PPO
with a critic that already says so keeps its first advantages from being dominated by a random
value head.

The result is a state dict of the whole ``ActorCritic``, for ``train(..., initial_state=...)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from shared.imitation.demonstrations import Demonstration, collect_base, collect_on_policy
from shared.imitation.loss import listwise_nll
from shared.metrics import Window
from shared.model import ActorCritic, ModelConfig, pad_queues
from shared.rl.episodes import EpisodeRunner


class ImitationConfig(BaseModel):
    """Hyperparameters of the supervised warm start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: int = Field(default=10, ge=1, description="passes over the demonstrations")
    learning_rate: float = Field(default=3e-3, gt=0)
    minibatch_size: int = Field(default=128, ge=1, description="queues per gradient step")
    value_coef: float = Field(default=0.5, ge=0, description="weight of the critic's (V - 0)^2 term")
    max_grad_norm: float = Field(default=1.0, gt=0)
    dagger_rounds: int = Field(default=0, ge=0, description="extra rounds on the model's own states")
    seed: int = 0


@dataclass
class ImitationResult:
    """The fitted weights, the loss per epoch, and how many demonstrations were used."""

    state: dict[str, torch.Tensor]
    history: list[dict[str, float]] = field(default_factory=list)
    demonstrations: int = 0
    wall_seconds: float = 0.0


ProgressHook = Callable[[dict[str, float]], None]


def _batches(
    demos: Sequence[Demonstration], size: int, rng: np.random.Generator
) -> list[list[Demonstration]]:
    order = rng.permutation(len(demos))
    return [[demos[i] for i in order[k : k + size]] for k in range(0, len(demos), size)]


def _stack(
    batch: Sequence[Demonstration], cfg: ModelConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(d.size for d in batch)
    obs, mask = pad_queues([d.obs for d in batch], width, cfg.obs_features)
    critic = torch.as_tensor(np.stack([d.critic for d in batch]), dtype=torch.float32)
    return obs, mask, critic


def fit_epochs(
    model: ActorCritic,
    demos: Sequence[Demonstration],
    cfg: ImitationConfig,
    epochs: int,
    rng: np.random.Generator,
    optimizer: torch.optim.Optimizer,
    progress: ProgressHook | None = None,
    first_epoch: int = 1,
) -> list[dict[str, float]]:
    """``epochs`` passes of minibatch Adam over ``demos``; one history row per epoch."""
    history: list[dict[str, float]] = []
    model.train()
    for epoch in range(first_epoch, first_epoch + epochs):
        t0 = time.perf_counter()
        nll_sum, value_sum, rows = 0.0, 0.0, 0
        for batch in _batches(demos, cfg.minibatch_size, rng):
            obs, mask, critic = _stack(batch, model.config)
            nll = listwise_nll(model.scores(obs, mask), mask, model.config.top_k)
            value = model.value(obs, mask, critic)
            value_loss = (value**2).mean()
            loss = nll + cfg.value_coef * value_loss
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            nll_sum += float(nll.detach()) * len(batch)
            value_sum += float(value_loss.detach()) * len(batch)
            rows += len(batch)
        row = {
            "epoch": float(epoch),
            "nll_per_pick": nll_sum / max(rows, 1),
            "value_mse": value_sum / max(rows, 1),
            "demonstrations": float(len(demos)),
            "seconds": time.perf_counter() - t0,
        }
        history.append(row)
        if progress:
            progress(row)
    model.eval()
    return history


def imitate(
    runner: EpisodeRunner,
    windows: Sequence[Window],
    model_config: ModelConfig,
    cfg: ImitationConfig | None = None,
    *,
    initial_state: dict[str, torch.Tensor] | None = None,
    progress: ProgressHook | None = None,
) -> ImitationResult:
    """Fit an ``ActorCritic`` to the base policy's order on ``windows`` (from the training part).

    Returns its state dict (``ImitationResult.state``), ready for ``train(initial_state=...)``.
    """
    cfg = cfg or ImitationConfig()
    if not windows:
        raise ValueError("imitation needs at least one training window")
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = ActorCritic(model_config)
    if initial_state is not None:
        model.load_state_dict(initial_state)
    demos = collect_base(runner, windows, max_queue=model_config.max_queue)
    if not demos:
        raise ValueError(
            f"the base policy made no decision with two or more queued jobs in {len(windows)} windows: "
            "nothing to imitate (the workload never queues; raise its load)"
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    history = fit_epochs(model, demos, cfg, cfg.epochs, rng, optimizer, progress)
    all_demos = list(demos)
    for r in range(cfg.dagger_rounds):
        all_demos += collect_on_policy(runner, model, windows, seed=cfg.seed * 1000 + r)
        history += fit_epochs(
            model, all_demos, cfg, cfg.epochs, rng, optimizer, progress, first_epoch=len(history) + 1
        )
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ImitationResult(state, history, len(all_demos), time.perf_counter() - t_start)
