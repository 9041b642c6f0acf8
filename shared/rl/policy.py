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

**Blocked cycles** (``skip_blocked``; on by default, except with a controller or a torch-sampled
run, which keep seeing every cycle as before): when the model's slots are
the whole queue and no queued job fits the free resources now (``can_schedule_now`` is 0 for every
job), no order can change what this cycle starts: each job is tried and fails on the raw free state
whatever comes first (an EASY reservation only adds caps, the committed head only stops the pass
earlier, and resources only shrink within a cycle). The keys are then the base policy's, the model
is not called and nothing is recorded: the decision had no effect on the episode, so it is not an
action for PPO. (The simulator may still differ in whether it re-runs the next idle cycle, which
its own idle-cycle skip makes harmless to the schedule.)

Speed: features come from a ``WorkloadFeaturizer`` (per-workload precomputation, per-state caches
keyed by a version renewed in ``on_start``/``on_end``, placement counts updated from the nodes that
changed or kept per free state, only the selected columns), the actor from a ``FastActor`` (the
module's BLAS call and activation without its batch overhead), ranks and samples from numpy's
draws in one compiled call, the slots and the keys in one compiled call each (``base_head``,
``learned_keys``): inside an episode every call costs several microseconds, the simulator having
evicted the policy's code from the caches (docs/training.md, "Speed of a decision").
``stage_seconds`` times the stages of a decision for the benchmark.
The numbers are those of the batch path (``tests/rl/test_rl_fast_policy.py``); with a numpy
``Generator`` (what ``EpisodeRunner.run`` passes) sampling draws from numpy's stream, with a torch
``Generator`` (or none) from torch's, as before.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from shared.domain.jobs import FloatArray, IntArray
from shared.features import FeatureConfig, FeatureSampler, RunningJobs, SimViewBuilder
from shared.features.fast import Observation, WorkloadFeaturizer
from shared.features.views import ClusterView
from shared.model import ActorCritic, order_to_priorities, sample_order
from shared.model.fast import FastActor, base_head, greedy_priorities, learned_keys, sample_with_priorities
from shared.policies.base import Policy, PolicyContext
from shared.sim.binding import BoundWorkload
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


#: versions of free states, unique across policies: policies of one workload share a featurizer,
#: whose caches are keyed by version
_VERSIONS = itertools.count(1)

_FEATURIZERS: list[tuple[BoundWorkload, np.ndarray, FeatureConfig, SimViewBuilder, WorkloadFeaturizer]] = []


def _views(
    workload: BoundWorkload, estimate: np.ndarray, config: FeatureConfig
) -> tuple[SimViewBuilder, WorkloadFeaturizer]:
    """The view builder and featurizer of a workload and its estimates, built once for every
    episode over them: a training run simulates the same workload hundreds of times, and both are
    per-job precomputations (on Philly's 82,247 jobs the builder alone took 1.2 ms an episode,
    about 60 us per recorded decision). Estimates are compared by value (each simulation passes a
    new array)."""
    est = np.asarray(estimate, dtype=np.float64)
    for w, e, c, builder, fz in _FEATURIZERS:
        if w is workload and c == config and np.array_equal(e, est):
            return builder, fz
    builder = SimViewBuilder(workload, est)
    fz = WorkloadFeaturizer.for_builder(builder, config)
    fz.ends_sorted = True  # the policy's RunningJobs keeps them sorted
    _FEATURIZERS.insert(0, (workload, est.copy(), config, builder, fz))
    del _FEATURIZERS[4:]
    return builder, fz


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
        generator: torch.Generator | np.random.Generator | None = None,
        record: bool | None = None,
        controller: Controller | None = None,
        max_queue: int | None = None,
        skip_blocked: bool | None = None,
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
        if skip_blocked is None:
            # a controller sees every cycle; torch-sampled runs (hylo evaluate) keep drawing noise
            # for blocked cycles, so they repeat the runs made before the skip existed
            torch_sampled = mode == "sample" and not isinstance(generator, np.random.Generator)
            skip_blocked = controller is None and not torch_sampled
        self.skip_blocked = skip_blocked
        self.log = DecisionLog()
        self.name = f"learned/{base.name}"
        self.actor = FastActor(model) if model is not None else None
        self.version = 0  # renewed (``touch``) whenever a job starts or ends: the free state changed
        self.skipped = 0  # blocked cycles answered with the base order (see the module docstring)
        self.seconds = 0.0  # wall time spent deciding (keys), for the throughput benchmark
        #: when a dict, ``_decide`` adds its stages' wall times to it (view, features, forward,
        #: order); the rest of ``seconds`` is the glue in ``keys`` (bench/rl_throughput.py)
        self.stage_seconds: dict[str, float] | None = None
        self._view: tuple[int, ClusterView] | None = None

    # -- simulator hooks ------------------------------------------------------------------------

    def bind(self, ctx: PolicyContext) -> None:
        super().bind(ctx)
        self.base.bind(ctx)
        self.builder, self.featurizer = _views(ctx.workload, ctx.estimate, self.feature_config)
        self.est = ctx.estimate

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        self.base.attach(state, allocs)
        self.state = state
        self.allocs = allocs
        self.running = RunningJobs()
        self.log = DecisionLog()
        self.touch()

    def touch(self) -> None:
        """The free state changed: a new version, so no cached view or placement count is reused."""
        self.version = next(_VERSIONS)

    def on_start(self, j: int, now: float) -> None:
        self.version = next(_VERSIONS)
        self.running.add(j, self.allocs[j].group, now + float(self.est[j]))
        if self.base.tracks_jobs:
            self.base.on_start(j, now)

    def on_end(self, j: int, now: float) -> None:
        self.version = next(_VERSIONS)
        self.running.remove(j)
        if self.base.tracks_jobs:
            self.base.on_end(j, now)

    def describe(self) -> str:
        return self.name

    # -- the decision -----------------------------------------------------------------------------

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        t0 = time.perf_counter()
        base_keys = np.asarray(self.base.keys(idx, now), dtype=np.float64)
        n = len(idx)
        if now < self.warm_until or n < 2:
            self.seconds += time.perf_counter() - t0
            return base_keys
        # the slots: the first max_queue jobs in base order (one compiled call: the stable sort and
        # the gather; numpy's when a key is NaN)
        base_order = np.empty(n, dtype=np.int64)
        head = np.empty(min(n, self.max_queue), dtype=np.int64)
        if not base_head(idx, base_keys, base_order, head):
            base_order = base_keys.argsort(kind="stable")
            head = idx[base_order[: len(head)]]
        priorities = self._decide(head, now, may_skip=len(head) == n)
        if priorities is None:
            self.skipped += 1
            self.seconds += time.perf_counter() - t0
            return base_keys  # nothing can start whatever the order: the model is not asked
        # the slots' keys are -priorities (<= -1), the rest follow in base order (0, 1, ...)
        keys = np.empty(n, dtype=np.float64)
        learned_keys(base_order, np.asarray(priorities, dtype=np.int64), keys)
        self.seconds += time.perf_counter() - t0
        return keys

    def cluster_view(self) -> ClusterView:
        """The view of the current free state and running jobs (rebuilt only after a change)."""
        if self._view is None or self._view[0] != self.version:
            running = self.running
            view = self.builder.cluster_view(self.state, running.jobs, running.group, running.est_end)
            self._view = (self.version, view)
        return self._view[1]

    def features(self, jobs: IntArray, now: float) -> Observation:
        """Selected features of queued ``jobs`` (slot order) and which of them fit now."""
        return self.featurizer.observe(jobs, now, self.cluster_view(), self.sampler, self.version)

    def observe(self, jobs: IntArray, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Observation ``[n, F_obs]`` and critic features ``[F_crit]`` of queued ``jobs`` (in slot order)."""
        o = self.features(jobs, now)
        return o.obs, o.critic

    def prioritize(self, jobs: IntArray, now: float) -> np.ndarray:
        """Integer priorities (higher first) of the slots ``jobs``, from the model or the controller."""
        priorities = self._decide(jobs, now, may_skip=False)
        assert priorities is not None
        return priorities

    def _decide(self, jobs: IntArray, now: float, may_skip: bool) -> np.ndarray | None:
        """Priorities of the slots ``jobs``; None when ``may_skip`` and no job can start now."""
        stages = self.stage_seconds
        if stages is not None:
            return self._decide_timed(jobs, now, may_skip, stages)
        o = self.featurizer.observe_unless_blocked(
            jobs, now, self.cluster_view(), self.sampler, self.version, may_skip and self.skip_blocked
        )
        if o is None:
            return None  # blocked: no order changes what this cycle starts
        if self.controller is not None:
            return np.asarray(self.controller(o.obs, o.critic, now), dtype=np.int64)
        return self._order(o, jobs, now, self._scores(o))

    def _decide_timed(
        self, jobs: IntArray, now: float, may_skip: bool, stages: dict[str, float]
    ) -> np.ndarray | None:
        """``_decide``, adding each stage's wall time to ``stages``."""
        t0 = time.perf_counter()
        view = self.cluster_view()
        t1 = time.perf_counter()
        o = self.featurizer.observe_unless_blocked(
            jobs, now, view, self.sampler, self.version, may_skip and self.skip_blocked
        )
        t2 = time.perf_counter()
        stages["view"] = stages.get("view", 0.0) + t1 - t0
        stages["features"] = stages.get("features", 0.0) + t2 - t1
        if o is None:
            return None
        if self.controller is not None:
            return np.asarray(self.controller(o.obs, o.critic, now), dtype=np.int64)
        scores = self._scores(o)
        t3 = time.perf_counter()
        out = self._order(o, jobs, now, scores)
        stages["forward"] = stages.get("forward", 0.0) + t3 - t2
        stages["order"] = stages.get("order", 0.0) + time.perf_counter() - t3
        return out

    def _scores(self, o: Observation) -> np.ndarray | None:
        """The fast actor's scores, unless the order is sampled with torch (which scores itself)."""
        if self.actor is None or (
            self.mode == "sample" and not isinstance(self.generator, np.random.Generator)
        ):
            return None
        return self.actor.scores(o.obs)

    def _order(self, o: Observation, jobs: IntArray, now: float, scores: np.ndarray | None) -> np.ndarray:
        """Priorities from the actor's ``scores`` of the observation: greedy, or a sample (recorded)."""
        assert self.model is not None
        top_k = self.model.config.top_k
        gen = self.generator
        if scores is not None:
            if self.mode == "greedy":
                return greedy_priorities(scores, top_k)
            assert isinstance(gen, np.random.Generator)
            order, priorities = sample_with_priorities(scores, top_k, gen)
            if self.record:
                self.log.decisions.append(Decision(o.obs, o.critic, order, now))
            return priorities
        # a torch generator (or torch's global one): the batch path, as before
        assert not isinstance(gen, np.random.Generator)
        obs_t = torch.from_numpy(o.obs).unsqueeze(0)
        mask = torch.ones((1, len(jobs)), dtype=torch.bool)
        with torch.no_grad():
            # log-probability and value are computed later, batched (``RolloutBatch.build``): the
            # weights do not change during a rollout, so they are exactly what they would be here
            order_t = sample_order(self.model.scores(obs_t, mask), mask, top_k, gen)
        if self.record:
            self.log.decisions.append(Decision(o.obs, o.critic, order_t[0].numpy().copy(), now))
        return order_to_priorities(order_t, mask)[0].numpy()
