"""Warm start by imitation (the DL2 idea): train the actor to reproduce the incumbent's order.

Before any reinforcement learning, the actor is fitted by supervised learning to the order the base
policy (the incumbent scheduler) gives the queue, so a first deployment starts no worse than the
incumbent, and PPO then fine-tunes from there (``shared.rl.trainer.train(initial_state=...)``).

- ``demonstrations.py``: (queue observation, incumbent order) pairs, produced by running the base
  policy in the simulator through the very ``LearnedPolicy`` feature pipeline PPO episodes use;
- ``loss.py``: the Plackett-Luce (listwise) negative log-likelihood of the incumbent order;
- ``fit.py``: the supervised loop, returning a state dict for ``train(initial_state=...)``;
- ``agreement.py``: how closely a model's greedy order agrees with the incumbent's (Kendall tau,
  top-1), and the schedule it produces against the base policy's.

``docs/trainer.md`` describes the method and its test.
"""

from shared.imitation.agreement import Agreement, agreement, kendall_tau
from shared.imitation.demonstrations import Demonstration, collect_base, collect_on_policy
from shared.imitation.fit import ImitationConfig, ImitationResult, imitate
from shared.imitation.loss import incumbent_order, listwise_nll

__all__ = [
    "Agreement",
    "Demonstration",
    "ImitationConfig",
    "ImitationResult",
    "agreement",
    "collect_base",
    "collect_on_policy",
    "imitate",
    "incumbent_order",
    "kendall_tau",
    "listwise_nll",
]
