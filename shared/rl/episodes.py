"""Episodes: one window of jobs, simulated warm, scored against the base policy's run of it.

An episode simulates the ``warmup`` jobs before a window and the window's jobs, until all have
finished, scoring only the window (``metric_range``). The agent acts from the window's first
submit on (before that it is the base policy, so the warm-up schedule is the base policy's). The
base policy's score of each window is computed once and cached: it is the reference of the
normalized-gap reward (``shared.rl.reward``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from shared.domain.exclusions import Exclusion
from shared.features import FeatureSampler, FeatureSchema, SamplingConfig
from shared.metrics import Window, WindowMetrics, excluded_in_window, summarize_window
from shared.model import ActorCritic
from shared.policies import Policy, make_policy
from shared.rl.policy import Decision, LearnedPolicy, Mode
from shared.rl.reward import RewardSpec, window_values
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.result import SimResult
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator


@dataclass
class EpisodeResult:
    """What one episode returns to the trainer (picklable, for worker processes)."""

    window: Window
    reward: float
    base_scores: dict[str, float]
    agent_scores: dict[str, float]
    decisions: list[Decision] = field(default_factory=list)
    sim_seconds: float = 0.0
    #: blocked cycles the policy answered with the base order (not actions, not in ``decisions``)
    skipped: int = 0
    #: of ``sim_seconds``, the time the policy spent deciding (features, forward, sampling)
    policy_seconds: float = 0.0
    #: with ``run(..., stages=True)``: of ``policy_seconds``, each stage's (``LearnedPolicy._decide``)
    stage_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class EpisodeSettings:
    """Everything that fixes how a window is simulated and scored."""

    base_policy: str = "fcfs"
    reward: RewardSpec = field(default_factory=lambda: RewardSpec.parse("bsld"))
    config: SimConfig = field(default_factory=SimConfig)
    warmup: int = 256
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    #: the event loop: ``"hylo"`` (``shared.sim.simulator``, EASY backfill at every event) or
    #: ``"slurm-cadence"`` (``shared.sim.slurm_cadence``: slurmctld's main scheduler on events,
    #: stopping at the first blocked job, and its backfill every 5 s; what the live Slurm testbed
    #: does, and what ranks the policies' makespans as it does)
    loop: str = "hylo"
    #: with the Slurm-cadence loop: how long after each submission or job end Hylo's priorities
    #: reach slurmctld (push event, poll, pipeline, ``scontrol``); the live testbed measured 0.1-0.5 s.
    #: A policy trained with priorities current at every pass learns orders that lose their gain once
    #: they arrive late (``docs/results/slurm-policy.md``), so training can see the lag it will have.
    decision_lag_s: float = 0.0

    @property
    def schema(self) -> FeatureSchema:
        """The feature schema the agent's inputs follow (its hash goes into checkpoints)."""
        return FeatureSchema.current(sampling=self.sampling)


