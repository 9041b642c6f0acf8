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
On a small cluster (the featurizer's ``all_kinds`` case: the training clusters) a sampled decision
is two compiled calls and the few numpy calls between them (``_sample``): the cluster view, every
job kind's values and the queue's columns from the state's node arrays and the running jobs'
arrays (``SimObserver``, no ``ClusterView`` built), then the selection, ``demand_supply``'s numpy
products and the noise's draws, then the observation, the forward pass (torch's BLAS and tanh
called directly), the sample's order and the keys (``finish_and_sample``): about 0.5-0.7 of the
policy's time per cycle of the separate calls, measured episode by episode in one process. The
greedy path takes the fused observation and forward pass too.
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
from shared.features.catalog import FeatureSet
from shared.features.fast import Observation, WorkloadFeaturizer
from shared.features.kernels import finish_kernel
from shared.features.sim_observe import UNSUPPORTED, SimObserver
from shared.features.views import ClusterView
from shared.model import ActorCritic, order_to_priorities, sample_order
from shared.model.fast import FastActor, base_head, greedy_priorities, gumbel_log, learned_keys
from shared.policies.base import Policy, PolicyContext
from shared.policies.capabilities import hooks
from shared.rl.fused import blas_matches_numpy, finish_and_sample, libm_matches_numpy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import Alloc, ClusterState

Mode = Literal["sample", "greedy"]

#: ``finish_and_sample``'s "no keys to write"
_NO_INTS = np.zeros(0, dtype=np.int64)
_NO_FLOATS = np.zeros(0, dtype=np.float64)


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

_FEATURIZERS: list[
    tuple[BoundWorkload, np.ndarray, FeatureConfig, FeatureSet, SimViewBuilder, WorkloadFeaturizer]
] = []
_OBSERVERS: list[SimObserver] = []


def _views(
    workload: BoundWorkload, estimate: np.ndarray, config: FeatureConfig, pool: FeatureSet
) -> tuple[SimViewBuilder, WorkloadFeaturizer]:
    """The view builder and featurizer of a workload, its estimates and a feature set, built once
    for every episode over them: a training run simulates the same workload hundreds of times,
    and both are per-job precomputations (on Philly's 82,247 jobs the builder alone took 1.2 ms an
    episode, about 60 us per recorded decision). Estimates are compared by value (each simulation
    passes a new array)."""
    est = np.asarray(estimate, dtype=np.float64)
    for w, e, c, p, builder, fz in _FEATURIZERS:
        if w is workload and c == config and p == pool and np.array_equal(e, est):
            return builder, fz
    builder = SimViewBuilder(workload, est)
    fz = WorkloadFeaturizer.for_builder(builder, config, pool)
    fz.ends_sorted = True  # the policy's RunningJobs keeps them sorted
    _FEATURIZERS.insert(0, (workload, est.copy(), config, pool, builder, fz))
    del _FEATURIZERS[4:]
    return builder, fz


def _observer(builder: SimViewBuilder, featurizer: WorkloadFeaturizer) -> SimObserver:
    """The ``SimObserver`` of a view builder and featurizer, built once for every episode over
    them (its buffers are per cluster and workload)."""
    for observer in _OBSERVERS:
        if observer.builder is builder and observer.featurizer is featurizer:
            return observer
    observer = SimObserver(builder, featurizer)
    _OBSERVERS.insert(0, observer)
    del _OBSERVERS[4:]
    return observer


#: a hook that replaces the model (the Gymnasium env): (obs [n, F], critic [F_crit], now) -> priorities [n]
Controller = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


