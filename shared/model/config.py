"""The model's configuration: everything needed to rebuild the network and its action space.

It is stored verbatim in every checkpoint card, so it holds only what changes the weights' shapes or
the meaning of an action; training hyperparameters (learning rates, clipping) belong to the trainer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Activation = Literal["tanh", "relu"]
EntropyMode = Literal["first_pick", "sequential"]


class ModelConfig(BaseModel):
    """Shape of the actor-critic and of its Plackett-Luce action.

    ``max_queue`` is the padding width of a training batch, not a limit of the actor: the per-job
    kernel scores a queue of any length, so a model trained on 256-job queues also ranks 1,024.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    obs_features: int = Field(default=8, ge=1, description="per-job observation features (F_obs)")
    critic_features: int = Field(default=5, ge=0, description="cluster-level critic features (F_crit)")
    max_queue: int = Field(default=256, ge=1, description="queue slots of a padded batch")
    actor_hidden: tuple[int, ...] = Field(default=(32, 16), description="hidden sizes of the job kernel")
    critic_hidden: tuple[int, ...] = Field(default=(64, 64), description="hidden sizes of the critic")
    activation: Activation = "tanh"
    critic_pool: bool = Field(
        default=True,
        description="the critic also sees the masked mean of the per-job features over real jobs",
    )
    top_k: int | None = Field(
        default=32,
        ge=1,
        description="the action is the first top_k picks of the order (None: the whole queue)",
    )
    base_prior: float = Field(
        default=0.0,
        ge=0.0,
        le=10.0,
        description="logit subtracted per queue slot (slots follow the base policy's order): with "
        "the actor's output layer started at zero the model starts as its base policy exactly, "
        "and learns only departures from it (0: off)",
    )
    entropy: EntropyMode = Field(
        default="sequential",
        description="first_pick: exact entropy of the first pick; sequential: chain-rule estimate "
        "along the sampled order",
    )

    @field_validator("actor_hidden", "critic_hidden")
    @classmethod
    def _positive_sizes(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(size < 1 for size in sizes):
            raise ValueError(f"hidden sizes must be >= 1, got {sizes}")
        return sizes

    @model_validator(mode="after")
    def _critic_has_input(self) -> ModelConfig:
        if self.critic_input_dim == 0:
            raise ValueError("the critic has no input: set critic_features >= 1 or critic_pool=True")
        return self

    @property
    def critic_input_dim(self) -> int:
        """Width of the critic's input: its own features, then the pooled job features if enabled."""
        return self.critic_features + (self.obs_features if self.critic_pool else 0)

    @property
    def parameter_count(self) -> int:
        """Weights and biases of the network this config builds (``ActorCritic``), from the shapes
        alone: what a checkpoint's card makes its reader allocate, known before allocating it (a
        card's ``actor_hidden=(20000, 20000)`` is 400 million parameters)."""
        return _mlp_parameters(self.obs_features, self.actor_hidden) + _mlp_parameters(
            self.critic_input_dim, self.critic_hidden
        )


def _mlp_parameters(in_dim: int, hidden: tuple[int, ...]) -> int:
    """Parameters of ``network.mlp(in_dim, hidden, 1, ...)``: one linear layer per width, then one
    output; each holds ``in * out`` weights and ``out`` biases (Python ints: no overflow)."""
    total = 0
    for width in (*hidden, 1):
        total += in_dim * width + width
        in_dim = width
    return total
