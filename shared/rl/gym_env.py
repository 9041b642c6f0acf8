"""A Gymnasium environment over the simulator, for Stable-Baselines3 / CleanRL agents.

- **Episode**: one window of jobs (drawn from ``windows`` with the env's seeded RNG, or passed as
  ``reset(options={"window": Window(...)})``), simulated warm exactly like ``hylo train``'s
  episodes (``EpisodeRunner``): the base policy before the window, the agent from its first submit.
- **Step**: one scheduling decision with at least two queued jobs. The observation is the queue's
  first ``max_queue`` jobs in base-policy order: ``obs`` ``[max_queue, F_obs]`` per-job features
  (the decision's feature selection, zero padding), ``mask`` (1 = real job) and ``critic``
  ``[F_crit]`` cluster features; every value in [0, 1].
- **Action**: a score per slot (``Box(-1, 1, [max_queue])``); the real jobs are ordered by score,
  descending, ties by slot (base order), and the jobs past ``max_queue`` follow in base order.
- **Reward**: 0 until the last step, then the normalized gap against the base policy's run of the
  same window (``shared.rl.reward``); the episode terminates when the window's jobs have all run.

The simulator runs its whole event loop in one call (``Simulator.run``), so the env runs it in a
worker thread and hands each decision over through two queues: the policy's ``keys`` blocks until
``step`` supplies an action. Only one of the two threads runs at any time, so the simulation is
as deterministic as a direct call. ``reset`` or ``close`` during an episode aborts the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from shared.features import FeatureSampler
from shared.metrics import Window
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner
from shared.rl.policy import LearnedPolicy

Obs = dict[str, np.ndarray]


class _Abort(Exception):
    """Raised inside the simulation thread to end an episode early."""


_ABORT = object()


class SchedulingEnv(gym.Env[Obs, np.ndarray]):
    """One window per episode, one queue ordering per step; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self, runner: EpisodeRunner, windows: Sequence[Window], max_queue: int = 256) -> None:
        if not windows:
            raise ValueError("the env needs at least one window")
        self.runner = runner
        self.windows = list(windows)
        self.max_queue = max_queue
        sampling = runner.settings.sampling
        self.n_obs, self.n_critic = sampling.n_observation, sampling.n_critic
        self.observation_space = spaces.Dict(  # type: ignore[assignment]
            {
                "obs": spaces.Box(0.0, 1.0, (max_queue, self.n_obs), np.float32),
                "mask": spaces.MultiBinary(max_queue),
                "critic": spaces.Box(0.0, 1.0, (self.n_critic,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (max_queue,), np.float32)
        self._thread: threading.Thread | None = None
        self._to_sim: queue.Queue[object] = queue.Queue()
        self._from_sim: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.window: Window | None = None

    # -- the simulation thread ----------------------------------------------------------------

    def _controller(self, obs: np.ndarray, critic: np.ndarray, now: float) -> np.ndarray:
        self._from_sim.put(("decision", (obs, critic, now)))
        action = self._to_sim.get()
        if action is _ABORT:
            raise _Abort
        scores = np.asarray(action, dtype=np.float64)[: len(obs)]
        order = np.argsort(-scores, kind="stable")
        priorities = np.empty(len(obs), dtype=np.int64)
        priorities[order] = np.arange(len(obs), 0, -1)
        return priorities

    def _simulate(self, window: Window) -> None:
        runner = self.runner
        policy = LearnedPolicy(
            None,
            make_policy(runner.settings.base_policy),
            warm_until=float(runner.workload.jobs.submit[window.start]),
            sampler=FeatureSampler(runner.settings.sampling),
            controller=self._controller,
            max_queue=self.max_queue,
            record=False,
        )
        try:
            agent = runner.simulate(policy, window)
        except _Abort:
            return
        except Exception as err:  # hand any simulator error to the caller of step()
            self._from_sim.put(("error", err))
            return
        spec = runner.settings.reward
        base_scores = spec.scores(runner.base_metrics(window))
        agent_scores = spec.scores(agent)
        info = {"base_scores": base_scores, "agent_scores": agent_scores, "window": window.label}
        self._from_sim.put(("done", (spec.reward(base_scores, agent_scores), info)))

    def _stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._to_sim.put(_ABORT)
            self._thread.join()
        self._thread = None
        self._to_sim = queue.Queue()
        self._from_sim = queue.Queue()

    # -- observations -----------------------------------------------------------------------------

    def _observation(self, obs: np.ndarray | None = None, critic: np.ndarray | None = None) -> Obs:
        out_obs = np.zeros((self.max_queue, self.n_obs), dtype=np.float32)
        mask = np.zeros(self.max_queue, dtype=np.int8)
        out_critic = np.zeros(self.n_critic, dtype=np.float32)
        if obs is not None and critic is not None:
            n = min(len(obs), self.max_queue)
            out_obs[:n] = np.clip(obs[:n], 0.0, 1.0)
            mask[:n] = 1
            out_critic[:] = np.clip(critic, 0.0, 1.0)
        return {"obs": out_obs, "mask": mask, "critic": out_critic}

    def _receive(self) -> tuple[str, Any]:
        kind, payload = self._from_sim.get()
        if kind == "error":
            raise payload
        return kind, payload

    # -- the Gymnasium API ----------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        fixed = options.get("window") if options else None
        for _attempt in range(100):
            self._stop()
            if isinstance(fixed, Window):
                window = fixed
            else:
                window = self.windows[int(self.np_random.integers(len(self.windows)))]
            self.window = window
            self._thread = threading.Thread(target=self._simulate, args=(window,), daemon=True)
            self._thread.start()
            kind, payload = self._receive()
            if kind == "decision":
                obs, critic, now = payload
                return self._observation(obs, critic), {"window": window.label, "time": now}
            if isinstance(fixed, Window):
                break
        raise RuntimeError("no window with a decision to make (every queue held at most one job)")

    def step(self, action: np.ndarray) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        if self._thread is None:
            raise RuntimeError("call reset() before step()")
        self._to_sim.put(np.asarray(action))
        kind, payload = self._receive()
        if kind == "decision":
            obs, critic, now = payload
            return self._observation(obs, critic), 0.0, False, False, {"time": now}
        reward, info = payload
        self._thread.join()
        self._thread = None
        return self._observation(), float(reward), True, False, info

    def close(self) -> None:
        self._stop()
