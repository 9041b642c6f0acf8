"""Episodes and evaluation windows on Ray: actors that each hold the workload, fed one task at a time.

Why Ray: a provider's evaluation (100 windows x 10 policies) or an epoch's rollouts outgrow one
machine, and Ray already does what spreading them needs (starting workers on many nodes, moving
the workload to each node once through its object store, scheduling tasks on idle actors, telling
a lost worker from a slow one). Hylo adds only its tasks: the ``WorkerState`` that local worker
processes run becomes a Ray actor (``RayWorker``, one CPU each), and ``ray.util.ActorPool`` hands
it tasks as it frees up. The workload is read and bound where the command runs and sent to the
actors, so trace files need not exist on the other nodes (``docs/ray.md``).

Ray is optional (``pip install 'hylo[ray]'``): it is imported only when ``--ray`` is asked for, and
a missing install, an address nobody answers at, or a cluster with fewer CPUs than workers is one
line (``RayUnavailable``) naming what to do.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from pydantic import Field, ValidationError

from shared.config import HyloBaseSettings
from shared.model import ActorCritic
from shared.rl.episodes import EpisodeRunner
from shared.rl.parallel import (
    LOCAL_RAY,
    DoneHook,
    ModelPayload,
    RunnerPool,
    RunnerTask,
    T,
    WorkerInit,
    WorkerState,
)

#: what a local Ray needs at the least (Ray refuses an object store below 75 MiB)
MIN_OBJECT_STORE_MIB = 80


class RaySettings(HyloBaseSettings):
    """How Hylo starts or joins Ray (``HYLO_RAY_*``; ``hylo.toml`` keys without the prefix).

    Why settings: the connect timeout is what a slow network needs more of, and the object store of
    the local Ray is memory taken from a machine shared with other work (Ray's own default is 30%
    of memory; Hylo's workloads and weights need a few MB)."""

    ray_connect_timeout_s: float = Field(
        default=5.0, gt=0, description="how long to wait for a Ray cluster's address to answer"
    )
    ray_object_store_mib: int = Field(
        default=512,
        ge=MIN_OBJECT_STORE_MIB,
        description="object store of the local Ray that --ray starts (a cluster's is its own)",
    )


class RayUnavailable(RuntimeError):
    """Ray cannot be used as asked: not installed, nobody at the address, too few CPUs. The
    message is one line that says what to do."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "--ray: Ray is not installed in this environment; install it with pip install 'hylo[ray]' "
            "(in a checkout: pip install -e '.[ray]', which scripts/bootstrap.sh does), or drop --ray "
            "to run on local --workers processes"
        ) from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` as a pair; None for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _check_reachable(address: str, timeout_s: float) -> None:
    """Refuse at once an address where nothing listens: ``ray.init`` would retry it for minutes
    (its own connect loop has no overall limit)."""
    if address.startswith("ray://"):
        raise RayUnavailable(
            f"--ray-address {address}: a Ray Client address, which needs ray[client] and is not what Hylo "
            "runs on; run hylo on a node of the cluster (the head, or one that joined with ray start) "
            "with the head's HOST:PORT (docs/ray.md)"
        )
    pair = _host_port(address)
    if pair is None:
        if address != "auto":
            raise RayUnavailable(
                f"--ray-address {address}: not an address; give the head node's HOST:PORT "
                "(ray start --head prints it, port 6379 by default) or auto (the Ray running on this machine)"
            )
        return
    try:
        with socket.create_connection(pair, timeout=timeout_s):
            pass
    except OSError as err:
        raise RayUnavailable(
            f"--ray-address {address}: no Ray cluster answers there ({err.strerror or err}, within "
            f"{timeout_s:g} s); start its head node with ray start --head --port={pair[1]} (docs/ray.md), "
            "check the host and port (HYLO_RAY_CONNECT_TIMEOUT_S for a slow network), or drop "
            "--ray-address to start a local Ray"
        ) from None


def _start_or_join(ray: Any, address: str, workers: int, settings: RaySettings) -> None:
    """``ray.init`` for a local Ray (``LOCAL_RAY``) or a cluster, quiet: no dashboard, the
    workers' output kept in Ray's own logs, errors only for a local Ray (its notices are about
    itself) and warnings too for a cluster (about the cluster's setup: its authentication, say)."""
    quiet: dict[str, Any] = {
        "logging_level": logging.ERROR if address == LOCAL_RAY else logging.WARNING,
        "log_to_driver": False,
        "include_dashboard": False,
    }
    if address == LOCAL_RAY:
        cpus = max(workers, os.cpu_count() or 1)
        store = settings.ray_object_store_mib * 1024 * 1024
        ray.init(address=LOCAL_RAY, num_cpus=cpus, object_store_memory=store, **quiet)
        return
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as err:
        message = " ".join(str(err).split())[:300]
        raise RayUnavailable(
            f"--ray-address {address}: cannot join that Ray cluster ({type(err).__name__}: {message}); "
            "if it uses token authentication (Ray's log says InvalidAuthToken), run with "
            "RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, or the head's ~/.ray/auth_token copied "
            "here); every node needs the same Python, Ray and Hylo as this one (docs/ray.md)"
        ) from None


def _check_cpus(ray: Any, address: str, workers: int, owned: bool) -> str:
    """Each worker is an actor of one CPU: a cluster with fewer CPUs would leave some waiting for
    ever. Returns the line describing the cluster."""
    resources = ray.cluster_resources()
    cpus = int(resources.get("CPU", 0))
    nodes = sum(1 for key in resources if key.startswith("node:") and not key.startswith("node:__"))
    if not owned:
        where = "the Ray this process already holds"
    elif address == LOCAL_RAY:
        where = "a local Ray started for this command"
    else:
        where = f"Ray cluster {address}"
    if cpus < workers:
        raise RayUnavailable(
            f"--workers {workers}: {where} has {_count(cpus, 'CPU')} and each worker takes one; pass "
            f"--workers {max(cpus, 1)} or fewer, or add nodes (ray start --address HEAD:PORT on each)"
        )
    return f"{where}: {_count(nodes, 'node')}, {_count(cpus, 'CPU')}; {_count(workers, 'worker')}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@contextmanager
def ray_session(address: str, workers: int) -> Iterator[str]:
    """Ray for the duration of the block: a local Ray started (``LOCAL_RAY``) or a cluster joined,
    and let go at the end (a local Ray stops with it; a cluster keeps running). A Ray this process
    already holds (a caller's, or a test's) is used as it is and left alone. Yields one line saying
    what runs the workers; raises ``RayUnavailable`` when Ray cannot be used."""
    ray = _import_ray()
    try:
        settings = RaySettings()
    except ValidationError as err:
        first = err.errors()[0]
        raise RayUnavailable(f"HYLO_{str(first['loc'][0]).upper()}: {first['msg']}") from None
    if address != LOCAL_RAY:  # an address nobody answers at is refused, whatever Ray is held
        _check_reachable(address, settings.ray_connect_timeout_s)
    owned = not ray.is_initialized()
    if owned:
        _start_or_join(ray, address, workers, settings)
    try:
        yield _check_cpus(ray, address, workers, owned)
    finally:
        if owned:
            ray.shutdown()


class RayWorker(WorkerState):
    """``WorkerState`` as a Ray actor: the workload comes in, and every result goes out, pickled,
    as they travel to and from local worker processes. Why: Ray hands numpy arrays out of its
    object store as read-only views, so an episode's decisions would reach the PPO update
    read-only (and a simulator writing into the workload would fail on Ray alone); pickled, every
    array is its receiver's own, as with ``multiprocessing``. The copies are of a few MB at most."""

    def __init__(self, init: bytes) -> None:
        super().__init__(pickle.loads(init))

    def run_pickled(self, payload: ModelPayload, index: int, task: RunnerTask[Any]) -> bytes:
        return pickle.dumps(self.run(payload, index, task), protocol=pickle.HIGHEST_PROTOCOL)


@cache
def _actor_class() -> Any:
    """``RayWorker`` as a Ray actor of one CPU (defined once per process)."""
    ray = _import_ray()
    return ray.remote(num_cpus=1)(RayWorker)


class RayPool(RunnerPool):
    """``workers`` Ray actors, each holding the workload (put in the object store once, so a node
    fetches it once however many actors it runs, and each actor unpickles its own copy); the
    weights are put once per batch."""

    def __init__(self, runner: EpisodeRunner, workers: int) -> None:
        ray = _import_ray()
        from ray.util import ActorPool

        self.workers = workers
        self._ray = ray
        init = ray.put(pickle.dumps(WorkerInit.of(runner), protocol=pickle.HIGHEST_PROTOCOL))
        self._actors = [_actor_class().remote(init) for _ in range(workers)]
        self._pool = ActorPool(self._actors)

    def map(
        self, model: ActorCritic, tasks: Sequence[RunnerTask[T]], on_done: DoneHook | None = None
    ) -> list[T]:
        payload = self._ray.put(ModelPayload.of(model))
        out: list[Any] = [None] * len(tasks)

        def submit(actor: Any, item: tuple[int, RunnerTask[T]]) -> Any:
            return actor.run_pickled.remote(payload, item[0], item[1])

        for blob in self._pool.map_unordered(submit, list(enumerate(tasks))):
            i, value = pickle.loads(blob)
            out[i] = value
            if on_done:
                on_done(i)
        return out

    def close(self, abort: bool = False) -> None:
        """Stop the actors (their CPUs go back to the cluster for the command's next pool)."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
