"""Held-out evaluation of a learned prioritizer against the base policies, on the same windows.

Every policy, learned or not, is simulated window by window with the same warm-up (the
``warmup`` jobs before the window, scored jobs = the window), so the comparison is paired and the
learned policy meets exactly the cluster state the baselines meet. The learned policy runs greedy
(deterministic, what production does) and sampled (the training distribution, one seeded sample
per window). ``transfer`` adds the learned policy laid out over other base policies (its slots and
tail follow that policy's order, and it acts as that policy during warm-up): the paper's Table 7.

Each (row, window) pair is a task of its own (``WindowTask``) with its own seed, so the windows
can run anywhere ``shared.rl.parallel.runner_pool`` puts them (this process, local worker
processes, Ray) and give the same metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from shared.metrics import Window, WindowMetrics
from shared.model import ActorCritic
from shared.rl.episodes import EpisodeRunner, episode_seed
from shared.rl.parallel import InlinePool, Parallelism, RunnerPool, pool_for
from shared.rl.policy import Mode
from shared.rl.reward import window_score

GREEDY = "learned-greedy"
SAMPLED = "learned-sampled"

ProgressHook = Callable[[str, int], None]


def transfer_name(base: str) -> str:
    return f"learned/{base}"


@dataclass(frozen=True)
class WindowTask:
    """One row's run of one window: a baseline (``policy``) or the learned policy (``policy`` None)
    in ``mode``, laid over ``base`` when a transfer; the sample's seed is the window's (``index``),
    whichever worker runs it."""

    label: str
    index: int
    window: Window
    policy: str | None = None
    base: str | None = None
    mode: Mode = "greedy"
    seed: int = 0

    def __call__(self, runner: EpisodeRunner, model: ActorCritic) -> WindowMetrics:
        if self.policy is not None:
            return runner.simulate(self.policy, self.window)
        gen = torch.Generator().manual_seed(episode_seed(self.seed, 1_000_000, self.index))
        policy = runner.learned_policy(model, self.window, self.mode, gen, self.base)
        policy.record = False
        return runner.simulate(policy, self.window).model_copy(update={"policy": self.label})


def window_tasks(
    windows: Sequence[Window],
    baselines: Sequence[str],
    *,
    sampled: bool = True,
    transfer: Sequence[str] = (),
    seed: int = 0,
) -> list[WindowTask]:
    """Every row's task on every window: the baselines first, then the learned rows (greedy,
    sampled, transfers), each row's windows in order."""
    names = dict.fromkeys(baselines)  # a name given twice is one row
    tasks = [WindowTask(name, k, w, policy=name) for name in names for k, w in enumerate(windows)]
    learned: list[tuple[str, str | None, Mode]] = [(GREEDY, None, "greedy")]
    if sampled:
        learned.append((SAMPLED, None, "sample"))
    learned += [(transfer_name(b), b, "greedy") for b in transfer]
    for label, base, mode in learned:
        tasks += [WindowTask(label, k, w, base=base, mode=mode, seed=seed) for k, w in enumerate(windows)]
    return tasks


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
    parallel: Parallelism | RunnerPool | None = None,
) -> dict[str, list[WindowMetrics]]:
    """Per-window metrics of every baseline, the learned policy (greedy, sampled) and transfers,
    computed where ``parallel`` says (a ``Parallelism``, or a pool already open; default: here, in
    order); ``progress`` gets a row's label and how many of its windows are done."""
    if not windows:
        raise ValueError("no evaluation windows")
    tasks = window_tasks(windows, baselines, sampled=sampled, transfer=transfer, seed=seed)
    done: dict[str, int] = {}
    with pool_for(runner, parallel) as pool:
        order = list(range(len(tasks)))
        if not isinstance(pool, InlinePool):
            # on workers the learned rows (a forward pass per cycle, far slower than a baseline)
            # go out first, so that the last tasks to finish are short ones
            order.sort(key=lambda i: tasks[i].policy is not None)

        def finished(i: int) -> None:
            label = tasks[order[i]].label
            done[label] = done.get(label, 0) + 1
            if progress:
                progress(label, done[label])

        results = pool.map(model, [tasks[i] for i in order], finished)
    out: dict[str, list[WindowMetrics]] = {t.label: [] for t in tasks}
    by_task = dict(zip(order, results, strict=True))
    for i, task in enumerate(tasks):
        out[task.label].append(by_task[i])
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
