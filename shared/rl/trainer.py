"""The training loop: sample windows, simulate episodes (in parallel), update with PPO, log, save.

One epoch: ``windows_per_epoch`` windows are drawn (seeded) from the training part of a
chronological split, each is simulated once with sampled orderings, the episodes' decisions are
stacked with their advantages (``shared.rl.ppo``), and one PPO update runs. Every ``eval_every``
epochs the greedy policy is scored on a fixed set of validation windows (the end of the training
part, never the held-out test part) and the best model so far is kept.

Parallelism: episodes are independent given the model's weights, so ``workers > 1`` hands them to
worker processes, and ``ray`` to Ray actors (``shared.rl.parallel.runner_pool`` decides; each
worker holds the workload and receives the current weights). Each episode's randomness comes from
a seed derived from (seed, epoch, episode index), never from which worker ran it, so the losses of
a run depend on the seed only, not on ``workers`` or ``ray``.

Interrupting and resuming (``shared.rl.train_state``): after every epoch the loop copies its state
(``TrainState``) and hands it to ``on_epoch`` (``hylo train`` saves it every N epochs); Ctrl-C
raises ``TrainingInterrupted`` with the last copy, and ``train(resume=state)`` continues from one.
Everything an epoch's outcome depends on is in the copy (weights, Adam's moments and step counts,
the update's numpy generator, torch's generator, the best-validation bookkeeping, the history),
and windows and episode seeds are functions of (seed, epoch), so a resumed run computes the same
epochs as an uninterrupted one: the same losses, rewards and weights, bit for bit on one CPU
thread. What differs: the timing columns (``wall_s``, ``rollout_s``, ``update_s``,
``decisions_per_s``) and therefore where ``max_minutes`` stops, which is wall-clock by nature
(``wall_s`` counts only time spent training, summed over the sessions).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from shared.metrics import Window, chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.rl.episodes import EpisodeResult, EpisodeRunner, episode_seed
from shared.rl.parallel import Parallelism, RunnerPool, pool_for
from shared.rl.policy import Mode
from shared.rl.ppo import PPOConfig, RolloutBatch, ppo_update
from shared.rl.train_state import TrainingInterrupted, TrainState, is_interrupt


@dataclass
class TrainConfig:
    """What a training run does (the model's shape and PPO's hyperparameters included)."""

    epochs: int = 20
    windows_per_epoch: int = 16
    window_size: int = 256
    seed: int = 0
    workers: int = 1
    #: None: ``workers`` local processes; else the Ray to run ``workers`` actors on
    #: (``shared.rl.parallel.LOCAL_RAY`` for one started here, or a cluster's ``HOST:PORT``)
    ray: str | None = None
    train_fraction: float = 0.9
    validation_fraction: float = 0.1  # of the training part, at its end
    validation_windows: int = 16
    eval_every: int = 1
    max_minutes: float | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    #: given windows instead of a chronological split (``split_windows``): training episodes are
    #: drawn from ``train_windows`` and the best model is chosen on ``validation_list``. Why: a
    #: workload made of separate bursts (arrival draws of one job sample, each draining an empty
    #: cluster, ``bench/testbed_policy.py``) has one meaningful window per burst, which windows at
    #: any offset would cut in two
    train_windows: tuple[Window, ...] = ()
    validation_list: tuple[Window, ...] = ()


@dataclass
class TrainResult:
    model: ActorCritic
    best_model: ActorCritic
    best_epoch: int
    history: list[dict[str, float]]
    train_range: range
    validation: list[Window]
    wall_seconds: float
    #: the state after the last epoch (``train(resume=...)`` continues from it; None: not kept)
    state: TrainState | None = None


ProgressHook = Callable[[dict[str, float]], None]
#: called with a copy of the state after every epoch (epoch 0, the first validation, included)
EpochHook = Callable[[TrainState], None]

# -- episodes as pool tasks ----------------------------------------------------------------------


@dataclass(frozen=True)
class EpisodeTask:
    """One episode for a ``RunnerPool``: everything its outcome depends on but the weights."""

    window: Window
    mode: Mode
    seed: int

    def __call__(self, runner: EpisodeRunner, model: ActorCritic) -> EpisodeResult:
        return runner.run(model, self.window, self.mode, self.seed)


def run_episodes(
    pool: RunnerPool, model: ActorCritic, windows: Sequence[Window], mode: Mode, seeds: Sequence[int]
) -> list[EpisodeResult]:
    """One episode per (window, seed), in that order, wherever ``pool`` runs them."""
    return pool.map(model, [EpisodeTask(w, mode, s) for w, s in zip(windows, seeds, strict=True)])


# -- the loop -----------------------------------------------------------------------------------


def split_windows(n_jobs: int, cfg: TrainConfig) -> tuple[range, list[Window]]:
    """The range training windows are drawn from, and the fixed validation windows after it.

    Both lie in the training part of the chronological split; the test part stays unseen. With
    ``cfg.train_windows`` the range spans them and the validation windows are ``validation_list``.
    """
    if cfg.train_windows:
        starts = [w.start for w in cfg.train_windows]
        stops = [w.stop for w in cfg.train_windows]
        return range(min(starts), max(stops)), list(cfg.validation_list)
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


def _over_time(row: dict[str, float], cfg: TrainConfig) -> bool:
    """Whether the run stops after ``row``'s epoch on ``max_minutes`` (never after epoch 0)."""
    return row["epoch"] >= 1 and cfg.max_minutes is not None and row["wall_s"] > 60 * cfg.max_minutes


