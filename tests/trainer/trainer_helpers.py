"""A small recorded history for retraining tests: a 16-GPU cluster spec file and jobs + outcomes.

Jobs arrive in a Poisson stream at offered load 1.1 (so the simulator's queues hold something to
order), with 1-8 GPUs and log-normal runtimes; outcomes are written as the placer's recorder writes
them. The recorded start times are arbitrary (the rebuild reads only submit, the request, the
estimate and end - start), so each job starts at its submit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine

from shared.schemas import JobOutcome, NodeStates, PendingJob, PendingJobs, QueueSnapshot
from shared.store import record_jobs, record_outcome
from tests.schemas.message_factories import node

SPEC = """\
name = "small-16"
[[node_groups]]
name = "v100"
gpu_type = "V100M32"
count = 4
gpus = 4
cpus = 64
mem_gib = 512
"""


def spec_file(folder: Path) -> Path:
    path = folder / "small-16.toml"
    path.write_text(SPEC)
    return path


def history(
    n_jobs: int, seed: int = 0, load: float = 1.1, runtime_scale: float = 1.0
) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 1, 2, 4, 8], size=n_jobs)
    runtime = np.round(runtime_scale * (np.exp(rng.normal(6.0, 1.2, size=n_jobs)) + 10))
    rate = load * 16 / float(np.mean(gpus * runtime))
    submit = np.round(np.cumsum(rng.exponential(1 / rate, size=n_jobs)), 3)
    estimate = np.round(runtime * rng.uniform(1.0, 3.0, size=n_jobs))
    return [
        {
            "submit": float(submit[k]),
            "runtime": float(runtime[k]),
            "estimate": float(estimate[k]),
            "gpus": int(gpus[k]),
        }
        for k in range(n_jobs)
    ]


async def record_history(
    engine: AsyncEngine, cluster: str, jobs: list[dict[str, float]], prefix: str = "j"
) -> None:
    """One snapshot holding every job as pending, then one outcome per job."""
    pending = tuple(
        PendingJob(
            job_id=f"{prefix}{k}",
            submit_s=j["submit"],
            gpus=int(j["gpus"]),
            est_runtime_s=j["estimate"],
            user=f"u{k % 3}",
            partition="main",
        )
        for k, j in enumerate(jobs)
    )
    snap = QueueSnapshot(
        cluster=cluster,
        correlation_id=f"{cluster}-{prefix}-s",
        time=0.0,
        sequence=1,
        pending=PendingJobs.of(pending),
        nodes=NodeStates.of((node("n0", "v100", 4, 64000, 524288),)),
    )
    async with engine.begin() as conn:
        await record_jobs(conn, snap)
        for k, j in enumerate(jobs):
            await record_outcome(
                conn,
                JobOutcome(
                    cluster=cluster,
                    correlation_id=snap.correlation_id,
                    job_id=f"{prefix}{k}",
                    submit_s=j["submit"],
                    start_s=j["submit"],
                    end_s=j["submit"] + j["runtime"],
                    gpus=int(j["gpus"]),
                ),
            )
