"""Valid messages of every kind, small and deterministic, for schema, bus and store tests."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import numpy as np

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.schemas import (
    FeatureMatrix,
    JobOutcome,
    JobPlacement,
    Message,
    ModelVersion,
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    PlacementDecision,
    Placements,
    PriorityVector,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
)
from shared.schemas.numbers import DTYPES


def array_form(doc: Any) -> Any:
    """``doc`` (a decoded JSON document) with every packed column of numbers (``{"dtype", "base64"}``)
    and every dictionary-coded column (``{"values", "index"}``) of schema version 5, and every joined
    column of job ids (``{"joined"}``) of version 8, written as the JSON array of its entries
    instead: the version-4 form tests edit."""
    if isinstance(doc, list):
        return [array_form(v) for v in doc]
    if not isinstance(doc, dict):
        return doc
    if set(doc) == {"dtype", "base64"} and doc["dtype"] in DTYPES:
        return np.frombuffer(base64.b64decode(doc["base64"]), dtype=DTYPES[doc["dtype"]]).tolist()
    if set(doc) == {"joined"} and isinstance(doc["joined"], str):
        return doc["joined"].split(" ") if doc["joined"] else []
    if set(doc) == {"values", "index"}:
        return [doc["values"][i] for i in array_form(doc["index"])]
    return {k: array_form(v) for k, v in doc.items()}


SPEC_DOC = {
    "name": "tiny",
    "node_groups": [
        {
            "name": "v100",
            "gpu_type": "V100",
            "count": 2,
            "gpus": 8,
            "cpus": 32,
            "mem_gib": 256,
            "partitions": ["a", "b"],
        },
        {"name": "t4", "gpu_type": "T4", "count": 2, "gpus": 4, "cpus": 16, "mem_gib": 64},
    ],
}


def tiny_spec() -> ClusterSpec:
    return parse_cluster_spec(SPEC_DOC, "tests")


def node(name: str, group: str, gpus: int, cpus: int, mem: int, state: str = "up") -> NodeState:
    return NodeState.model_validate(
        {
            "name": name,
            "group": group,
            "free_gpus": gpus,
            "free_share_milli": 1000 if gpus else 0,
            "free_cpus_milli": cpus,
            "free_mem_mib": mem,
            "state": state,
        }
    )


def snapshot(
    cluster: str = "c1", correlation_id: str = "corr1", sequence: int = 1, n_jobs: int = 3
) -> QueueSnapshot:
    pending = tuple(
        PendingJob(
            job_id=f"j{i}",
            submit_s=float(i),
            gpus=1 + i % 4,
            est_runtime_s=600.0 * (i + 1),
            user=f"u{i % 2}",
            partition="a",
        )
        for i in range(n_jobs)
    )
    nodes = (
        node("v0", "v100", 8, 32000, 262144),
        node("v1", "v100", 4, 16000, 131072),
        node("t0", "t4", 0, 4000, 1024),
        node("t1", "t4", 4, 16000, 65536, state="drain"),
    )
    running = (RunningJob(job_id="r0", nodes=("v1",), gpus=4, start_s=0.0, est_end_s=3600.0),)
    return QueueSnapshot(
        cluster=cluster,
        correlation_id=correlation_id,
        time=100.0 + sequence,
        sequence=sequence,
        pending=PendingJobs.of(pending),
        running=RunningJobs.of(running),
        nodes=NodeStates.of(nodes),
    )


def features(snap: QueueSnapshot | None = None) -> FeatureMatrix:
    snap = snap or snapshot()
    ids = tuple(j.job_id for j in snap.pending)
    return FeatureMatrix(
        cluster=snap.cluster,
        correlation_id=snap.correlation_id,
        snapshot_time=snap.time,
        sequence=snap.sequence,
        snapshot_seq=1,
        feature_schema_hash="ab" * 32,
        jobs=snap.pending,
        columns=("wait", "gpus"),
        values=tuple((0.1 * i, 0.5) for i in range(len(ids))),
        cluster_columns=("free_gpus",),
        cluster_values=(0.3,),
        latencies_ms={"featurizer": 0.8},
    )


def priorities(fm: FeatureMatrix | None = None) -> PriorityVector:
    fm = fm or features()
    return PriorityVector(
        cluster=fm.cluster,
        correlation_id=fm.correlation_id,
        matrix=fm,
        priorities=tuple(float(len(fm.job_ids) - i) for i in range(len(fm.job_ids))),
        policy="model",
        model_version="m-1",
        latencies_ms={"featurizer": 0.8, "prioritizer": 2.0},
    )


def decision(
    cluster: str = "c1",
    correlation_id: str = "corr1",
    jobs: tuple[str, ...] = ("j0", "j1", "j2"),
    model_version: str | None = "m-1",
    sequence: int = 1,
) -> PlacementDecision:
    placements = tuple(
        JobPlacement(
            job_id=j,
            rank=r,
            priority=float(len(jobs) - r),
            nodes=("v0",) if r == 0 else (),
            mode="pack" if r == 0 else None,
            features={"wait": 0.1 * r, "gpus": 0.5},
        )
        for r, j in enumerate(jobs)
    )
    return PlacementDecision(
        cluster=cluster,
        correlation_id=correlation_id,
        snapshot_time=100.0 + sequence,
        sequence=sequence,
        policy="model" if model_version else "fcfs",
        model_version=model_version,
        placements=Placements.of(placements),
        latencies_ms={"featurizer": 0.8, "prioritizer": 2.0, "placer": 1.2},
    )


def outcome(cluster: str = "c1", job_id: str = "j0", correlation_id: str = "corr1") -> JobOutcome:
    return JobOutcome(
        cluster=cluster,
        correlation_id=correlation_id,
        job_id=job_id,
        submit_s=0.0,
        start_s=101.0,
        end_s=701.0,
        gpus=1,
    )


def model_version(cluster: str = "c1", version: str = "m-1", status: str = "candidate") -> ModelVersion:
    return ModelVersion.model_validate(
        {
            "cluster": cluster,
            "correlation_id": "model-announce",
            "version": version,
            "sha256": "0" * 64,
            "uri": "/models/m-1.pt",
            "status": status,
            "card": {"features": {"hash": "ab"}, "reward": "bsld"},
            "created_at": datetime(2026, 11, 1, tzinfo=UTC),
        }
    )


def every_message() -> list[Message]:
    snap = snapshot()
    fm = features(snap)
    return [snap, fm, priorities(fm), decision(), outcome(), model_version()]