def continues(state: TrainState, cfg: TrainConfig) -> bool:
    """Whether ``train(resume=state)`` would run another epoch under ``cfg`` (the same rule the
    loop applies: epochs left, and ``max_minutes`` not spent)."""
    return state.epoch < cfg.epochs and not _over_time(state.history[-1], cfg)


class _Loop:
    """One run between epochs: the model, its optimizer and generators, the best model so far and
    the history. ``snapshot`` and ``restore`` move all of it to and from a ``TrainState``, which
    is what makes an interrupted run resumable."""

    def __init__(
        self, runner: EpisodeRunner, cfg: TrainConfig, initial_state: dict[str, torch.Tensor] | None
    ) -> None:
        self.runner, self.cfg = runner, cfg
        self.t_start = time.perf_counter()
        torch.manual_seed(cfg.seed)
        self.np_rng = np.random.default_rng(cfg.seed)
        self.model = ActorCritic(cfg.model).eval()
        if initial_state is not None:
            self.model.load_state_dict(initial_state)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.ppo.learning_rate, eps=1e-5)
        self.fit, self.validation = split_windows(len(runner.workload.jobs), cfg)
        self.metric = runner.settings.reward.metrics[0]
        self.history: list[dict[str, float]] = []
        self.best_model = ActorCritic(cfg.model).eval()
        self.best_model.load_state_dict(self.model.state_dict())
        self.best_reward, self.best_epoch = -np.inf, 0
        #: the state after the last finished epoch (what an interrupt saves)
        self.saved: TrainState | None = None

    def restore(self, state: TrainState) -> None:
        """Continue from ``state``: every field the next epoch reads is set from it (the timing
        continues from its ``wall_seconds``)."""
        self.model.load_state_dict(state.model)
        self.optimizer.load_state_dict(copy.deepcopy(state.optimizer))
        self.best_model.load_state_dict(state.best_model)
        self.best_reward, self.best_epoch = state.best_reward, state.best_epoch
        self.history = [dict(row) for row in state.history]
        self.np_rng.bit_generator.state = copy.deepcopy(state.np_rng)
        torch.set_rng_state(state.torch_rng.clone())
        self.t_start = time.perf_counter() - state.wall_seconds
        self.saved = state.copy()

    def snapshot(self) -> TrainState:
        """A copy of the state now (rows of the history are never changed once appended)."""
        last = self.history[-1]
        return TrainState(
            epoch=int(last["epoch"]),
            model=_cloned(self.model.state_dict()),
            optimizer=copy.deepcopy(self.optimizer.state_dict()),
            best_model=_cloned(self.best_model.state_dict()),
            best_reward=float(self.best_reward),
            best_epoch=self.best_epoch,
            history=list(self.history),
            np_rng=copy.deepcopy(dict(self.np_rng.bit_generator.state)),
            torch_rng=torch.get_rng_state(),
            wall_seconds=last["wall_s"],
        )

    def validate(self, pool: RunnerPool) -> dict[str, float]:
        """The greedy policy's mean reward and scores on the fixed validation windows."""
        if not self.validation:
            return {}
        res = run_episodes(pool, self.model, self.validation, "greedy", [0] * len(self.validation))
        return {
            "val_reward": float(np.mean([r.reward for r in res])),
            "val_agent": mean_score(res, self.metric, agent=True),
            "val_base": mean_score(res, self.metric, agent=False),
        }

    def first_row(self, pool: RunnerPool) -> dict[str, float]:
        """Epoch 0: the starting weights validated, the bar the first best model must clear."""
        row0 = {"epoch": 0.0, "wall_s": time.perf_counter() - self.t_start, **self.validate(pool)}
        if "val_reward" in row0:
            self.best_reward = row0["val_reward"]
        return row0

    def epoch_row(self, pool: RunnerPool, epoch: int) -> dict[str, float]:
        """One epoch: episodes on seeded windows, one PPO update, validation when due."""
        cfg, t0 = self.cfg, time.perf_counter()
        windows = self.epoch_windows(epoch)
        seeds = [episode_seed(cfg.seed, epoch, k) for k in range(len(windows))]
        results = run_episodes(pool, self.model, windows, "sample", seeds)
        t_roll = time.perf_counter() - t0
        batch = RolloutBatch.build(
            self.model, [(r.decisions, r.reward) for r in results], cfg.ppo.gamma, cfg.ppo.gae_lambda
        )
        stats = ppo_update(self.model, self.optimizer, batch, cfg.ppo, self.np_rng)
        row: dict[str, float] = {
            "epoch": float(epoch),
            "reward": float(np.mean([r.reward for r in results])),
            "agent": mean_score(results, self.metric, agent=True),
            "base": mean_score(results, self.metric, agent=False),
            "decisions": float(len(batch)),
            "rollout_s": t_roll,
            "decisions_per_s": len(batch) / t_roll if t_roll > 0 else 0.0,
            "update_s": time.perf_counter() - t0 - t_roll,
            **stats,
        }
        if cfg.eval_every and epoch % cfg.eval_every == 0:
            row.update(self.validate(pool))
            if row.get("val_reward", -np.inf) > self.best_reward:
                self.best_reward, self.best_epoch = row["val_reward"], epoch
                self.best_model.load_state_dict(self.model.state_dict())
        row["wall_s"] = time.perf_counter() - self.t_start
        return row

    def epoch_windows(self, epoch: int) -> list[Window]:
        """The epoch's training windows: seeded by (seed, epoch), from the given list (without
        replacement while it lasts) or at any offset in the training range."""
        cfg = self.cfg
        if cfg.train_windows:
            rng = np.random.default_rng([cfg.seed, epoch])
            n = len(cfg.train_windows)
            picks = rng.choice(n, size=cfg.windows_per_epoch, replace=cfg.windows_per_epoch > n)
            return [cfg.train_windows[int(k)] for k in picks]
        return make_windows(
            self.fit, cfg.window_size, cfg.windows_per_epoch, seed=cfg.seed * 100_003 + epoch, overlap=True
        )

    def run(self, pool: RunnerPool, progress: ProgressHook | None, on_epoch: EpochHook | None) -> None:
        """Epoch 0 (unless resumed past it), then the epochs left, each recorded and snapshotted."""
        if not self.history:
            self._record(self.first_row(pool), progress, on_epoch)
        for epoch in range(int(self.history[-1]["epoch"]) + 1, self.cfg.epochs + 1):
            if _over_time(self.history[-1], self.cfg):
                break
            self._record(self.epoch_row(pool, epoch), progress, on_epoch)

    def _record(
        self, row: dict[str, float], progress: ProgressHook | None, on_epoch: EpochHook | None
    ) -> None:
        self.history.append(row)
        if progress:
            progress(row)
        self.saved = self.snapshot()
        if on_epoch:
            on_epoch(self.saved)

    def result(self) -> TrainResult:
        """The run's result; without validation windows the last model is the "best" one."""
        if not self.validation:
            self.best_model.load_state_dict(self.model.state_dict())
            self.best_epoch = int(self.history[-1]["epoch"])
        return TrainResult(
            model=self.model,
            best_model=self.best_model,
            best_epoch=self.best_epoch,
            history=self.history,
            train_range=self.fit,
            validation=self.validation,
            wall_seconds=time.perf_counter() - self.t_start,
            state=self.saved,
        )