class LearnedPolicy(Policy):
    """The learned prioritizer inside the simulator; see the module docstring."""

    # the simulator's compiled core runs it (``ExternalCompiled``: ``external_hints`` and
    # ``external_changed`` below), asking ``keys`` at each cycle that orders the queue
    # (``shared.sim.compiled.run.run_external``): it reads only the state's free node arrays and
    # its ``running`` jobs, kept by the core in ``RunningJobs``' layout
    name = "learned"
    dynamic = True

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
        #: the base policy's hooks (its starts and ends are passed on only where it tracks jobs)
        self.base_hooks = hooks(base)
        self.mode = mode
        self.warm_until = warm_until
        self.sampler = sampler or FeatureSampler()
        if model is not None and model.config.obs_features != self.sampler.config.n_observation:
            raise ValueError(
                f"the model takes {model.config.obs_features} observation features, the sampler's "
                f"feature set {self.sampler.config.feature_set!r} gives {self.sampler.config.n_observation}: "
                "run it with the feature set and sampling rule of its card"
            )
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
        self.builder, self.featurizer = _views(
            ctx.workload, ctx.estimate, self.feature_config, self.sampler.pool
        )
        self.est = ctx.estimate

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        if self.base_hooks.attach is not None:
            self.base_hooks.attach(state, allocs)
        self.state = state
        self.allocs = allocs
        # the compiled core keeps the running jobs itself (``CompiledState.running``), in the
        # layout ``RunningJobs`` keeps them: starts and ends need not be told one by one
        shared = getattr(state, "running", None)
        self._own_running = shared is None
        self.running = RunningJobs() if shared is None else shared
        self.log = DecisionLog()
        # here, not in ``bind``: the featurizer may have been replaced since
        self.observer = _observer(self.builder, self.featurizer)
        #: sampled decisions through ``_sample`` (numpy's draws, the fused forward pass, a
        #: featurizer that ``SimObserver`` takes)
        self._libm = libm_matches_numpy()
        self._blas = blas_matches_numpy()
        self._fused = (
            self.mode == "sample"
            and self.controller is None
            and isinstance(self.generator, np.random.Generator)
            and self.actor is not None
            and self.actor.fused
            and self.observer.usable
        )
        self.touch()

    def touch(self) -> None:
        """The free state changed: a new version, so no cached view or placement count is reused."""
        self.version = next(_VERSIONS)

    def external_hints(self, jobs: IntArray) -> tuple[float, FloatArray | None]:
        """Before the scored window, and for a queue of one job, the keys are the base policy's
        with no side effect: a base policy with static keys lets the compiled core order those
        cycles itself."""
        base = self.base
        if base.dynamic or self.base_hooks.on_start is not None:
            return -np.inf, None
        return self.warm_until, np.asarray(base.keys(jobs, 0.0), dtype=np.float64)

    def external_changed(self, n_events: int) -> bool:
        """Jobs started or ended since the last decision: a new state version; the starts and
        ends themselves only for a base policy that tracks jobs (the running jobs are the core's)."""
        self.touch()
        return self.base_hooks.on_start is not None

    def on_start(self, j: int, now: float) -> None:
        self.version = next(_VERSIONS)
        if self._own_running:
            self.running.add(j, self.allocs[j].group, now + float(self.est[j]))
        base_start = self.base_hooks.on_start
        if base_start is not None:
            base_start(j, now)

    def on_end(self, j: int, now: float) -> None:
        self.version = next(_VERSIONS)
        if self._own_running:
            self.running.remove(j)
        base_end = self.base_hooks.on_end
        if base_end is not None:
            base_end(j, now)

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
        # the slots' keys are -priorities (<= -1), the rest follow in base order (0, 1, ...): a
        # sampled decision's last compiled call writes them (``_sample``), else ``learned_keys``
        keys = np.empty(n, dtype=np.float64)
        decided = self._decide(head, now, len(head) == n, base_order, keys)
        if decided is None:
            self.skipped += 1
            self.seconds += time.perf_counter() - t0
            return base_keys  # nothing can start whatever the order: the model is not asked
        priorities, written = decided
        if not written:
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
        decided = self._decide(jobs, now, False)
        assert decided is not None
        return decided[0]

    def _observe(
        self, jobs: IntArray, now: float, skip: bool, stages: dict[str, float] | None = None
    ) -> Observation | None:
        """The observation of the slots ``jobs`` (None when ``skip`` and no job fits now): in one
        compiled call from the state and the running jobs where the featurizer allows it
        (``SimObserver``), else from the cluster view. With ``stages``, the view's build time is
        moved from "features" (where the caller adds this call's) to "view"."""
        if self.observer.usable:
            o = self.observer.observe(
                self.state.groups,
                self.running,
                jobs,
                now,
                self.sampler,
                self.version,
                skip,
                self.cluster_view,
            )
            if o is not UNSUPPORTED:
                return o
        t0 = time.perf_counter()
        view = self.cluster_view()
        if stages is not None:
            built = time.perf_counter() - t0
            stages["view"] = stages.get("view", 0.0) + built
            stages["features"] = stages.get("features", 0.0) - built
        return self.featurizer.observe_unless_blocked(jobs, now, view, self.sampler, self.version, skip)

    def _decide(
        self,
        jobs: IntArray,
        now: float,
        may_skip: bool,
        base_order: IntArray | None = None,
        keys: FloatArray | None = None,
    ) -> tuple[np.ndarray, bool] | None:
        """Priorities of the slots ``jobs``, and whether the simulator's sort ``keys`` of
        ``base_order`` were written too; None when ``may_skip`` and no job can start now.

        A sample with a numpy generator on a featurizer ``SimObserver`` takes is two compiled
        calls and the numpy calls between them (``_sample``); otherwise the observation
        (``_observe``), then the order (``_order``). With ``stage_seconds``, adds the stages' wall
        times: "features" (the observation; "view" apart when a view is built), "forward" and
        "order" (see ``_sample`` and ``_order``)."""
        stages = self.stage_seconds
        t0 = time.perf_counter()
        skip = may_skip and self.skip_blocked
        if self._fused and self.observer.usable:
            got = self.observer.columns(
                self.state.groups, self.running, jobs, now, self.sampler, self.version, skip
            )
            if got is None:
                if stages is not None:
                    stages["features"] = stages.get("features", 0.0) + time.perf_counter() - t0
                return None  # blocked: no order changes what this cycle starts
            if got is not UNSUPPORTED:
                return self._sample(jobs, now, got[0], base_order, keys, t0)
        o = self._observe(jobs, now, skip, stages)
        if stages is not None:
            stages["features"] = stages.get("features", 0.0) + time.perf_counter() - t0
        if o is None:
            return None
        if self.controller is not None:
            return np.asarray(self.controller(o.obs, o.critic, now), dtype=np.int64), False
        return self._order(o, jobs, now, base_order, keys)

    def _sample(
        self,
        jobs: IntArray,
        now: float,
        multi: int,
        base_order: IntArray | None,
        keys: FloatArray | None,
        t0: float,
    ) -> tuple[np.ndarray, bool]:
        """A sampled decision after ``SimObserver.columns`` (begun at ``t0``): the selection and
        the numpy columns (``WorkloadFeaturizer.prepare_finish``), the noise's draws, then one
        call for the observation, the scores, the order, the priorities and the keys
        (``finish_and_sample``; with the wait's ``log1p``, the noise's ``log`` and
        ``demand_supply``'s BLAS products where its calls give numpy's floats:
        ``libm_matches_numpy``, ``blas_matches_numpy``; else numpy's before it), and the record.
        Stages: "features" to the draws, "order" the draws and the record, "forward" the call."""
        actor, model, gen = self.actor, self.model, self.generator
        assert actor is not None and model is not None and isinstance(gen, np.random.Generator)
        q = len(jobs)
        forward = actor.forward_args(q)
        # the wait's log1p, the noise's log and demand_supply's products in the last call where
        # its calls give numpy's floats
        libm = forward is not None and self._libm
        blas = forward is not None and self._blas and q >= 2
        fz = self.featurizer
        _, finish = fz.prepare_finish(jobs, now, multi, self.sampler, self.cluster_view, not libm, not blas)
        obs = np.empty((q, len(finish[1])), dtype=np.float32)
        critic = np.empty(len(finish[6]), dtype=np.float32)
        t1 = time.perf_counter()
        noise = gen.standard_exponential(q) if libm else gumbel_log(gen, q)
        top_k = model.config.top_k
        width = q if top_k is None else min(top_k, q)
        order = np.empty(width, dtype=np.int64)
        priorities = np.empty(q, dtype=np.int64)
        t2 = time.perf_counter()
        written = base_order is not None and keys is not None
        if forward is None:
            finish_kernel(*finish, obs, critic)
            order, priorities, written = actor.sample(obs, noise, width, base_order, keys)
        elif not finish_and_sample(
            finish,
            blas,
            *fz.products_operands(q),
            libm,
            obs,
            critic,
            forward,
            noise,
            libm,
            width,
            order,
            priorities,
            base_order if base_order is not None and written else _NO_INTS,
            keys if keys is not None and written else _NO_FLOATS,
        ):  # a NaN or a tie at the cut: the observation and the noise's log are written
            order, priorities, written = actor.sample(obs, noise, width, base_order, keys)
        t3 = time.perf_counter()
        if self.record:
            self.log.decisions.append(Decision(obs, critic, order, now))
        stages = self.stage_seconds
        if stages is not None:
            stages["features"] = stages.get("features", 0.0) + t1 - t0
            stages["forward"] = stages.get("forward", 0.0) + t3 - t2
            stages["order"] = stages.get("order", 0.0) + t2 - t1 + time.perf_counter() - t3
        return priorities, written

    def _order(
        self,
        o: Observation,
        jobs: IntArray,
        now: float,
        base_order: IntArray | None,
        keys: FloatArray | None,
    ) -> tuple[np.ndarray, bool]:
        """Priorities of the observation's slots: greedy, or a sample (recorded); and whether the
        sort ``keys`` of ``base_order`` were written. A sample with a numpy generator is the
        noise's draws (``gumbel_log``), then one call for the scores, the order, the priorities
        and the keys (``FastActor.sample``). With ``stage_seconds``, adds the wall times of the
        forward pass ("forward": for a sample, that one call, ranking and keys included) and of
        the rest ("order": greedy ranking, or the draws and the record)."""
        assert self.model is not None
        stages = self.stage_seconds
        top_k = self.model.config.top_k
        gen = self.generator
        actor = self.actor
        if actor is not None and isinstance(gen, np.random.Generator) and self.mode == "sample":
            t0 = time.perf_counter()
            log_e = gumbel_log(gen, len(jobs))
            t1 = time.perf_counter()
            order, priorities, written = actor.sample(o.obs, log_e, top_k, base_order, keys)
            t2 = time.perf_counter()
            if self.record:
                self.log.decisions.append(Decision(o.obs, o.critic, order, now))
            if stages is not None:
                stages["forward"] = stages.get("forward", 0.0) + t2 - t1
                stages["order"] = stages.get("order", 0.0) + t1 - t0 + time.perf_counter() - t2
            return priorities, written
        if actor is not None and self.mode == "greedy":
            t0 = time.perf_counter()
            scores = actor.scores(o.obs)
            t1 = time.perf_counter()
            priorities = greedy_priorities(scores, top_k)
            if stages is not None:
                stages["forward"] = stages.get("forward", 0.0) + t1 - t0
                stages["order"] = stages.get("order", 0.0) + time.perf_counter() - t1
            return priorities, False
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
        return order_to_priorities(order_t, mask)[0].numpy(), False
