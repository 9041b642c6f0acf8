"""Demonstrations: the queue observations a teacher policy meets, with its order.

The teacher is the incumbent (the base policy) by default, or another policy (``teacher=``): a
base policy that PPO's reward is measured against need not be the policy worth starting from.

``LearnedPolicy`` lays the queue out in the base policy's order before the model sees it (slot 0 is
the base policy's first job, and so on), so the incumbent's order of any observation is simply the
slot order ``0, 1, ..., n-1``: a demonstration needs only the observation.

- ``collect_base`` runs the teacher itself through ``LearnedPolicy`` (as the layout's base) with a
  controller that returns the slot order (so the schedule is exactly the teacher's) and records
  every observation the controller is shown: the features PPO episodes compute, from the same code.
  Features are per job, not per slot, so an observation laid out in the teacher's order holds the
  same rows as the base policy's layout would (permuted), and the label is again the slot order.
  (With more queued jobs than ``max_queue`` the two layouts keep different jobs: each keeps its
  own policy's first ``max_queue``.)
- ``collect_on_policy`` records the observations a model meets when it schedules (its own
  sampled episodes, ``EpisodeRunner.run``): the states of the learner's own mistakes, labelled by the
  incumbent's order, as in DAgger. The label is again the slot order, which is the base policy's
  order of *that* queue: so DAgger needs the teacher to be the base policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.features import FeatureSampler
from shared.metrics import Window
from shared.model import ActorCritic
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner, episode_seed
from shared.rl.policy import LearnedPolicy


@dataclass(frozen=True)
class Demonstration:
    """One queue as the model sees it; the incumbent's order is its slot order."""

    obs: np.ndarray  # [n, F_obs] float32, slots in the base policy's order
    critic: np.ndarray  # [F_crit] float32
    window: Window
    time: float

    @property
    def size(self) -> int:
        return int(self.obs.shape[0])


class _Recorder:
    """A ``LearnedPolicy`` controller that keeps the slot order (the first slot highest, i.e. the
    base policy's order) and records every observation it is shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[np.ndarray, np.ndarray, float]] = []

    def __call__(self, obs: np.ndarray, critic: np.ndarray, now: float) -> np.ndarray:
        self.seen.append((obs.copy(), critic.copy(), now))
        return np.arange(obs.shape[0], 0, -1, dtype=np.int64)


def collect_base(
    runner: EpisodeRunner,
    windows: Sequence[Window],
    *,
    max_queue: int = 256,
    teacher: str | None = None,
) -> list[Demonstration]:
    """Observations of every decision (>= 2 queued jobs) the teacher makes in ``windows``.

    ``teacher`` names a policy (``shared.policies``); ``None`` is the run's base policy.
    """
    demos: list[Demonstration] = []
    settings = runner.settings
    for window in windows:
        recorder = _Recorder()
        policy = LearnedPolicy(
            None,
            make_policy(teacher or settings.base_policy),
            mode="greedy",
            warm_until=float(runner.workload.jobs.submit[window.start]),
            sampler=FeatureSampler(settings.sampling),
            controller=recorder,
            max_queue=max_queue,
            record=False,
        )
        runner.simulate(policy, window)
        demos.extend(Demonstration(o, c, window, t) for o, c, t in recorder.seen)
    return demos


def collect_on_policy(
    runner: EpisodeRunner, model: ActorCritic, windows: Sequence[Window], *, seed: int = 0
) -> list[Demonstration]:
    """Observations a model meets when it schedules ``windows`` itself (sampled, seeded)."""
    demos: list[Demonstration] = []
    for k, window in enumerate(windows):
        result = runner.run(model, window, "sample", episode_seed(seed, 2_000_000, k))
        demos.extend(Demonstration(d.obs, d.critic, window, d.time) for d in result.decisions)
    return demos
