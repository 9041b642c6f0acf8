"""Per-epoch scalars of a training run, written as they happen: JSON lines, and TensorBoard when it
is installed.

Why both: ``train_log.csv``/``.json`` are written once, at the end, and a run stopped after 37 of
300 epochs had no record of its curve. ``scalars.jsonl`` gets one line per epoch the moment the
epoch ends (flushed), with nothing to install; TensorBoard users additionally get
``tensorboard/`` (``torch.utils.tensorboard.SummaryWriter``) when the optional ``tensorboard``
package imports (``pip install -e '.[tensorboard]'``). Without it the writer is skipped, and
nothing else changes.

On resume the JSON lines are rewritten from the saved history (epochs after the saved state were
lost with the interrupt and are run again), and the TensorBoard writer is opened with
``purge_step`` so that TensorBoard hides those lost epochs' events too.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

#: the JSON-lines log in a run folder
SCALARS_FILE = "scalars.jsonl"
#: TensorBoard's event files, in a run folder
TENSORBOARD_DIR = "tensorboard"

#: a history key -> its TensorBoard tag (keys not listed go under ``train/``; ``val_*`` under
#: ``validation/``)
_TAGS = {
    "pg_loss": "loss/policy",
    "v_loss": "loss/value",
    "entropy": "loss/entropy",
    "approx_kl": "ppo/approx_kl",
    "clipfrac": "ppo/clipfrac",
    "kl_stop": "ppo/kl_stop",
    "updates": "ppo/updates",
    "decisions": "speed/decisions",
    "decisions_per_s": "speed/decisions_per_s",
    "rollout_s": "speed/rollout_s",
    "update_s": "speed/update_s",
    "wall_s": "speed/wall_s",
}


class _Writer(Protocol):
    """What is used of ``SummaryWriter`` (typed here: torch's module is imported on demand)."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of a history key: ``val_reward`` -> ``validation/reward``."""
    if key.startswith("val_"):
        return "validation/" + key.removeprefix("val_")
    return _TAGS.get(key, "train/" + key)


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` imports (it needs the ``tensorboard`` package)."""
    try:
        importlib.import_module("torch.utils.tensorboard")
    except ImportError:
        return False
    return True


def _open_writer(folder: Path, purge_step: int | None) -> _Writer | None:
    try:
        module: Any = importlib.import_module("torch.utils.tensorboard")
    except ImportError:
        return None
    writer: _Writer = module.SummaryWriter(log_dir=str(folder), purge_step=purge_step)
    return writer


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class ScalarLog:
    """The scalars of each epoch's history row, appended to ``scalars.jsonl`` and (when
    importable) TensorBoard, each flushed at once: a run killed at any point keeps every epoch
    it finished."""

    def __init__(
        self, folder: Path, history: Sequence[dict[str, float]] = (), tensorboard: bool = True
    ) -> None:
        self.path = folder / SCALARS_FILE
        with self.path.open("w") as handle:
            for row in history:
                handle.write(self._line(row))
        purge = int(history[-1]["epoch"]) + 1 if history else None
        self.writer = _open_writer(folder / TENSORBOARD_DIR, purge) if tensorboard else None

    @staticmethod
    def _line(row: dict[str, float]) -> str:
        return json.dumps({k: _finite(float(v)) for k, v in row.items()}) + "\n"

    def write(self, row: dict[str, float]) -> None:
        """One epoch's row (its ``epoch`` is TensorBoard's step)."""
        with self.path.open("a") as handle:
            handle.write(self._line(row))
        if self.writer is None:
            return
        step = int(row["epoch"])
        for key, value in row.items():
            if key != "epoch" and math.isfinite(float(value)):
                self.writer.add_scalar(tensorboard_tag(key), float(value), step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
