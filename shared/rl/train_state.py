"""A training run's state at an epoch boundary: what ``--resume`` needs to continue it exactly.

Why a snapshot per epoch, kept in memory: Ctrl-C lands anywhere, often in the middle of a PPO
update, when the weights and Adam's moments are half-way between two epochs. Saving those would
resume a run no uninterrupted run ever passes through. The trainer therefore copies its state
after each epoch (``TrainState``: weights, optimizer, RNGs, best-validation bookkeeping, history;
a few hundred kB for the shipped model sizes, well under a millisecond), and an interrupt saves the
last copy: the epoch in flight is lost and is run again, identically, on resume.

Why files are replaced, never rewritten in place: an interrupt or a crash while writing must leave
the previous state and checkpoint readable. ``save_state`` writes a temporary file and renames it;
``write_checkpoint_dir`` builds the new checkpoint folder beside the old one and swaps the two by
renames (between the two renames, for a moment, only ``.checkpoint.old`` exists).
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from shared.model import ActorCritic, ModelCard, save_checkpoint

#: the state file in a run folder (beside ``checkpoint/``)
STATE_FILE = "training_state.pt"
#: bump when the saved fields change meaning; an unknown format is refused, not guessed
STATE_FORMAT = 1


@dataclass
class TrainState:
    """Everything ``train`` holds between epochs, after epoch ``epoch`` (0: the validation before
    the first update). ``meta`` is the caller's (``hylo train`` keeps the warm start's record)."""

    epoch: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    best_model: dict[str, torch.Tensor]
    best_reward: float
    best_epoch: int
    history: list[dict[str, float]]
    np_rng: dict[str, Any]
    torch_rng: torch.Tensor
    wall_seconds: float
    finished: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> TrainState:
        """A deep copy: the trainer keeps mutating the tensors and dicts it was taken from."""
        return copy.deepcopy(self)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``train``, carrying the last epoch boundary's state (``None`` when the
    interrupt came before the first one). A ``KeyboardInterrupt``, so callers that do not know it
    stop as before."""

    def __init__(self, state: TrainState | None) -> None:
        super().__init__()
        self.state = state


def is_interrupt(err: BaseException) -> bool:
    """Whether ``err`` is Ctrl-C: a ``KeyboardInterrupt``, or the ``SystemError`` CPython raises
    when the interrupt arrives while a C function runs ("<class 'int'> returned a result with an
    exception set", caused by the ``KeyboardInterrupt``). Without the second form an unlucky
    Ctrl-C ended a run with an "unexpected" error instead of saving it."""
    if isinstance(err, KeyboardInterrupt):
        return True
    return isinstance(err, SystemError) and isinstance(err.__cause__ or err.__context__, KeyboardInterrupt)


class StateFileError(ValueError):
    """A state file that cannot be resumed from (unreadable, or another format)."""


def save_state(path: Path, state: TrainState) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, then rename)."""
    payload = {"format": STATE_FORMAT, **state.__dict__}
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_state(path: Path) -> TrainState:
    """The state saved at ``path``; ``StateFileError`` names what is wrong with it.

    Read with ``weights_only=True``: a run folder may come from elsewhere, and the state holds
    only tensors and plain Python values."""
    try:
        payload = torch.load(path, weights_only=True)
    except Exception as err:  # torch's zip reader and unpickler raise many kinds
        raise StateFileError(
            f"{path}: cannot read the training state ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise StateFileError(f"{path}: training state format {found!r}, expected {STATE_FORMAT}")
    del payload["format"]
    try:
        return TrainState(**payload)
    except TypeError as err:
        raise StateFileError(f"{path}: training state fields do not match: {err}") from None


def write_checkpoint_dir(folder: Path, model: ActorCritic, card: ModelCard) -> None:
    """``save_checkpoint`` into ``folder`` without ever leaving a half-written one there.

    The new checkpoint is written to ``.NAME.new`` beside it; the old one is renamed away to
    ``.NAME.old``, the new one renamed into place, the old one removed. A reader sees either the
    old checkpoint or the new one (or, for the instant between the renames, none)."""
    new = folder.with_name(f".{folder.name}.new")
    old = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(new, ignore_errors=True)
    save_checkpoint(new, model, card)
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        os.replace(folder, old)
    os.replace(new, folder)
    shutil.rmtree(old, ignore_errors=True)
