"""The training curve (the paper's Fig. 11): the agent's and the base policy's score per epoch.

Built on ``matplotlib.figure.Figure`` with the Agg canvas (no pyplot), like ``shared.metrics.plots``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def training_curve(history: Sequence[dict[str, float]], path: str | Path, metric: str, base: str) -> Path:
    """Left: mean ``metric`` of the sampled agent and of ``base`` on the epoch's training windows,
    and the greedy agent on the validation windows when present. Right: mean reward per epoch."""
    rows = [r for r in history if r.get("epoch", 0) >= 1]
    fig = Figure(figsize=(10, 4), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    ax, ax_r = fig.subplots(1, 2)
    epochs = [r["epoch"] for r in rows]
    ax.plot(epochs, [r["agent"] for r in rows], label="agent (sampled, train windows)")
    ax.plot(epochs, [r["base"] for r in rows], label=f"{base} (train windows)", linestyle="--")
    val = [r for r in history if not math.isnan(r.get("val_agent", math.nan))]
    if val:
        ax.plot(
            [r["epoch"] for r in val],
            [r["val_agent"] for r in val],
            marker="o",
            ms=3,
            label="agent (greedy, validation)",
        )
        ax.plot(
            [r["epoch"] for r in val],
            [r["val_base"] for r in val],
            linestyle=":",
            label=f"{base} (validation)",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"mean {metric}")
    ax.set_title(f"mean {metric} per epoch")
    ax.legend(fontsize=8)
    ax_r.plot(epochs, [r["reward"] for r in rows], label="train (sampled)")
    if val:
        ax_r.plot(
            [r["epoch"] for r in val],
            [r["val_reward"] for r in val],
            marker="o",
            ms=3,
            label="validation (greedy)",
        )
    ax_r.axhline(0.0, color="grey", linewidth=0.8)
    ax_r.set_xlabel("epoch")
    ax_r.set_ylabel("normalized gap vs base (reward)")
    ax_r.set_title("reward per epoch")
    ax_r.legend(fontsize=8)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, format="png")
    return target
