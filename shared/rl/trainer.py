"""The training loop: sample windows, simulate episodes (in parallel), update with PPO, log, save.

One epoch: ``windows_per_epoch`` windows are drawn (seeded) from the training part of a
chronological split, each is simulated once with sampled orderings, the episodes' decisions are
stacked with their advantages (``shared.rl.ppo``), and one PPO update runs. Every ``eval_every``
epochs the greedy policy is scored on a fixed set of validation windows (the end of the training
part, never the held-out test part) and the best model so far is kept.

Parallelism: episodes are independent given the model's weights, so ``workers > 1`` hands them to a
process pool (each worker holds the workload and receives the current state dict). Each episode's
randomness comes from a seed derived from (seed, epoch, episode index), never from which worker
ran it, so the losses of a run depend on the seed only, not on ``workers``.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from shared.domain.exclusions import Exclusion
from shared.metrics import Window, chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.rl.episodes import EpisodeResult, EpisodeRunner, EpisodeSettings, episode_seed
from shared.rl.policy import Mode
from shared.rl.ppo import PPOConfig, RolloutBatch, ppo_update
from shared.scheduling.binding import BoundWorkload


@dataclass
class TrainConfig:
    """What a training run does (the model's shape and PPO's hyperparameters included)."""

    epochs: int = 20
    windows_per_epoch: int = 16
    window_size: int = 256
    seed: int = 0
    workers: int = 1
    train_fraction: float = 0.9
    validation_fraction: float = 0.1  # of the training part, at its end
    validation_windows: int = 16
    eval_every: int = 1
    max_minutes: float | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)


@dataclass
class TrainResult:
    model: ActorCritic
    best_model: ActorCritic
    best_epoch: int
    history: list[dict[str, float]]
    train_range: range
    validation: list[Window]
    wall_seconds: float


ProgressHook = Callable[[dict[str, float]], None]

# -- worker processes ---------------------------------------------------------------------------

_RUNNER: EpisodeRunner | None = None
_MODEL: ActorCritic | None = None


def _init_worker(
    workload: BoundWorkload, settings: EpisodeSettings, exclusions: tuple[Exclusion, ...], cfg: ModelConfig
) -> None:
    global _RUNNER, _MODEL
    torch.set_num_threads(1)
    _RUNNER = EpisodeRunner(workload, settings, exclusions)
    _MODEL = ActorCritic(cfg).eval()


def _worker_episode(args: tuple[dict[str, torch.Tensor], Window, Mode, int]) -> EpisodeResult:
    state, window, mode, seed = args
    assert _RUNNER is not None and _MODEL is not None
    _MODEL.load_state_dict(state)
    return _RUNNER.run(_MODEL, window, mode, seed)


class EpisodePool:
    """Runs episodes in this process (``workers=1``) or in a pool of spawned worker processes."""

    def __init__(self, runner: EpisodeRunner, cfg: ModelConfig, workers: int) -> None:
        self.runner = runner
        self.workers = workers
        self._pool: Any = None
        if workers > 1:
            ctx = mp.get_context("spawn")
            self._pool = ctx.Pool(
                workers,
                initializer=_init_worker,
                initargs=(runner.workload, runner.settings, runner.exclusions, cfg),
            )

    def run(
        self, model: ActorCritic, windows: Sequence[Window], mode: Mode, seeds: Sequence[int]
    ) -> list[EpisodeResult]:
        if self._pool is None:
            return [self.runner.run(model, w, mode, s) for w, s in zip(windows, seeds, strict=True)]
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        tasks = [(state, w, mode, s) for w, s in zip(windows, seeds, strict=True)]
        out: list[EpisodeResult] = self._pool.map(_worker_episode, tasks, chunksize=1)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()


@contextmanager
def episode_pool(runner: EpisodeRunner, cfg: ModelConfig, workers: int) -> Iterator[EpisodePool]:
    pool = EpisodePool(runner, cfg, workers)
    try:
        yield pool
    finally:
        pool.close()


# -- the loop -----------------------------------------------------------------------------------


def split_windows(n_jobs: int, cfg: TrainConfig) -> tuple[range, list[Window]]:
    """The range training windows are drawn from, and the fixed validation windows after it.

    Both lie in the training part of the chronological split; the test part stays unseen.
    """
    train, _ = chronological_split(n_jobs, cfg.train_fraction)
    n_val = int(len(train) * cfg.validation_fraction)
    if n_val < cfg.window_size or cfg.validation_windows == 0:
        return train, []
    fit = range(train.start, train.stop - n_val)
    val = make_windows(range(fit.stop, train.stop), cfg.window_size, cfg.validation_windows, seed=cfg.seed)
    return fit, val


def mean_score(results: Sequence[EpisodeResult], metric: str, agent: bool) -> float:
    vals = [r.agent_scores[metric] if agent else r.base_scores[metric] for r in results]
    return float(np.nanmean(vals)) if vals else float("nan")


def train(
    runner: EpisodeRunner,
    cfg: TrainConfig,
    progress: ProgressHook | None = None,
    initial_state: dict[str, torch.Tensor] | None = None,
) -> TrainResult:
    """Train an actor-critic on ``runner``'s workload; see the module docstring.

    ``initial_state`` (a state dict of the same ``cfg.model`` shape) starts PPO from given weights
    instead of a random initialization: a warm start by imitation or the fine-tuning of a deployed
    model.
    """
    t_start = time.perf_counter()
    torch.manual_seed(cfg.seed)
    np_rng = np.random.default_rng(cfg.seed)
    model = ActorCritic(cfg.model).eval()
    if initial_state is not None:
        model.load_state_dict(initial_state)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.ppo.learning_rate, eps=1e-5)
    fit, validation = split_windows(len(runner.workload.jobs), cfg)
    metric = runner.settings.reward.metrics[0]
    history: list[dict[str, float]] = []
    best_model = ActorCritic(cfg.model).eval()
    best_model.load_state_dict(model.state_dict())
    best_reward, best_epoch = -np.inf, 0

    with episode_pool(runner, cfg.model, cfg.workers) as pool:

        def validate(epoch: int) -> dict[str, float]:
            if not validation:
                return {}
            res = pool.run(model, validation, "greedy", [0] * len(validation))
            return {
                "val_reward": float(np.mean([r.reward for r in res])),
                "val_agent": mean_score(res, metric, agent=True),
                "val_base": mean_score(res, metric, agent=False),
            }

        row0 = {"epoch": 0.0, "wall_s": time.perf_counter() - t_start, **validate(0)}
        if "val_reward" in row0:
            best_reward = row0["val_reward"]
        history.append(row0)
        if progress:
            progress(row0)
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.perf_counter()
            windows = make_windows(
                fit, cfg.window_size, cfg.windows_per_epoch, seed=cfg.seed * 100_003 + epoch, overlap=True
            )
            seeds = [episode_seed(cfg.seed, epoch, k) for k in range(len(windows))]
            results = pool.run(model, windows, "sample", seeds)
            t_roll = time.perf_counter() - t0
            batch = RolloutBatch.build(
                model, [(r.decisions, r.reward) for r in results], cfg.ppo.gamma, cfg.ppo.gae_lambda
            )
            stats = ppo_update(model, optimizer, batch, cfg.ppo, np_rng)
            row: dict[str, float] = {
                "epoch": float(epoch),
                "reward": float(np.mean([r.reward for r in results])),
                "agent": mean_score(results, metric, agent=True),
                "base": mean_score(results, metric, agent=False),
                "decisions": float(len(batch)),
                "rollout_s": t_roll,
                "decisions_per_s": len(batch) / t_roll if t_roll > 0 else 0.0,
                "update_s": time.perf_counter() - t0 - t_roll,
                **stats,
            }
            if cfg.eval_every and epoch % cfg.eval_every == 0:
                row.update(validate(epoch))
                if row.get("val_reward", -np.inf) > best_reward:
                    best_reward, best_epoch = row["val_reward"], epoch
                    best_model.load_state_dict(model.state_dict())
            row["wall_s"] = time.perf_counter() - t_start
            history.append(row)
            if progress:
                progress(row)
            if cfg.max_minutes is not None and row["wall_s"] > 60 * cfg.max_minutes:
                break
    if not validation:
        best_model.load_state_dict(model.state_dict())
        best_epoch = int(history[-1]["epoch"])
    return TrainResult(
        model=model,
        best_model=best_model,
        best_epoch=best_epoch,
        history=history,
        train_range=fit,
        validation=validation,
        wall_seconds=time.perf_counter() - t_start,
    )
