"""What the store records beyond the order (issue 21): the model's raw scores, the placer's status and
reservation, the raw values behind the features, where a job really ran, and the cluster's spec.

Each part is followed from where it is known to where it is written: the featurizer's raw pool
values and the prioritizer's scores through the placer's decision into ``decisions``; the simulated
cluster's and the Slurm adapter's outcomes with their nodes and GPU type; the recorder's spec.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sqlalchemy import select

from services.adapter_sim.cluster import SimulatedCluster
from services.adapter_slurm.model import SlurmJob
from services.adapter_slurm.outcomes import OutcomeTracker, parse_sacct, where_it_ran
from services.featurizer.stage import FeaturizerStage
from services.placer.recorder import recorder_routes
from services.placer.stage import PlacerStage
from services.prioritizer.models import ModelHolder
from services.prioritizer.stage import PrioritizerStage
from shared.domain.cluster import parse_cluster_spec
from shared.domain.jobs import build_table
from shared.model import ActorCritic
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.scheduling.state import Alloc
from shared.schemas import PriorityVector
from shared.schemas.views import RAW_COLUMNS
from shared.sim.applied import ClusterView, run_applied
from shared.sim.config import SimConfig
from shared.store import Cluster, Decision, create_engine, record_decision, upgrade
from tests.stages.stage_helpers import node, pend, run, snap, two_group_spec

SPEC = two_group_spec()


def _easy_snapshot() -> Any:
    """A-group only, now = 100: ``head`` (8 A GPUs) waits for its reservation at t = 200, ``long``
    waits (it would delay the head), ``short`` starts on a-0 (``test_placer_stage``'s EASY case)."""
    nodes = [
        node("a-0", "a"),
        node("a-1", "a", gpus=0, cpus=0, mem=0),
        node("b-0", "b", gpus=0, cpus=0, mem=0),
    ]
    running = [run("r1", ["a-1"], 4, end=200.0), run("r2", ["b-0"], 8, end=5000.0)]
    jobs = [
        pend("head", 8, gpu_types=("A",), submit=0.0),
        pend("long", 4, gpu_types=("A",), submit=1.0, est=1000.0),
        pend("short", 2, gpu_types=("A",), submit=2.0, est=50.0),
        pend("any", 1, submit=3.0),
    ]
    return snap(jobs, nodes, running)


def test_the_featurizer_sends_each_jobs_pool_in_its_own_units() -> None:
    m = FeaturizerStage({"two": SPEC}).handle(_easy_snapshot())
    assert m.raw_columns == RAW_COLUMNS
    raw = {
        j: dict(zip(m.raw_columns, row, strict=True)) for j, row in zip(m.job_ids, m.raw_values, strict=True)
    }
    # A jobs: group a (2 nodes x 4 GPUs, a-0 idle, a-1 full); any type: also b (1 x 8, full)
    assert raw["head"] == {"pool_gpus": 8.0, "pool_free_gpus": 4.0, "pool_nodes": 2.0, "pool_idle_nodes": 1.0}
    assert raw["any"] == {"pool_gpus": 16.0, "pool_free_gpus": 4.0, "pool_nodes": 3.0, "pool_idle_nodes": 1.0}


def _scored_vector(m: Any) -> PriorityVector:
    """The matrix ranked head, long, short, any, with scores for the first three (a model window)."""
    order = {"head": 4.0, "long": 3.0, "short": 2.0, "any": 1.0}
    scores = {"head": 1.5, "long": 0.25, "short": -0.5, "any": None}
    return PriorityVector(
        cluster=m.cluster,
        correlation_id=m.correlation_id,
        matrix=m,
        priorities=tuple(order[j] for j in m.job_ids),
        scores=tuple(scores[j] for j in m.job_ids),
        policy="model",
        model_version="v1",
        latencies_ms=dict(m.latencies_ms),
    )


def test_the_decision_and_its_rows_keep_scores_placer_status_and_raw_values(tmp_path: Path) -> None:
    s = _easy_snapshot()
    m = FeaturizerStage({"two": SPEC}).handle(s)
    d = PlacerStage({"two": SPEC}, placement="best-fit").handle(_scored_vector(m), s)
    rows = {p.job_id: p for p in d.placements}
    assert [p.job_id for p in d.placements] == ["head", "long", "short", "any"]
    assert [rows[j].score for j in ("head", "long", "short", "any")] == [1.5, 0.25, -0.5, None]
    assert rows["head"].raw_features["pool_gpus"] == 8.0 and rows["any"].raw_features["pool_nodes"] == 3.0

    async def stored() -> dict[str, dict[str, Any]]:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
        await upgrade(engine)
        async with engine.begin() as conn:
            assert await record_decision(conn, d) == 4
        async with engine.connect() as conn:
            t = Decision.__table__
            got = {r.job_id: dict(r._mapping) for r in await conn.execute(select(t))}
        await engine.dispose()
        return got

    got = asyncio.run(stored())
    assert {j: (r["placer_status"], r["reserved_s"]) for j, r in got.items()} == {
        "head": ("reserved", 200.0),
        "long": ("waiting", None),
        "short": ("placed", None),
        "any": ("waiting", None),
    }
    assert {j: r["score"] for j, r in got.items()} == {"head": 1.5, "long": 0.25, "short": -0.5, "any": None}
    assert got["head"]["raw_features"] == rows["head"].raw_features
    assert {(r["placer"], r["solver_status"], r["model_version"]) for r in got.values()} == {
        ("best-fit", None, "v1")
    }


def test_the_prioritizer_sends_the_models_raw_scores_beside_its_priorities() -> None:
    m = FeaturizerStage({"two": SPEC}).handle(_easy_snapshot())
    holder = ModelHolder()
    stage = PrioritizerStage("fcfs", holder=holder)
    v = asyncio.run(stage.handle(m))
    assert v.policy == "fcfs" and v.scores == ()  # the base policy has no score to give
    torch.manual_seed(7)
    holder.install("v1", ActorCritic())
    v = asyncio.run(stage.handle(m))
    assert v.policy == "model" and len(v.scores) == len(m.job_ids)
    scores = [s for s in v.scores if s is not None]
    assert len(scores) == len(m.job_ids) and all(math.isfinite(s) for s in scores)
    # the priorities are the scores' greedy order (distinct scores: no tie)
    by_score = sorted(range(len(scores)), key=lambda i: -scores[i])
    by_priority = sorted(range(len(scores)), key=lambda i: -v.priorities[i])
    assert by_score == by_priority
    # a window of two: the others follow in base order, unscored
    holder.install("v2", ActorCritic(), max_queue=2)
    v = asyncio.run(stage.handle(m))
    assert v.policy == "model" and sum(s is not None for s in v.scores) == 2
    stage.close()


def test_the_simulated_cluster_reports_where_each_job_ran() -> None:
    spec = parse_cluster_spec(
        {
            "name": "mixed",
            "node_groups": [
                {"name": "big", "gpu_type": "V100", "count": 2, "gpus": 4, "cpus": 32, "mem_gib": 128},
                {"name": "small", "gpu_type": "T4", "count": 1, "gpus": 2, "cpus": 16, "mem_gib": 64},
            ],
        },
        "tests",
    )
    gpus = [8, 1, 2, 4, 1]
    runtime = [50.0, 20.0, 30.0, 10.0, 5.0]
    jobs = build_table(
        ids=[f"j{k}" for k in range(5)],
        submit=[float(k) for k in range(5)],
        runtime=runtime,
        estimate=runtime,
        gpus=gpus,
    )
    bound = bind_jobs(jobs, spec)
    estimate = np.asarray(runtime)
    base = make_policy("fcfs")
    cluster = SimulatedCluster(bound, estimate, base, SimConfig(), "mixed")
    started: dict[str, Alloc] = {}

    class Own:  # the cluster's own cycle decides every event
        def decide(self, view: ClusterView) -> dict[int, Alloc]:
            cluster.at(view)
            starts = cluster.own_cycle()
            started.update({cluster.builder.job_ids[j]: a for j, a in starts.items()})
            return starts

    applied = run_applied(bound, Own(), estimate, policy=base)
    cluster.note_end(applied.tail)
    outcomes = {o.job_id: o for o in cluster.outcomes()}
    assert set(outcomes) == {f"j{k}" for k in range(5)}
    for job, o in outcomes.items():
        a = started[job]
        group = spec.node_groups[a.group]
        assert o.nodes == tuple(f"{group.name}-{i}" for i in a.nodes)
        assert o.node_gpus == tuple(a.whole) and sum(o.node_gpus) == o.gpus
        assert o.gpu_type == group.gpu_type
    assert outcomes["j0"].nodes == ("big-0", "big-1") and outcomes["j0"].gpu_type == "V100"


def test_the_slurm_adapter_reports_nodes_and_gpu_type_from_squeue_and_sacct() -> None:
    types = {"p100-0": "P100", "p100-1": "P100", "k80-0": "K80"}
    assert where_it_ran(("p100-0",), 2, types) == {
        "nodes": ("p100-0",),
        "node_gpus": (2,),
        "gpu_type": "P100",
    }
    assert where_it_ran(("p100-1", "k80-0"), 4, types)["gpu_type"] == "K80+P100"
    assert where_it_ran(("other",), 1, types)["gpu_type"] is None
    finished = {f.job_id: f for f in parse_sacct("7|COMPLETED|1|2|3|p100-[0-1]\n8|COMPLETED|1|2|3|bad[x\n")}
    assert finished["7"].nodes == ("p100-0", "p100-1") and finished["8"].nodes == ()
    tracker = OutcomeTracker("slurm", None, accounting="none")
    job = SlurmJob(
        job_id="5",
        state="COMPLETED",
        priority=None,
        partition="gpu",
        qos="normal",
        user="u",
        submit_s=10.0,
        start_s=20.0,
        end_s=30.0,
        time_limit_s=60.0,
        cpus=1,
        mem_mib=100,
        node_count=1,
        nodes=("k80-0",),
        gpus=1,
        gpu_types=("k80",),
    )
    (out,) = tracker.update([job], 40.0, "c1", types)
    assert (out.nodes, out.node_gpus, out.gpu_type) == (("k80-0",), (1,), "K80")


def test_the_recorder_stores_its_clusters_spec(tmp_path: Path) -> None:
    async def main() -> Any:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}")
        await upgrade(engine)
        s = _easy_snapshot()
        m = FeaturizerStage({"two": SPEC}).handle(s)
        d = PlacerStage({"two": SPEC}, placement="best-fit").handle(_scored_vector(m), s)
        routes = {r.durable: r for r in recorder_routes(engine, {"two": SPEC})}
        await routes["recorder-decisions"].handle(d, None)  # type: ignore[arg-type]
        async with engine.connect() as conn:
            spec = (await conn.execute(select(Cluster.__table__.c.spec))).scalar_one()
        await engine.dispose()
        return spec

    assert parse_cluster_spec(asyncio.run(main()), "store") == SPEC
