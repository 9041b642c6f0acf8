"""``LearnedPolicy``: the actor-critic as a simulator policy (keys = rank in the model's order).

At each scheduling cycle the simulator asks for the sort keys of every queued job (``keys``). The
policy lays the queue out in the base policy's order, keeps its first ``max_queue`` jobs as the
model's slots (the rest follow in base order, after them, as the paper's code does with its 128
visible jobs), builds the feature views from the live cluster state (``attach``) and the running
jobs (kept in a ``RunningJobs`` through ``on_start``/``on_end``), and lets the model order the
slots:

- ``mode="sample"`` (training): a Plackett-Luce sample; every decision with at least two slots is
  recorded (features, ordering, log-probability, value) for PPO;
- ``mode="greedy"`` (evaluation, production): score descending, ties by slot (base order).

Before ``warm_until`` (the first submit of the scored window) it is the base policy, so warm-up
jobs are scheduled exactly as under the base policy and only the window's decisions are learned.
A queue of one job has nothing to order: the model is not called and nothing is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from shared.domain.jobs import FloatArray, IntArray
from shared.features import (
    FeatureConfig,
    FeatureSampler,
    RunningJobs,
    SimViewBuilder,
    compute_features,
)
from shared.model import ActorCritic, order_to_priorities, sample_order
from shared.policies.base import Policy, PolicyContext
from shared.sim.state import Alloc, ClusterState

Mode = Literal["sample", "greedy"]


@dataclass
class Decision:
    """One recorded scheduling decision: what PPO needs to re-score the action later."""

    obs: np.ndarray  # [n, F_obs] float32, slots in base order
    critic: np.ndarray  # [F_crit] float32
    order: np.ndarray  # [min(top_k, n)] int64 slot indices, best first
    time: float


@dataclass
class DecisionLog:
    """The decisions of one episode, in simulation order."""

    decisions: list[Decision] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.decisions)


#: a hook that replaces the model (the Gymnasium env): (obs [n, F], critic [F_crit], now) -> priorities [n]
Controller = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


class LearnedPolicy(Policy):
    """The learned prioritizer inside the simulator; see the module docstring."""

    name = "learned"
    dynamic = True
    tracks_jobs = True

    def __init__(
        self,
        model: ActorCritic | None,
        base: Policy,
        *,
        mode: Mode = "greedy",
        warm_until: float = -np.inf,
        sampler: FeatureSampler | None = None,
        feature_config: FeatureConfig | None = None,
        generator: torch.Generator | None = None,
        record: bool | None = None,
        controller: Controller | None = None,
        max_queue: int | None = None,
    ) -> None:
        if model is None and controller is None:
            raise ValueError("LearnedPolicy needs a model or a controller")
        self.model = model
        self.base = base
        self.mode = mode
        self.warm_until = warm_until
        self.sampler = sampler or FeatureSampler()
        self.feature_config = feature_config or FeatureConfig()
        self.generator = generator
        self.record = mode == "sample" if record is None else record
        self.controller = controller
        self.max_queue = max_queue or (model.config.max_queue if model is not None else 256)
        self.log = DecisionLog()
        self.name = f"learned/{base.name}"

    # -- simulator hooks ------------------------------------------------------------------------

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        self.base.bind(ctx)
        self.builder = SimViewBuilder(ctx.workload, ctx.estimate)
        self.est = ctx.estimate

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        self.base.attach(state, allocs)
        self.state = state
        self.allocs = allocs
        self.running = RunningJobs()
        self.log = DecisionLog()

    def on_start(self, j: int, now: float) -> None:
        self.running.add(j, self.allocs[j].group, now + float(self.est[j]))
        if self.base.tracks_jobs:
            self.base.on_start(j, now)

    def on_end(self, j: int, now: float) -> None:
        self.running.remove(j)
        if self.base.tracks_jobs:
            self.base.on_end(j, now)

    def describe(self) -> str:
        return self.name

    # -- the decision -----------------------------------------------------------------------------

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        base_keys = np.asarray(self.base.keys(idx, now), dtype=np.float64)
        if now < self.warm_until or len(idx) < 2:
            return base_keys
        base_order = np.argsort(base_keys, kind="stable")
        head = base_order[: self.max_queue]
        priorities = self.prioritize(idx[head], now)
        keys = np.empty(len(idx), dtype=np.float64)
        keys[head] = -priorities  # higher priority first; head keys are <= -1
        keys[base_order[self.max_queue :]] = np.arange(len(idx) - len(head), dtype=np.float64)
        return keys

    def observe(self, jobs: IntArray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Observation ``[n, F_obs]`` and critic features ``[F_crit]`` of queued ``jobs`` (in slot order)."""
        queue, cluster = self.builder.views(self.state, jobs, self.running)
        values = compute_features(queue, cluster, now, self.feature_config)
        obs, critic = self.sampler.select(values).apply(values)
        return obs.astype(np.float32), critic.astype(np.float32)

    def prioritize(self, jobs: IntArray, now: float) -> np.ndarray:
        """Integer priorities (higher first) of the slots ``jobs``, from the model or the controller."""
        obs, critic = self.observe(jobs, now)
        if self.controller is not None:
            return np.asarray(self.controller(obs, critic, now), dtype=np.int64)
        assert self.model is not None
        obs_t = torch.from_numpy(obs).unsqueeze(0)
        mask = torch.ones((1, len(jobs)), dtype=torch.bool)
        with torch.no_grad():
            if self.mode == "greedy":
                prio = self.model.priorities(obs_t, mask)
                return prio[0].numpy()
            # log-probability and value are computed later, batched (``RolloutBatch.build``): the
            # weights do not change during a rollout, so they are exactly what they would be here
            order = sample_order(
                self.model.scores(obs_t, mask), mask, self.model.config.top_k, self.generator
            )
        if self.record:
            self.log.decisions.append(Decision(obs, critic, order[0].numpy().copy(), now))
        return order_to_priorities(order, mask)[0].numpy()
