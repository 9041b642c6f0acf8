"""Where episodes and evaluation windows run: this process, local worker processes, or Ray.

Why one place: ``hylo train`` (an epoch's episodes, the validation and held-out windows) and
``hylo evaluate`` (every policy on every window) do the same thing many times over: run a task
against one bound workload and a model. ``runner_pool`` is the only code that decides where those
tasks run, from a ``Parallelism`` (``--workers``, ``--ray``, ``--ray-address``); the callers hand it
a list of tasks and get the results back in the list's order, whatever ran them:

- ``InlinePool``: one worker and no Ray, the tasks run here, in order (no copy of anything);
- ``ProcessPool``: ``workers > 1``, spawned processes on this machine (``multiprocessing``);
- ``shared.rl.ray_pool.RayPool``: Ray actors, one CPU each, on a local Ray started for the command
  or on a cluster (``docs/ray.md``).

Why the results do not depend on the choice: a task carries everything its outcome depends on
(the window, the mode, its own seed), every worker holds the same workload and settings, and the
model travels as its weights (``ModelPayload``) before each batch. Which worker runs a task, and
in which order tasks finish, changes nothing but the time. What differs is listed in
``docs/ray.md`` ("What is the same"): the timing columns, and floats on machines of another CPU
type.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

from shared.domain.exclusions import Exclusion
from shared.model import ActorCritic, ModelConfig
from shared.rl.episodes import EpisodeRunner, EpisodeSettings
from shared.scheduling.binding import BoundWorkload

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: ``Parallelism.ray`` for a Ray started on this machine for the command (Ray's own spelling)
LOCAL_RAY = "local"

#: called with a task's index as it finishes (in the order tasks finish, not their list order)
DoneHook = Callable[[int], None]


def ray_target(ray: bool, address: str | None) -> str | None:
    """``Parallelism.ray`` from ``--ray`` and ``--ray-address`` (an address implies ``--ray``)."""
    if address is not None and address.strip():
        return address.strip()
    return LOCAL_RAY if ray else None


class RunnerTask(Protocol[T_co]):
    """One unit of work: picklable (it travels to worker processes and Ray actors), and a
    function of the runner, the model and its own fields alone."""

    def __call__(self, runner: EpisodeRunner, model: ActorCritic) -> T_co: ...


@dataclass(frozen=True)
class Parallelism:
    """Where tasks run: ``workers`` of them at once; on Ray when ``ray`` is set (``LOCAL_RAY``:
    a Ray started here for the command; otherwise a cluster's ``HOST:PORT``, or ``auto``)."""

    workers: int = 1
    ray: str | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")

    def describe(self) -> str:
        """One phrase for the command's output: what runs the tasks."""
        if self.ray is None:
            return "this process" if self.workers == 1 else f"{self.workers} local worker processes"
        where = "a local Ray" if self.ray == LOCAL_RAY else f"the Ray cluster at {self.ray}"
        return f"{self.workers} Ray worker{'s' if self.workers > 1 else ''} on {where}"


@dataclass(frozen=True)
class WorkerInit:
    """What every worker holds for its whole life: the workload, how episodes are simulated, and
    the jobs left out at load time (sent once per worker, not per task)."""

    workload: BoundWorkload
    settings: EpisodeSettings
    exclusions: tuple[Exclusion, ...]

    @classmethod
    def of(cls, runner: EpisodeRunner) -> WorkerInit:
        return cls(runner.workload, runner.settings, tuple(runner.exclusions))


@dataclass(frozen=True)
class ModelPayload:
    """The model as it travels to workers: its shape, its weights, and the sampling rule of the
    card it came from (``ActorCritic.trained_sampling``, which decides the features it is fed)."""

    config: ModelConfig
    state: dict[str, torch.Tensor]
    trained_sampling: object | None

    @classmethod
    def of(cls, model: ActorCritic) -> ModelPayload:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return cls(model.config, state, model.trained_sampling)

    def into(self, model: ActorCritic | None) -> ActorCritic:
        """``model`` (or a new one, when its shape differs) holding these weights."""
        if model is None or model.config != self.config:
            model = ActorCritic(self.config).eval()
        model.load_state_dict(self.state)
        model.trained_sampling = self.trained_sampling
        return model


class WorkerState:
    """A worker's runner and model: the body of a spawned process and of a Ray actor alike."""

    def __init__(self, init: WorkerInit) -> None:
        # Ctrl-C reaches the whole process group: the parent handles it (saves, then stops the
        # workers); a worker dying of it mid-task would leave the parent waiting on a lost result
        with contextlib.suppress(ValueError):  # not its process' main thread: nothing to ignore
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        torch.set_num_threads(1)
        self.runner = EpisodeRunner(init.workload, init.settings, init.exclusions)
        self.model: ActorCritic | None = None

    def run(self, payload: ModelPayload, index: int, task: RunnerTask[T]) -> tuple[int, T]:
        """Task ``index`` under the payload's weights; the index comes back with the result so
        that results finishing in any order land in their place."""
        self.model = payload.into(self.model)
        return index, task(self.runner, self.model)


class RunnerPool:
    """Runs tasks against one runner's workload; ``map`` returns results in the tasks' order."""

    workers: int = 1

    def map(
        self, model: ActorCritic, tasks: Sequence[RunnerTask[T]], on_done: DoneHook | None = None
    ) -> list[T]:
        raise NotImplementedError

    def close(self, abort: bool = False) -> None:
        """Release the workers; ``abort`` (after an error or Ctrl-C, when tasks may never report
        back) stops them without waiting."""


class InlinePool(RunnerPool):
    """The tasks run here, one after another, on the caller's runner and model (its cache of base
    policy runs shared across tasks)."""

    def __init__(self, runner: EpisodeRunner) -> None:
        self.runner = runner

    def map(
        self, model: ActorCritic, tasks: Sequence[RunnerTask[T]], on_done: DoneHook | None = None
    ) -> list[T]:
        out: list[T] = []
        for i, task in enumerate(tasks):
            out.append(task(self.runner, model))
            if on_done:
                on_done(i)
        return out


_WORKER: WorkerState | None = None


def _init_process(init: WorkerInit) -> None:
    global _WORKER
    _WORKER = WorkerState(init)


def _process_task(args: tuple[int, ModelPayload, RunnerTask[Any]]) -> tuple[int, Any]:
    index, payload, task = args
    assert _WORKER is not None
    return _WORKER.run(payload, index, task)


class ProcessPool(RunnerPool):
    """Spawned processes on this machine, each holding the workload; the model's weights go with
    every task (tens of kB: cheaper than a round of messages to refresh them)."""

    def __init__(self, runner: EpisodeRunner, workers: int) -> None:
        self.workers = workers
        ctx = mp.get_context("spawn")
        self._pool: Any = ctx.Pool(workers, initializer=_init_process, initargs=(WorkerInit.of(runner),))

    def map(
        self, model: ActorCritic, tasks: Sequence[RunnerTask[T]], on_done: DoneHook | None = None
    ) -> list[T]:
        payload = ModelPayload.of(model)
        out: list[Any] = [None] * len(tasks)
        jobs = [(i, payload, task) for i, task in enumerate(tasks)]
        for i, value in self._pool.imap_unordered(_process_task, jobs, chunksize=1):
            out[i] = value
            if on_done:
                on_done(i)
        return out

    def close(self, abort: bool = False) -> None:
        if abort:
            self._pool.terminate()
        else:
            self._pool.close()
        self._pool.join()


@contextmanager
def compute_session(parallel: Parallelism) -> Iterator[str | None]:
    """The command-wide part of ``parallel``: on Ray, the connection (a local Ray started, or a
    cluster joined) held across every pool the command opens, and closed at the end; nothing for
    local processes. Yields a line saying what was connected to (None: nothing). Raises
    ``shared.rl.ray_pool.RayUnavailable`` (one line) when Ray is missing or unreachable."""
    if parallel.ray is None:
        yield None
        return
    from shared.rl.ray_pool import ray_session

    with ray_session(parallel.ray, parallel.workers) as line:
        yield line


@contextmanager
def pool_for(runner: EpisodeRunner, where: Parallelism | RunnerPool | None) -> Iterator[RunnerPool]:
    """``where`` itself when it is an open pool (its owner closes it), else a pool opened for the
    block (``None``: this process)."""
    if isinstance(where, RunnerPool):
        yield where
        return
    with runner_pool(runner, where or Parallelism()) as pool:
        yield pool


@contextmanager
def runner_pool(runner: EpisodeRunner, parallel: Parallelism) -> Iterator[RunnerPool]:
    """The pool ``parallel`` asks for over ``runner``'s workload: the one place that decides
    between this process, local processes and Ray. On Ray, a connection the caller holds
    (``compute_session``) is used; without one, the pool opens its own for its lifetime."""
    with compute_session(parallel):
        pool: RunnerPool
        if parallel.ray is not None:
            from shared.rl.ray_pool import RayPool

            pool = RayPool(runner, parallel.workers)
        elif parallel.workers > 1:
            pool = ProcessPool(runner, parallel.workers)
        else:
            pool = InlinePool(runner)
        try:
            yield pool
        except BaseException:
            pool.close(abort=True)
            raise
        pool.close()
