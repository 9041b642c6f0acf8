"""A small workload that queues: 16 GPUs, 1-8 GPU jobs, log-normal runtimes, offered load 1.1.

Big enough that queues hold tens of jobs (so an order has something to disagree about), small
enough that collecting the base policy's decisions over a few 128-job windows takes a second.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.scheduling.binding import BoundWorkload, bind_jobs


def small_cluster_jobs(n_jobs: int, seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    """The generator, GPU counts (1-8) and log-normal runtimes of a 16-GPU workload; arrivals are
    the caller's (drawn next from the same generator), then ``bound_on_small_cluster``."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 1, 2, 4, 8], size=n_jobs)
    runtime = np.round(np.exp(rng.normal(6.0, 1.2, size=n_jobs)) + 10)
    return rng, gpus, runtime


def bound_on_small_cluster(
    rng: np.random.Generator, gpus: np.ndarray, runtime: np.ndarray, submit: np.ndarray
) -> BoundWorkload:
    """The jobs on 4 x 4 V100, with estimates 1-3 x the true runtime (drawn last from ``rng``)."""
    groups = [{"name": "g0", "gpu_type": "V100", "count": 4, "gpus": 4, "cpus": 64, "mem_gib": 512}]
    spec = parse_cluster_spec({"name": "small-16", "node_groups": groups}, "test")
    n_jobs = len(gpus)
    estimate = np.round(runtime * rng.uniform(1.0, 3.0, size=n_jobs))
    table = build_table(
        ids=[f"j{k}" for k in range(n_jobs)],
        submit=submit.tolist(),
        runtime=runtime.tolist(),
        estimate=estimate.tolist(),
        gpus=gpus.tolist(),
    )
    bound = bind_jobs(table, spec)
    assert bound.exclusions == []
    return bound


def queued_workload(n_jobs: int = 1200, seed: int = 0, load: float = 1.1) -> BoundWorkload:
    """Poisson arrivals at ``load`` x 16 GPUs; estimates 1-3 x the true runtime."""
    rng, gpus, runtime = small_cluster_jobs(n_jobs, seed)
    rate = load * 16 / float(np.mean(gpus * runtime))
    submit = np.cumsum(rng.exponential(1 / rate, size=n_jobs))
    return bound_on_small_cluster(rng, gpus, runtime, submit)


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def queued() -> BoundWorkload:
    return queued_workload()
