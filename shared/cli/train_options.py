"""``hylo train``'s options that shape a run: what ``run.json`` records and ``--resume`` reads back.

Why a typed record of its own: a resumed run must be the run that was started, so its settings
come from the folder, not from whatever defaults the command has today. The command's own options
(``--out``, ``--force``, ``--resume``, ``--checkpoint-every``) say where and how often to write,
not what to train, and are not part of it. ``tests/cli/test_train_folders.py`` checks that the
fields below and the command's options stay the same set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``hylo train``'s options that are not training settings (``--ray``/``--ray-address``: where the
#: episodes run, which changes no result and is chosen anew by each session, resumed or not)
CONTROL_OPTIONS = frozenset({"out", "force", "resume", "checkpoint_every", "ray", "ray_address"})
#: settings a resumed run may change: how long it trains, how many processes simulate (the
#: losses do not depend on it), how many held-out windows score the final model
MAY_CHANGE_ON_RESUME = frozenset({"epochs", "workers", "max_minutes", "test_windows"})


@dataclass(frozen=True)
class TrainOptions:
    """The values of ``hylo train``'s training options, by their parameter names."""

    trace: str | None
    cluster: str | None
    base_policy: str
    metric: str
    epochs: int
    windows_per_epoch: int
    window_size: int
    warmup: int | None
    seed: int
    paper: bool
    estimates: str
    workers: int
    sampling: str
    feature_set: str
    learning_rate: float
    update_epochs: int
    minibatch_size: int
    ent_coef: float
    gamma: float
    gae_lambda: float
    target_kl: float
    kl_min_epochs: int
    top_k: int
    max_queue: int
    base_prior: float
    validation_windows: int
    eval_every: int
    test_windows: int
    train_fraction: float
    jobs: int
    placement: str | None
    load: float | None
    load_definition: str
    max_minutes: float | None
    imitation_epochs: int
    imitation_windows: int
    imitate: str | None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TrainOptions:
        """From the command's parameters (``ctx.params``) or a merged mapping of them."""
        return cls(**{name: params[name] for name in cls.names()})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def option_name(name: str) -> str:
    """The command-line spelling of a parameter: ``max_minutes`` -> ``--max-minutes``."""
    return "--" + name.replace("_", "-")
