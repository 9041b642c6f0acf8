"""What ``hylo train`` keeps in its run folder while it trains: the checkpoint with its card, the
training state ``--resume`` continues from, the per-epoch scalars; and what Ctrl-C does.

Why the same checkpoint at every point: a folder is useful the moment it holds a checkpoint, so
the one written every ``--checkpoint-every`` epochs and on Ctrl-C is the one the run writes at the
end (``checkpoint/``: ``weights.pt`` and ``card.json``, the best model by validation so far),
only without the held-out score, which the end adds; ``hylo evaluate --checkpoint`` and
``hylo models register`` take any of them. The card's ``extra.checkpoint`` says which it is
(``periodic``, ``interrupted``, ``final``) and after which epoch.

Why saving defers Ctrl-C: a second Ctrl-C while the state and checkpoint are written would leave
the pair from two different epochs; each file is replaced atomically anyway, and the interrupt
is acted on once the pair is complete.
"""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import typer
from pydantic import JsonValue

from shared.cli.common import console
from shared.rl.episodes import EpisodeRunner
from shared.rl.reward import RewardSpec
from shared.rl.run_log import ScalarLog
from shared.rl.setup import RunSetup, make_card
from shared.rl.train_state import STATE_FILE, TrainState, save_state, write_checkpoint_dir
from shared.rl.trainer import TrainConfig, TrainResult, result_from_state
from shared.sim.evaluate import PreparedWorkload

#: the exit code of a run stopped by Ctrl-C (128 + SIGINT, what shells report)
INTERRUPTED_EXIT = 130

CheckpointKind = Literal["periodic", "interrupted", "final"]


@dataclass(frozen=True)
class TrainRun:
    """One training run as asked and set up: what the checkpoint card and the log record."""

    trace: str | None  # --trace as given (None: the embedded workload)
    cluster: str | None  # --cluster as given (the cluster used is work.spec.name)
    setup: RunSetup
    spec: RewardSpec
    cfg: TrainConfig
    work: PreparedWorkload
    runner: EpisodeRunner
    imitation_epochs: int


def write_checkpoint(
    run: TrainRun,
    result: TrainResult,
    held_out: dict[str, Any],
    imitation_info: dict[str, Any] | None,
    out: Path,
    kind: CheckpointKind,
) -> None:
    """The best model with its card, under ``out/checkpoint`` (replaced atomically)."""
    cfg = run.cfg
    epoch = int(result.history[-1]["epoch"])
    extra: dict[str, JsonValue] = {
        "best_epoch": result.best_epoch,
        "train_range": [result.train_range.start, result.train_range.stop],
        "window_size": cfg.window_size,
        "train_fraction": cfg.train_fraction,
        "jobs": run.setup.n_jobs,
        "load": run.setup.target_load,
        "load_definition": run.setup.load_definition,  # what "load" means (shared.domain.load)
        "estimates": run.setup.estimates,  # what hylo evaluate uses unless told otherwise
        "placement": run.runner.settings.config.placement,
        "cluster_arg": run.cluster,
        "ppo": cfg.ppo.model_dump(mode="json"),
        "wall_seconds": result.wall_seconds,
        "imitation_epochs": run.imitation_epochs,
        "imitation": imitation_info,
        "checkpoint": {"kind": kind, "epoch": epoch, "epochs": cfg.epochs},
    }
    card = make_card(
        result.best_model,
        run.runner,
        trace=run.trace or "embedded",
        cluster=run.work.spec.name,
        seed=cfg.seed,
        epochs=epoch,
        held_out=held_out,
        extra=extra,
    )
    write_checkpoint_dir(out / "checkpoint", result.best_model, card)


@contextmanager
def sigint_deferred(reraise: bool = True) -> Iterator[None]:
    """Hold Ctrl-C off the block; afterwards raise it (``reraise``) or drop it (the interrupt
    being handled already). Outside the main thread, where signals cannot be handled, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def remember(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, remember)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and reraise:
        raise KeyboardInterrupt


class EpochSaver:
    """``train``'s ``on_epoch`` hook for a run folder: logs each epoch's scalars, saves the state
    and a checkpoint every ``every`` epochs, and remembers the last state for Ctrl-C."""

    def __init__(self, run: TrainRun, out: Path, every: int, log: ScalarLog, meta: dict[str, Any]) -> None:
        self.run, self.out, self.every, self.log = run, out, every, log
        #: kept in every saved state: the warm start's record, the epochs the run resumed at
        self.meta = meta
        self.latest: TrainState | None = None

    @property
    def imitation_info(self) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self.meta.get("imitation")
        return info

    def __call__(self, state: TrainState) -> None:
        self.latest = state
        self.log.write(state.history[-1])
        due = self.every > 0 and 0 < state.epoch < self.run.cfg.epochs and state.epoch % self.every == 0
        if due:
            self.save(state, "periodic")

    def save_state(self, state: TrainState, finished: bool = False) -> None:
        save_state(self.out / STATE_FILE, replace(state, finished=finished, meta=dict(self.meta)))

    def save(self, state: TrainState, kind: CheckpointKind, reraise: bool = True) -> TrainResult:
        """The state, then the checkpoint of the best model so far (no held-out score)."""
        with sigint_deferred(reraise):
            self.save_state(state)
            result = result_from_state(state, self.run.cfg, len(self.run.work.bound.jobs))
            write_checkpoint(self.run, result, {}, self.imitation_info, self.out, kind)
        return result


def stop_interrupted(saver: EpochSaver, state: TrainState | None, out: Path) -> typer.Exit:
    """Ctrl-C: save the last finished epoch's state and checkpoint, say in one line where they are
    and how to continue; the exit to raise (code 130)."""
    again = f"hylo train --resume {shlex.quote(str(out))}"
    if state is None:
        console.print(
            f"interrupted before the first epoch ended: nothing saved but the settings in "
            f"{out / 'run.json'}; start it again with: {again}",
            soft_wrap=True,
            highlight=False,
        )
        return typer.Exit(code=INTERRUPTED_EXIT)
    result = saver.save(state, "interrupted", reraise=False)
    console.print(
        f"interrupted after epoch {state.epoch} of {saver.run.cfg.epochs}: checkpoint in "
        f"{out / 'checkpoint'} (best epoch {result.best_epoch}), training state in "
        f"{out / STATE_FILE}; continue with: {again}",
        soft_wrap=True,
        highlight=False,
    )
    return typer.Exit(code=INTERRUPTED_EXIT)
