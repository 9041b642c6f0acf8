"""Held-out evaluation of a learned prioritizer against the base policies, on the same windows.

Every policy, learned or not, is simulated window by window with the same warm-up (the
``warmup`` jobs before the window, scored jobs = the window), so the comparison is paired and the
learned policy meets exactly the cluster state the baselines meet. The learned policy runs greedy
(deterministic, what production does) and sampled (the training distribution, one seeded sample
per window). ``transfer`` adds the learned policy laid out over other base policies (its slots and
tail follow that policy's order, and it acts as that policy during warm-up): the paper's Table 7.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from shared.metrics import Window, WindowMetrics
from shared.model import ActorCritic
from shared.rl.episodes import EpisodeRunner, episode_seed
from shared.rl.reward import window_score

GREEDY = "learned-greedy"
SAMPLED = "learned-sampled"

ProgressHook = Callable[[str, int], None]


def transfer_name(base: str) -> str:
    return f"learned/{base}"


def evaluate_learned(
    runner: EpisodeRunner,
    model: ActorCritic,
    windows: Sequence[Window],
    baselines: Sequence[str],
    *,
    sampled: bool = True,
    transfer: Sequence[str] = (),
    seed: int = 0,
    progress: ProgressHook | None = None,
) -> dict[str, list[WindowMetrics]]:
    """Per-window metrics of every baseline, the learned policy (greedy, sampled) and transfers."""
    if not windows:
        raise ValueError("no evaluation windows")
    out: dict[str, list[WindowMetrics]] = {}
    for name in baselines:
        out[name] = []
        for k, w in enumerate(windows):
            out[name].append(runner.simulate(name, w))
            if progress:
                progress(name, k + 1)
    learned: list[tuple[str, str | None, str]] = [(GREEDY, None, "greedy")]
    if sampled:
        learned.append((SAMPLED, None, "sample"))
    learned += [(transfer_name(b), b, "greedy") for b in transfer]
    for label, base, mode in learned:
        out[label] = []
        for k, w in enumerate(windows):
            gen = torch.Generator().manual_seed(episode_seed(seed, 1_000_000, k))
            policy = runner.learned_policy(model, w, "greedy" if mode == "greedy" else "sample", gen, base)
            policy.record = False
            metrics = runner.simulate(policy, w)
            out[label].append(metrics.model_copy(update={"policy": label}))
            if progress:
                progress(label, k + 1)
    return out


def mean_reward(
    runner: EpisodeRunner, agent: Sequence[WindowMetrics], base: Sequence[WindowMetrics]
) -> float:
    """Mean training reward (normalized gap) of ``agent`` over ``base`` on paired windows."""
    spec = runner.settings.reward
    rewards = [spec.reward(spec.scores(b), spec.scores(a)) for a, b in zip(agent, base, strict=True)]
    return sum(rewards) / len(rewards)


def mean_metric(windows: Sequence[WindowMetrics], metric: str) -> float:
    return sum(window_score(w, metric) for w in windows) / len(windows)
