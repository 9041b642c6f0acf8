"""``hylo train --ray`` trains the model local workers train, bit for bit, for the same seed
(issue 22, item 5).

What must hold: every episode's randomness comes from its own seed and the PPO update runs where
the command runs, so the rewards, losses, the validation, the best epoch, the held-out score and
the weights equal those of ``--workers`` processes. What may not: the timing columns (``*_s``,
``decisions_per_s``), wall-clock by nature (``docs/ray.md``, "What is the same").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from shared.rl.parallel import LOCAL_RAY
from tests.distributed.ray_helpers import hylo, without_timings

#: a tiny run on a workload compressed until jobs queue: 2 epochs of 4 episodes, 2 validation and
#: 2 held-out windows of 200 jobs (with 100 of warm-up), a learning rate that moves the weights
TRAIN = [
    "train", "--jobs", "6000", "--load", "6", "--epochs", "2", "--windows-per-epoch", "4",
    "--window-size", "200", "--warmup", "100", "--validation-windows", "2", "--test-windows", "2",
    "--metric", "wait", "--seed", "3", "--learning-rate", "0.003", "--workers", "2",
]  # fmt: skip


def trained(out: Path, *where: str) -> dict[str, Any]:
    hylo(*TRAIN, *where, "--out", str(out))
    log: dict[str, Any] = json.loads((out / "train_log.json").read_text())
    return log


def weights(out: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(out / "checkpoint" / "weights.pt", weights_only=True)
    return state


@pytest.mark.slow
def test_train_on_ray_matches_local_workers(local_ray: None, tmp_path: Path) -> None:
    local = trained(tmp_path / "local")
    on_ray = trained(tmp_path / "ray", "--ray")
    assert local["setup"]["ray"] is None and on_ray["setup"]["ray"] == LOCAL_RAY
    history = [without_timings(row) for row in local["history"]]
    assert [without_timings(row) for row in on_ray["history"]] == history
    # the run has something to compare: the agent's schedules differ from the base policy's, and
    # the updates moved the weights
    assert all(row["reward"] != 0 and row["approx_kl"] > 0 for row in history[1:])
    assert on_ray["best_epoch"] == local["best_epoch"]
    assert on_ray["held_out"] == local["held_out"] and local["held_out"]["windows"] == 2
    a, b = weights(tmp_path / "local"), weights(tmp_path / "ray")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
