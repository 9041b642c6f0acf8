"""The training reward: the paper's normalized gap between the base policy's and the agent's score.

RLTune scores a window under the base policy (B) and under the agent (R), both "lower is better",
and rewards ``(B - R) / max(B, R, 1)`` once, at the end of the episode (reference notes 5.4). The
normalization keeps the reward in [-1, 1] whatever the metric's scale, so one set of PPO
hyperparameters works for waits in hours and slowdowns near 1. For utilization (higher is better)
the paper's formula reduces to ``U_agent - U_base``, which is what is used here. A mix is a
weighted sum of the per-metric rewards (weights normalized to sum 1), so it stays in [-1, 1].

``makespan`` (first arrival to last end of the window's jobs) is the paper's mixed objective's
other half: a policy that serves short jobs first can cut the mean wait while leaving the widest
jobs of the bottleneck GPU type to the end, which lengthens the makespan; on a burst that every
policy drains completely the same work is done, so the makespan also stands for GPU utilization
over the drain (busy GPU-seconds / (capacity x makespan)), which the window-span ``utilization``
does not see (it ends at the last arrival). ``window_values`` computes it from a ``SimResult``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from shared.metrics import Window, WindowMetrics, window_means
from shared.scheduling.result import SimResult

#: metric name on the command line -> extractor of the window's score
METRIC_NAMES: tuple[str, ...] = ("wait", "jct", "bsld", "utilization", "makespan")

#: floor of the normalizer (the paper's ``max(B, R, 1)``): a window where both schedules wait
#: less than a second is a tie, not a +-100% swing
NORMALIZER_FLOOR = 1.0


def window_score(metrics: WindowMetrics, metric: str) -> float:
    """The window's score for ``metric``: mean wait (s), mean JCT (s), mean BSLD, utilization, or
    makespan (s, first arrival to last end of the window's jobs)."""
    if metric == "wait":
        return metrics.wait_s.mean
    if metric == "jct":
        return metrics.jct_s.mean
    if metric == "bsld":
        return metrics.bsld.mean
    if metric == "utilization":
        return metrics.utilization
    if metric == "makespan":
        return metrics.makespan_s
    raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")


def normalized_gap(base: float, agent: float, metric: str) -> float:
    """Reward of one metric: positive when the agent beats the base policy, in [-1, 1].

    Lower-is-better metrics: ``(base - agent) / max(base, agent, 1)``; utilization:
    ``agent - base``. NaN scores (a window with no finished job) give 0: no signal either way.
    """
    if metric not in METRIC_NAMES:
        raise ValueError(f"unknown metric {metric!r}; choose from {', '.join(METRIC_NAMES)}")
    if math.isnan(base) or math.isnan(agent):
        return 0.0
    if metric == "utilization":
        return agent - base
    return (base - agent) / max(base, agent, NORMALIZER_FLOOR)


def window_makespan(result: SimResult, window: Window) -> float:
    """First submit to last end of ``window``'s scored jobs (``summarize_window``'s ``makespan_s``
    for a run in which they all finished; NaN when one did not: no signal, as for other NaNs)."""
    idx = window.indices()
    keep = np.asarray(result.metric_mask, dtype=bool)[idx]
    idx = idx[keep]
    if len(idx) == 0:
        return float("nan")
    end = result.end[idx]
    if np.isnan(end).any():
        return float("nan")
    return float(end.max() - result.jobs.submit[idx].min())


def window_values(result: SimResult, window: Window, metrics: tuple[str, ...]) -> dict[str, float]:
    """The scores of ``metrics`` for ``window`` in ``result``: ``window_means``' (the cheap path an
    episode takes) plus the makespan when asked (only then: it is not free)."""
    means = window_means(result, window)
    if "makespan" in metrics:
        means["makespan"] = window_makespan(result, window)
    return {n: means[n] for n in metrics}


@dataclass(frozen=True)
class RewardSpec:
    """Which metric(s) the agent optimizes: one name, or weights over several.

    ``parse("bsld")`` or ``parse("wait:0.5,bsld:0.5")``.
    """

    weights: tuple[tuple[str, float], ...]

    @classmethod
    def parse(cls, text: str) -> RewardSpec:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise ValueError("empty metric specification")
        weights: list[tuple[str, float]] = []
        for part in parts:
            name, _, w = part.partition(":")
            name = name.strip()
            if name not in METRIC_NAMES:
                raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
            weight = float(w) if w else 1.0
            if weight < 0 or not math.isfinite(weight):
                raise ValueError(f"metric weight must be finite and >= 0, got {w!r}")
            weights.append((name, weight))
        total = sum(w for _, w in weights)
        if total <= 0:
            raise ValueError("metric weights sum to 0")
        return cls(tuple((n, w / total) for n, w in weights))

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.weights)

    def describe(self) -> str:
        if len(self.weights) == 1:
            return self.weights[0][0]
        return ",".join(f"{n}:{w:g}" for n, w in self.weights)

    def scores(self, metrics: WindowMetrics) -> dict[str, float]:
        return {n: window_score(metrics, n) for n in self.metrics}

    def reward(self, base: Mapping[str, float], agent: Mapping[str, float]) -> float:
        """Weighted normalized gap over the spec's metrics, from per-metric window scores."""
        return sum(w * normalized_gap(base[n], agent[n], n) for n, w in self.weights)
