"""Tiny workloads for the learned-prioritizer tests: one 4-GPU node, jobs that take it whole.

With every job taking the whole node the cluster is a single machine and the order of the queue is
all that matters: short jobs waiting behind long ones make FCFS bad on wait and shortest-first
good, so there is something to learn, and a schedule can be reasoned about by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import build_table
from shared.scheduling.binding import BoundWorkload, bind_jobs


def one_node() -> ClusterSpec:
    groups = [{"name": "g0", "gpu_type": "V100", "count": 1, "gpus": 4, "cpus": 64, "mem_gib": 1024}]
    return parse_cluster_spec({"name": "one-node", "node_groups": groups}, "test")


def toy_workload(n_jobs: int = 160, seed: int = 0) -> BoundWorkload:
    """Bursts of 4 jobs every 400 s, each a 4-GPU job of 10 s or 300 s (random), true estimates."""
    rng = np.random.default_rng(seed)
    submit = [float(400 * (k // 4) + k % 4) for k in range(n_jobs)]
    runtime = [float(rng.choice([10.0, 300.0])) for _ in range(n_jobs)]
    table = build_table(
        ids=[f"j{k}" for k in range(n_jobs)],
        submit=submit,
        runtime=runtime,
        estimate=runtime,
        gpus=[4] * n_jobs,
    )
    bound = bind_jobs(table, one_node())
    assert bound.exclusions == []
    return bound


@pytest.fixture(scope="session", autouse=True)
def one_thread() -> None:
    """The trainer runs torch single-threaded; so do the tests (faster on small tensors)."""
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy() -> BoundWorkload:
    return toy_workload()