class EpisodeRunner:
    """Simulates windows of one bound workload under the base policy and under the agent."""

    def __init__(
        self, workload: BoundWorkload, settings: EpisodeSettings, exclusions: Sequence[Exclusion] = ()
    ) -> None:
        self.workload = workload
        self.settings = settings
        #: the jobs left out at load and binding time: each window's summary counts its own
        self.exclusions = tuple(exclusions)
        self._base_cache: dict[Window, WindowMetrics] = {}

    def job_range(self, window: Window) -> tuple[int, int]:
        return max(0, window.start - self.settings.warmup), window.stop

    def _simulate_result(self, policy: Policy, window: Window) -> SimResult:
        """``policy``'s run of ``window`` (its warm-up included) under the run's settings."""
        if self.settings.loop == "slurm-cadence":
            from shared.sim.slurm_cadence import SlurmCadence

            cadence = SlurmCadence(
                self.workload,
                policy,
                config=self.settings.config,
                decision_lag_s=self.settings.decision_lag_s,
            )
            return cadence.run(self.job_range(window), (window.start, window.stop))
        if self.settings.loop != "hylo":
            raise ValueError(f"unknown event loop {self.settings.loop!r}: hylo or slurm-cadence")
        if self.settings.decision_lag_s:
            raise ValueError("decision_lag_s needs the slurm-cadence loop (Hylo's simulator decides at once)")
        sim = Simulator(self.workload, policy, self.settings.config)
        return sim.run(self.job_range(window), (window.start, window.stop))

    def simulate(self, policy_or_name: LearnedPolicy | str, window: Window) -> WindowMetrics:
        """Metrics of ``window`` under a base policy (by name) or a learned policy."""
        policy = make_policy(policy_or_name) if isinstance(policy_or_name, str) else policy_or_name
        result = self._simulate_result(policy, window)
        name = policy_or_name if isinstance(policy_or_name, str) else policy.describe()
        excluded = excluded_in_window(self.exclusions, self.workload.jobs.submit, window)
        metrics = summarize_window(result, window, excluded=excluded, label=window.label)
        return metrics.model_copy(update={"policy": name})

    def base_metrics(self, window: Window) -> WindowMetrics:
        """The base policy's metrics of ``window`` (cached: every episode on it needs them)."""
        cached = self._base_cache.get(window)
        if cached is None:
            cached = self._base_cache[window] = self.simulate(self.settings.base_policy, window)
        return cached

    def learned_policy(
        self,
        model: ActorCritic,
        window: Window,
        mode: Mode,
        generator: torch.Generator | np.random.Generator | None = None,
        base_policy: str | None = None,
    ) -> LearnedPolicy:
        """The agent for ``window``: the base policy until the window's first submit."""
        warm_until = float(self.workload.jobs.submit[window.start])
        base = make_policy(base_policy or self.settings.base_policy)
        sampler = FeatureSampler(self.sampling_for(model))
        return LearnedPolicy(
            model, base, mode=mode, warm_until=warm_until, sampler=sampler, generator=generator
        )

    def sampling_for(self, model: ActorCritic) -> SamplingConfig:
        """The sampling rule ``model`` is run with: the settings', unless the model was loaded from
        a card of another feature set (``ActorCritic.trained_sampling``), whose rule it then gets:
        its inputs are that set's columns. A set that reads the runtime predictions needs a
        workload prepared with them; one without any is refused (its features would all read
        "missing", unlike the model's training), naming what to do."""
        own = self.settings.sampling
        trained = model.trained_sampling
        if not isinstance(trained, SamplingConfig) or trained.feature_set == own.feature_set:
            return own
        jobs = self.workload.jobs
        if trained.pool.reads_predictions and len(jobs) and not np.isfinite(jobs.predicted).any():
            raise ValueError(
                f"the model's feature set {trained.feature_set!r} reads the runtime predictions, and "
                "this workload was prepared without them: prepare it with predictions "
                "(RunSetup(feature_set=...), or a predictor-based baseline such as sjf-pred among "
                "hylo evaluate's --policies)"
            )
        return trained

    def run(
        self, model: ActorCritic, window: Window, mode: Mode = "sample", seed: int = 0, stages: bool = False
    ) -> EpisodeResult:
        """One episode: simulate the agent on ``window``; reward against the cached base run.
        ``stages`` times the policy's stages too (``EpisodeResult.stage_seconds``)."""
        import time

        # numpy's stream: the policy samples its orderings in numpy (shared.model.fast)
        policy = self.learned_policy(model, window, mode, np.random.default_rng(seed))
        if stages:
            policy.stage_seconds = {}
        t0 = time.perf_counter()
        result = self._simulate_result(policy, window)
        wall = time.perf_counter() - t0
        spec = self.settings.reward
        base_scores = spec.scores(self.base_metrics(window))
        # the reward's scores only (``window_means``: ``summarize_window``'s means and
        # utilization, the same floats, without its percentiles and model: a third of a
        # millisecond an episode on Philly; plus the makespan when the reward asks for it); its
        # keys are the reward's metric names
        agent_scores = window_values(result, window, spec.metrics)
        return EpisodeResult(
            window=window,
            reward=spec.reward(base_scores, agent_scores),
            base_scores=base_scores,
            agent_scores=agent_scores,
            decisions=policy.log.decisions,
            sim_seconds=wall,
            skipped=policy.skipped,
            policy_seconds=policy.seconds,
            stage_seconds=policy.stage_seconds or {},
        )


def episode_seed(seed: int, epoch: int, index: int) -> int:
    """A per-episode seed that does not depend on which worker runs the episode."""
    return int(np.random.SeedSequence([seed, epoch, index]).generate_state(1)[0])
