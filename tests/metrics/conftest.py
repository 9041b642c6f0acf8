"""Shared fixtures for the metrics tests: small simulation results written by hand."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.jobs import build_table
from shared.scheduling.result import SimResult

NAN = float("nan")


def three_job_result() -> SimResult:
    """3 jobs on a 4-GPU cluster.

    A: submit 0, runtime 100, 2 GPUs -> runs [0, 100)
    B: submit 10, runtime 50, 4 GPUs -> must wait for A, runs [100, 150)
    C: submit 20, runtime 5, 1 GPU   -> backfilled next to A, runs [20, 25)

    Timeline (after each cycle's starts): t, busy GPUs, queued jobs
      0: 2, 0 | 10: 2, 1 (B waits) | 20: 3, 1 (C runs) | 25: 2, 1 | 100: 4, 0 (B runs) | 150: 0, 0
    """
    jobs = build_table(
        ids=["A", "B", "C"], submit=[0.0, 10.0, 20.0], runtime=[100.0, 50.0, 5.0], gpus=[2, 4, 1]
    )
    return SimResult(
        jobs=jobs,
        start=np.array([0.0, 100.0, 20.0]),
        end=np.array([100.0, 150.0, 25.0]),
        capacity_gpus=4,
        timeline_t=np.array([0.0, 10.0, 20.0, 25.0, 100.0, 150.0]),
        timeline_busy=np.array([2.0, 2.0, 3.0, 2.0, 4.0, 0.0]),
        timeline_queued=np.array([0, 1, 1, 1, 0, 0], dtype=np.int64),
        policy="hand",
    )


def cut_off_result() -> SimResult:
    """The three jobs above plus D (submit 130, 4 GPUs), still waiting when the run stops at 160.

    Timeline: the same up to 100, then 130: 4, 1 (D waits) | 150: 0, 1 | 160: 0, 1 (end of run).
    """
    jobs = build_table(
        ids=["A", "B", "C", "D"],
        submit=[0.0, 10.0, 20.0, 130.0],
        runtime=[100.0, 50.0, 5.0, 30.0],
        gpus=[2, 4, 1, 4],
    )
    return SimResult(
        jobs=jobs,
        start=np.array([0.0, 100.0, 20.0, NAN]),
        end=np.array([100.0, 150.0, 25.0, NAN]),
        capacity_gpus=4,
        timeline_t=np.array([0.0, 10.0, 20.0, 25.0, 100.0, 130.0, 150.0, 160.0]),
        timeline_busy=np.array([2.0, 2.0, 3.0, 2.0, 4.0, 4.0, 0.0, 0.0]),
        timeline_queued=np.array([0, 1, 1, 1, 0, 1, 1, 1], dtype=np.int64),
        policy="hand",
    )


@pytest.fixture
def three_jobs() -> SimResult:
    return three_job_result()


@pytest.fixture
def cut_off() -> SimResult:
    return cut_off_result()
