"""The learned prioritizer's model: a permutation-equivariant actor-critic and its action.

- ``ModelConfig`` (``config.py``): network sizes, queue padding, the action's truncation.
- ``ActorCritic`` (``network.py``): one MLP scores every queued job; a critic values the state.
- ``PlackettLuce`` (``plackett_luce.py``): the PPO action, an ordering of the queue.
- ``order_to_priorities`` / ``scores_to_priorities`` (``priorities.py``): the integer priority
  vector the scheduler uses, from a sampled ordering (training) or from scores (production).
- ``save_checkpoint`` / ``load_checkpoint`` (``checkpoint.py``): state dict plus a JSON card.

``docs/model.md`` explains the choices.
"""

from shared.model.checkpoint import (
    CardFeatures,
    CheckpointCardError,
    CheckpointError,
    CheckpointIntegrityError,
    CheckpointMissingError,
    CheckpointSettings,
    CheckpointTooLargeError,
    ConfigMismatchError,
    ModelCard,
    SchemaMismatchError,
    TrainingInfo,
    load_checkpoint,
    read_card,
    save_checkpoint,
)
from shared.model.config import ModelConfig
from shared.model.network import ActorCritic, layer_init
from shared.model.plackett_luce import (
    PlackettLuce,
    check_order,
    first_pick_entropy,
    greedy_order,
    log_prob,
    sample_order,
    sequential_entropy,
)
from shared.model.priorities import order_to_priorities, pad_queues, scores_to_priorities

__all__ = [
    "ActorCritic",
    "CardFeatures",
    "CheckpointCardError",
    "CheckpointError",
    "CheckpointIntegrityError",
    "CheckpointMissingError",
    "CheckpointSettings",
    "CheckpointTooLargeError",
    "ConfigMismatchError",
    "ModelCard",
    "ModelConfig",
    "PlackettLuce",
    "SchemaMismatchError",
    "TrainingInfo",
    "check_order",
    "first_pick_entropy",
    "greedy_order",
    "layer_init",
    "load_checkpoint",
    "log_prob",
    "order_to_priorities",
    "pad_queues",
    "read_card",
    "sample_order",
    "save_checkpoint",
    "scores_to_priorities",
    "sequential_entropy",
]
