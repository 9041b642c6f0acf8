"""The drift statistic (PSI) on hand-computed histograms and on synthetic shifted/unshifted samples."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np
import pytest

from shared.retrain import RecordedJob, job_samples, psi, psi_counts, queue_drift, workload_drift
from shared.schemas import JobOutcome, NodeStates, PendingJob, PendingJobs, QueueSnapshot
from shared.store import create_engine, record_jobs, record_outcome, upgrade
from tests.schemas.message_factories import node


def test_psi_of_hand_computed_histograms() -> None:
    # 0.5 is added to every count: (499.5, 499.5) -> p = (0.5, 0.5); (899.5, 99.5) -> q = (0.9, 0.1)
    # PSI = 0.4 ln(0.9 / 0.5) + (-0.4) ln(0.1 / 0.5) = 0.4 (ln 1.8 + ln 5)
    value = psi_counts([499.5, 499.5], [899.5, 99.5])
    assert value == pytest.approx(0.4 * (math.log(1.8) + math.log(5.0)), rel=1e-12)
    assert psi_counts([10, 20, 30], [10, 20, 30]) == 0.0
    assert psi_counts([1, 2], [5, 1]) == pytest.approx(psi_counts([5, 1], [1, 2]))  # symmetric
    with pytest.raises(ValueError, match="one length"):
        psi_counts([1, 2], [1, 2, 3])


def test_psi_bins_a_discrete_sample_at_its_values() -> None:
    # reference: half 1-GPU, half 8-GPU jobs; its deciles are 1 and 8 only, so three bins:
    # (-inf, 1], (1, 8] and (8, inf) (empty here; it catches recent jobs bigger than any before)
    ref = np.asarray([1.0] * 500 + [8.0] * 500)
    same = np.asarray([1.0] * 500 + [8.0] * 500)
    shifted = np.asarray([1.0] * 900 + [8.0] * 100)
    assert psi(ref, same) == 0.0
    # counts (500, 500, 0) vs (900, 100, 0), each plus 0.5, over 1001.5; the empty bin adds 0
    p1 = 500.5 / 1001.5
    q1, q2 = 900.5 / 1001.5, 100.5 / 1001.5
    expected = (q1 - p1) * math.log(q1 / p1) + (q2 - p1) * math.log(q2 / p1)
    assert psi(ref, shifted) == pytest.approx(expected, rel=1e-12)


def _jobs(
    rng: np.random.Generator, n: int, log_runtime_mean: float, gpu_choices: list[int]
) -> list[RecordedJob]:
    runtime = np.exp(rng.normal(log_runtime_mean, 1.0, size=n))
    gpus = rng.choice(gpu_choices, size=n)
    return [
        RecordedJob(
            f"j{k}",
            0.0,
            0.0,
            float(runtime[k]),
            int(gpus[k]),
            1000,
            -1,
            -1,
            3600.0,
            "u",
            "p",
            "normal",
            "completed",
        )
        for k in range(n)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unshifted_samples_do_not_drift(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = job_samples(_jobs(rng, 2000, 6.0, [1, 1, 2, 4, 8]))
    b = job_samples(_jobs(rng, 2000, 6.0, [1, 1, 2, 4, 8]))
    result = workload_drift(a, b, threshold=0.25)
    # the expected PSI of two samples of one law is about (bins - 1)(1/n + 1/m) = 0.009
    assert result.score < 0.05 and not result.drifted, result
    assert set(result.per_feature) == {"gpus", "gpu_seconds", "runtime"}


def test_longer_runtimes_drift() -> None:
    rng = np.random.default_rng(3)
    a = job_samples(_jobs(rng, 2000, 6.0, [1, 1, 2, 4, 8]))
    b = job_samples(_jobs(rng, 2000, 7.0, [1, 1, 2, 4, 8]))  # every runtime x e, in distribution
    result = workload_drift(a, b, threshold=0.25)
    assert result.drifted and result.per_feature["runtime"] >= 0.25, result
    assert result.per_feature["gpus"] < 0.05  # job sizes did not move
    assert "runtime" in result.reason or "gpu_seconds" in result.reason


def test_bigger_jobs_drift() -> None:
    rng = np.random.default_rng(4)
    a = job_samples(_jobs(rng, 2000, 6.0, [1, 1, 2, 4, 8]))
    b = job_samples(_jobs(rng, 2000, 6.0, [4, 8, 8, 16]))
    result = workload_drift(a, b)
    assert result.drifted and result.per_feature["gpus"] >= 0.25, result
    assert result.per_feature["runtime"] < 0.05


def test_too_few_jobs_never_triggers_and_bad_threshold_refused() -> None:
    rng = np.random.default_rng(5)
    a = job_samples(_jobs(rng, 50, 6.0, [1]))
    b = job_samples(_jobs(rng, 50, 9.0, [8]))
    result = workload_drift(a, b, min_jobs=100)
    assert not result.drifted and "too few jobs" in result.reason and math.isnan(result.score)
    with pytest.raises(ValueError, match="threshold"):
        workload_drift(a, b, threshold=0.0)


@pytest.mark.asyncio
async def test_queue_drift_from_the_database(tmp_path: Path) -> None:
    """Two submit-time ranges of recorded jobs: the later one runs 20x longer (SQLite store)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
    await upgrade(engine)
    cluster = f"c-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(6)
    n = 300
    runtimes = np.concatenate([np.exp(rng.normal(5, 0.5, n)), 20 * np.exp(rng.normal(5, 0.5, n))])
    pending = tuple(
        PendingJob(job_id=f"j{k}", submit_s=float(k), gpus=1, est_runtime_s=3600.0) for k in range(2 * n)
    )
    snap = QueueSnapshot(
        cluster=cluster,
        correlation_id="s1",
        time=0.0,
        sequence=1,
        pending=PendingJobs.of(pending),
        nodes=NodeStates.of((node("n0", "g0", 8, 64000, 524288),)),
    )
    try:
        async with engine.begin() as conn:
            await record_jobs(conn, snap)
            for k in range(2 * n):
                await record_outcome(
                    conn,
                    JobOutcome(
                        cluster=cluster,
                        correlation_id="s1",
                        job_id=f"j{k}",
                        submit_s=float(k),
                        start_s=float(k),
                        end_s=float(k) + float(runtimes[k]),
                        gpus=1,
                    ),
                )
        same = await queue_drift(engine, cluster, reference=(0.0, 150.0), recent=(150.0, float(n)))
        moved = await queue_drift(engine, cluster, reference=(0.0, float(n)), recent=(float(n), None))
    finally:
        await engine.dispose()
    assert same.reference_jobs == 150 and same.recent_jobs == 150
    assert not same.drifted, same
    assert moved.drifted and moved.per_feature["runtime"] > 1.0, moved
