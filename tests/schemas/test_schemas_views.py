"""QueueSnapshot -> QueueView / ClusterView: the arrays, binding's eligibility rules, and errors."""

from __future__ import annotations

import numpy as np
import pytest

from shared.domain.jobs import build_table
from shared.features import compute_features
from shared.scheduling.binding import bind_jobs
from shared.schemas import (
    NodeState,
    NodeStates,
    PendingJob,
    PendingJobs,
    QueueSnapshot,
    RunningJob,
    RunningJobs,
    snapshot_views,
)
from tests.schemas.message_factories import node, snapshot, tiny_spec


def job(job_id: str, gpus: int, **kw: object) -> PendingJob:
    values: dict[str, object] = {"job_id": job_id, "submit_s": 10.0, "gpus": gpus, "est_runtime_s": 3600.0}
    values.update(kw)
    return PendingJob.model_validate(values)


def snap(
    pending: tuple[PendingJob, ...],
    nodes: tuple[NodeState, ...] | None = None,
    running: tuple[RunningJob, ...] = (),
) -> QueueSnapshot:
    return QueueSnapshot(
        cluster="tiny",
        correlation_id="c",
        time=50.0,
        sequence=1,
        pending=PendingJobs.of(pending),
        nodes=NodeStates.of(nodes) if nodes else snapshot().nodes,
        running=RunningJobs.of(running),
    )


def test_arrays_follow_the_spec_and_fill_defaults() -> None:
    s = snapshot()
    views = snapshot_views(s, tiny_spec())
    q, c = views.queue, views.cluster
    assert views.job_ids == ("j0", "j1", "j2") and views.now == s.time
    assert q.gpus.tolist() == [1, 2, 3]
    assert q.cpus_milli.tolist() == [4000, 8000, 12000]  # 4 CPUs per GPU by default
    assert q.mem_mib.tolist() == [16384, 32768, 49152]
    assert q.user.tolist() == [0, 1, 0] and views.user_names == ("u0", "u1")
    assert views.vc_names[q.vc[0]] == "a" and q.n_vcs == 2
    assert q.eligible.tolist() == [[True, True]] * 3
    # nodes in spec order; the drained t4 node counts as having nothing free
    assert c.free_gpus.tolist() == [8, 4, 0, 0]
    assert c.free_cpus_milli.tolist() == [32000, 16000, 4000, 0]
    assert c.run_group.tolist() == [0] and c.run_gpus.tolist() == [4.0] and c.run_end_s.tolist() == [3600.0]
    assert c.idle_by_group.tolist() == [1, 0]
    values = compute_features(q, c, views.now)
    assert values.job.shape[0] == 3 and np.isfinite(values.job).all()


def test_eligibility_and_exclusions_match_the_simulators_binding() -> None:
    pending = (
        job("any", 2),
        job("t4-only", 1, gpu_types=("T4",)),
        job("p-b", 4, partition="b"),
        job("p-c", 4, partition="c"),  # only the t4 group (no partitions) takes it
        job("huge", 64),
        job("cpu-only", 0),
        job("share", 1, gpu_milli=250),
        job("a100", 1, gpu_types=("A100",)),
        job("fat", 4, gpu_types=("T4",), mem_mib=200_000),
    )
    spec = tiny_spec()
    views = snapshot_views(snap(pending), spec)
    excluded = {e.job_id: e.reason for e in views.excluded}
    assert set(excluded) == {"huge", "cpu-only", "a100", "fat"}
    assert "0 GPUs" in excluded["cpu-only"] and "A100 not in cluster" in excluded["a100"]

    types, vcs = [(), ("T4",), ("A100",)], ["default", "a", "b", "c"]
    table = build_table(
        ids=[j.job_id for j in pending],
        submit=[0.0] * len(pending),
        runtime=[1.0] * len(pending),
        gpus=[j.gpus for j in pending],
        gpu_milli=[j.gpu_milli for j in pending],
        type_set=[types.index(tuple(j.gpu_types)) for j in pending],
        type_sets=types,
        mem_mib=[j.mem_mib for j in pending],
        vc=[vcs.index(j.partition) for j in pending],
        vcs=vcs,
    )
    bound = bind_jobs(table, spec)
    expected = {
        str(i): [g in bound.class_groups[k] for g in range(2)]
        for i, k in zip(bound.jobs.ids, bound.job_class, strict=True)
    }
    got = {jid: row.tolist() for jid, row in zip(views.job_ids, views.queue.eligible, strict=True)}
    assert got == expected
    assert got["any"] == [False, True]  # partition 'default' is not one of the v100 group's
    assert bound.excluded_count == len(excluded)


def test_missing_nodes_count_as_full_and_bad_nodes_are_named() -> None:
    spec = tiny_spec()
    views = snapshot_views(snap((job("a", 1),), nodes=(node("t9", "t4", 4, 16000, 65536),)), spec)
    assert views.cluster.free_gpus.tolist() == [0, 0, 4, 0]
    with pytest.raises(ValueError, match="node 'x' is in group 'gpu-z', which the cluster spec lacks"):
        snapshot_views(snap((job("a", 1),), nodes=(node("x", "gpu-z", 1, 1, 1),)), spec)
    with pytest.raises(ValueError, match="node 'big': free_gpus 16 exceeds its group's capacity 4"):
        snapshot_views(snap((job("a", 1),), nodes=(node("big", "t4", 16, 1, 1),)), spec)
    three = tuple(node(f"n{i}", "t4", 0, 0, 0) for i in range(3))
    with pytest.raises(ValueError, match="3 nodes in group 't4', the spec has 2"):
        snapshot_views(snap((job("a", 1),), nodes=three), spec)


def test_empty_queue_gives_empty_views() -> None:
    views = snapshot_views(snap(()), tiny_spec())
    assert len(views.queue) == 0 and views.queue.eligible.shape == (0, 2)
