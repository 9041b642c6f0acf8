"""The Gymnasium env: passes check_env, base-order actions reproduce the base policy, episodes end."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from shared.metrics import make_windows
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.rl.gym_env import SchedulingEnv
from shared.rl.reward import RewardSpec
from shared.scheduling.binding import BoundWorkload
from shared.sim.config import SimConfig


@pytest.fixture
def env(toy: BoundWorkload) -> SchedulingEnv:
    settings = EpisodeSettings(
        base_policy="fcfs", reward=RewardSpec.parse("wait"), config=SimConfig(), warmup=8
    )
    runner = EpisodeRunner(toy, settings)
    return SchedulingEnv(runner, make_windows(range(0, 160), 24, 4, seed=0), max_queue=16)


def test_check_env_passes(env: SchedulingEnv) -> None:
    check_env(env, skip_render_check=True)
    env.close()


def run_episode(env: SchedulingEnv, policy: str, seed: int) -> tuple[float, int, dict[str, object]]:
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    steps = 0
    while True:
        n = int(obs["mask"].sum())
        assert n >= 2 and obs["mask"][:n].all() and not obs["mask"][n:].any()
        assert env.observation_space.contains(obs)
        if policy == "base":  # decreasing scores by slot: the base order
            action = np.linspace(1, -1, env.max_queue, dtype=np.float32)
        else:
            action = rng.uniform(-1, 1, env.max_queue).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        steps += 1
        if terminated:
            assert not truncated and not obs["mask"].any()
            return reward, steps, info
        assert reward == 0.0


def test_base_order_actions_reproduce_the_base_policy(env: SchedulingEnv) -> None:
    reward, steps, info = run_episode(env, "base", seed=0)
    assert steps > 0
    assert reward == 0.0
    assert info["agent_scores"] == info["base_scores"]


def test_random_actions_end_with_a_bounded_reward_and_reset_mid_episode_works(env: SchedulingEnv) -> None:
    rewards = [run_episode(env, "random", seed=s)[0] for s in range(3)]
    assert all(-1.0 <= r <= 1.0 for r in rewards)
    assert any(r != 0.0 for r in rewards)  # reordering a loaded single node changes waits
    env.reset(seed=5)
    env.step(env.action_space.sample())
    env.reset(seed=6)  # aborts the running episode's thread
    env.close()