def _cloned(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.items()}


def train(
    runner: EpisodeRunner,
    cfg: TrainConfig,
    progress: ProgressHook | None = None,
    initial_state: dict[str, torch.Tensor] | None = None,
    *,
    resume: TrainState | None = None,
    on_epoch: EpochHook | None = None,
    pool: RunnerPool | None = None,
) -> TrainResult:
    """Train an actor-critic on ``runner``'s workload; see the module docstring.

    ``initial_state`` (a state dict of the same ``cfg.model`` shape) starts PPO from given weights
    instead of a random initialization: a warm start by imitation or the fine-tuning of a deployed
    model. ``resume`` continues a run from a saved ``TrainState`` (taken under the same ``cfg``;
    only ``epochs``, ``workers``, ``ray`` and ``max_minutes`` may differ), ``on_epoch`` receives the state
    after every epoch, and Ctrl-C raises ``TrainingInterrupted`` with the last one. ``pool`` runs
    the episodes on workers the caller keeps open (``hylo train`` scores its held-out windows on
    them afterwards: one start-up, not two); without it ``cfg.workers`` and ``cfg.ray`` decide.
    """
    loop = _Loop(runner, cfg, initial_state)
    if resume is not None:
        loop.restore(resume)
    with pool_for(runner, pool or Parallelism(cfg.workers, cfg.ray)) as episodes:
        try:
            loop.run(episodes, progress, on_epoch)
        except (KeyboardInterrupt, SystemError) as err:
            if not is_interrupt(err):
                raise
            raise TrainingInterrupted(loop.saved) from None
    return loop.result()


def result_from_state(state: TrainState, cfg: TrainConfig, n_jobs: int) -> TrainResult:
    """The ``TrainResult`` a run stopped at ``state`` would return (for a checkpoint written while
    training goes on, or after an interrupt). The models are built under a forked torch generator:
    writing a checkpoint must not change the run's random stream."""
    fit, validation = split_windows(n_jobs, cfg)
    with torch.random.fork_rng(devices=[]):
        model = ActorCritic(cfg.model).eval()
        best = ActorCritic(cfg.model).eval()
    model.load_state_dict(state.model)
    best.load_state_dict(state.best_model if validation else state.model)
    return TrainResult(
        model=model,
        best_model=best,
        best_epoch=state.best_epoch if validation else state.epoch,
        history=list(state.history),
        train_range=fit,
        validation=validation,
        wall_seconds=state.wall_seconds,
        state=state,
    )
