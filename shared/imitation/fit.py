"""The supervised loop: fit the actor to the incumbent's order, the critic to its reward of 0.

The incumbent is the base policy unless ``ImitationConfig.teacher`` names another policy. A
teacher other than the base lets PPO start from a policy better than the one its reward is
measured against (on Philly and openb, SJF on estimates is far ahead of FCFS); the critic is then
not fitted (its target would be the teacher's unknown reward, not 0) and DAgger is refused (its
labels are the base policy's order, ``demonstrations.py``).

Data: ``collect_base`` on the training windows (the states the incumbent visits), optionally
followed by ``dagger_rounds`` rounds that add the states the partly trained model visits
(``collect_on_policy``), all labelled with the incumbent's order.

Loss: ``listwise_nll`` on the actor's scores plus ``value_coef`` times the squared value, and a
group-lasso step on the actor's input columns (``input_sparsity``, below). The critic's target is
0 because PPO's reward is the normalized gap to the base policy (``shared.rl.reward``), and a
policy that reproduces the base policy earns exactly 0: starting PPO with a critic that already
says so keeps its first advantages from being dominated by a random value head.

**Input sparsity.** An incumbent orders its queue by one or a few features (FCFS by ``wait``, SJF
by ``requested_time``), but in the demonstrations the other observed features correlate with that
order by accident, and the unconstrained fit uses them. On Philly (base FCFS, 192 GPUs) that made
the imitation unfaithful where it matters: the first jobs of a congested queue were submitted
seconds apart after hours of waiting, so their ``wait`` values (log scale over 7 days) differ by
about 3e-5 (median gap between the first two slots in held-out windows: 6e-5), where the tanh
kernel's score is nearly flat in ``wait`` (those waits lie at the top of the training range); any
weight left on another feature then decides the order. Measured (``docs/results/trainer.md``
section 1): top-1 agreement 14-84% and a schedule 37% worse to 27% better than FCFS's; more epochs
fitted the training queues better and the held-out ones worse (top-1 0.84 -> 0.31-0.54 after
200-600 epochs). So after every Adam step the first layer's weight column of each input feature
is shrunk towards zero by ``learning_rate * input_sparsity`` in norm (the proximal step of a group
lasso), and set exactly to zero when smaller: a feature stays only while the loss keeps pulling it
out faster than that. Exact zeros matter: jobs whose used features are equal get exactly equal
scores, which greedy orders by slot, i.e. in the incumbent's order, instead of by whatever the
noise in unused weights says. The proximal step interacting with Adam's normalized steps leaves
small residues (0.01-0.06 on Philly, enough to cost 25-28% of FCFS's wait), so at the end the
columns below ``input_prune`` times the largest column's norm are set to zero. PPO is free to bring
the features back (the penalty is imitation only).

The result is a state dict of the whole ``ActorCritic``, for ``train(..., initial_state=...)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from shared.imitation.demonstrations import Demonstration, collect_base, collect_on_policy
from shared.imitation.loss import listwise_nll
from shared.metrics import Window
from shared.model import ActorCritic, ModelConfig, pad_queues
from shared.policies import POLICY_NAMES
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
    input_sparsity: float = Field(
        default=3.0,
        ge=0,
        description="group-lasso strength on the actor's input columns (module docstring); 0: off",
    )
    input_prune: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="at the end, zero the input columns below this share of the largest column's norm",
    )
    teacher: str | None = Field(
        default=None, description="the policy whose order is imitated; None: the run's base policy"
    )
    seed: int = 0

    @field_validator("teacher")
    @classmethod
    def _known_policy(cls, name: str | None) -> str | None:
        if name is not None and name not in POLICY_NAMES:
            raise ValueError(f"unknown teacher policy {name!r}; choose from {', '.join(POLICY_NAMES)}")
        return name


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


def _first_layer(model: ActorCritic) -> nn.Linear:
    """The actor's first linear layer: its weight column k reads input feature k."""
    for layer in model.actor:
        if isinstance(layer, nn.Linear):
            return layer
    raise ValueError("the actor has no linear layer")


def shrink_inputs(model: ActorCritic, amount: float) -> None:
    """Proximal group-lasso step: shrink each input column's norm by ``amount`` (zero if smaller)."""
    if amount <= 0:
        return
    with torch.no_grad():
        weight = _first_layer(model).weight  # [hidden, features]
        norms = weight.norm(dim=0, keepdim=True)
        weight.mul_(torch.clamp(1.0 - amount / norms.clamp_min(1e-12), min=0.0))


def prune_inputs(model: ActorCritic, share: float) -> None:
    """Zero the input columns whose norm is below ``share`` times the largest column norm."""
    if share <= 0:
        return
    with torch.no_grad():
        weight = _first_layer(model).weight
        norms = weight.norm(dim=0)
        weight[:, norms < share * norms.max()] = 0.0


def inputs_used(model: ActorCritic) -> int:
    """How many input features the actor reads (columns of its first layer not exactly zero)."""
    return int((_first_layer(model).weight.detach().abs().sum(dim=0) > 0).sum())


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
            shrink_inputs(model, cfg.learning_rate * cfg.input_sparsity)
            nll_sum += float(nll.detach()) * len(batch)
            value_sum += float(value_loss.detach()) * len(batch)
            rows += len(batch)
        row = {
            "epoch": float(epoch),
            "nll_per_pick": nll_sum / max(rows, 1),
            "value_mse": value_sum / max(rows, 1),
            "demonstrations": float(len(demos)),
            "inputs_used": float(inputs_used(model)),
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
    """Fit an ``ActorCritic`` to the teacher's order on ``windows`` (from the training part).

    Returns its state dict (``ImitationResult.state``), ready for ``train(initial_state=...)``.
    """
    cfg = cfg or ImitationConfig()
    if not windows:
        raise ValueError("imitation needs at least one training window")
    teacher = cfg.teacher or runner.settings.base_policy
    if teacher != runner.settings.base_policy:
        if cfg.dagger_rounds:
            raise ValueError(
                f"DAgger rounds label states with the base policy's order ({runner.settings.base_policy}), "
                f"not the teacher's ({teacher}): use dagger_rounds=0 with a teacher"
            )
        cfg = cfg.model_copy(update={"value_coef": 0.0})
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = ActorCritic(model_config)
    if initial_state is not None:
        model.load_state_dict(initial_state)
    demos = collect_base(runner, windows, max_queue=model_config.max_queue, teacher=teacher)
    if not demos:
        raise ValueError(
            f"the teacher ({teacher}) made no decision with two or more queued jobs in "
            f"{len(windows)} windows: nothing to imitate (the workload never queues; raise its load)"
        )
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    history = fit_epochs(model, demos, cfg, cfg.epochs, rng, optimizer, progress)
    all_demos = list(demos)
    for r in range(cfg.dagger_rounds):
        all_demos += collect_on_policy(runner, model, windows, seed=cfg.seed * 1000 + r)
        history += fit_epochs(
            model, all_demos, cfg, cfg.epochs, rng, optimizer, progress, first_epoch=len(history) + 1
        )
    prune_inputs(model, cfg.input_prune)
    if history:
        history[-1]["inputs_used"] = float(inputs_used(model))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return ImitationResult(state, history, len(all_demos), time.perf_counter() - t_start)
