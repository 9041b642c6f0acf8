"""Bounded scoring (issue 22, item 3): the model ranks the first K jobs in base order
(``HYLO_MODEL_CANDIDATES``), the rest keep the base policy's order, exactly as the simulator's
``LearnedPolicy(max_queue=K)`` orders them; the model never sees more than K jobs, however long the
queue."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from services.featurizer.stage import FeaturizerStage
from services.prioritizer.models import ModelHolder
from services.prioritizer.settings import PrioritizerSettings
from services.prioritizer.stage import PrioritizerStage
from shared.domain.cluster import load_cluster_spec
from shared.model import ActorCritic, ModelConfig
from shared.policies import make_policy
from shared.rl.policy import LearnedPolicy
from shared.scheduling.binding import bind_jobs
from shared.schemas import FeatureMatrix, PriorityVector, QueueSnapshot
from shared.workload import generate_for_cluster
from tests.stages.simsnap import fill_cluster, simulator_order, snapshot_of

K = 16


class Counting(ActorCritic):
    """An actor-critic that records how many jobs each call scored."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.sizes: list[int] = []

    def scores(self, obs: Tensor, mask: Tensor) -> Tensor:
        self.sizes.append(int(obs.shape[1]))
        return super().scores(obs, mask)


def order_of(v: PriorityVector) -> list[str]:
    ids = v.matrix.job_ids
    return [ids[k] for k in np.argsort(-np.asarray(v.priorities), kind="stable")]


def simulated(queued_count: int, running_count: int = 150, seed: int = 5) -> tuple[Any, ...]:
    """A simulated cluster of the embedded spec with ``running_count`` jobs running and the next
    ``queued_count`` queued: (spec, bound workload, estimates, the simulation, queued rows, now)."""
    spec = load_cluster_spec("embedded")
    table = generate_for_cluster(spec, running_count + queued_count, seed=seed)
    table = table.with_fields(vc=np.zeros(len(table), dtype=np.int64))
    table.vcs = ["default"]
    bound = bind_jobs(table, spec)
    jobs = bound.jobs
    est = np.nan_to_num(jobs.estimate, nan=3600.0)
    running = list(range(running_count))
    sim = fill_cluster(bound, running, start={j: float(jobs.submit[j]) for j in running}, estimate=est)
    queued = np.arange(running_count, running_count + queued_count)
    now = float(jobs.submit[queued].max()) + 5.0
    return spec, bound, est, sim, queued, now


def test_the_model_ranks_the_first_k_and_the_rest_keep_base_order() -> None:
    spec, bound, _, sim, queued, now = simulated(60)
    jobs = bound.jobs
    torch.manual_seed(7)
    model = Counting(ModelConfig(max_queue=256, top_k=8))  # its own window holds the whole queue
    expected = simulator_order(
        LearnedPolicy(model, make_policy("fcfs"), mode="greedy", max_queue=K), sim, queued, now
    )

    snapshot = snapshot_of(sim, queued.tolist(), now, cluster="embedded")
    m = FeaturizerStage({"embedded": spec}).handle(snapshot)
    holder = ModelHolder()
    holder.install("v", model, base_policy="fcfs")

    async def source(_: FeatureMatrix) -> QueueSnapshot | None:
        return snapshot

    stage = PrioritizerStage("fcfs", holder=holder, specs={"embedded": spec}, snapshots=source, candidates=K)
    model.sizes.clear()
    v = asyncio.run(stage.handle(m))
    assert (v.policy, v.fallback) == ("model", None)
    assert model.sizes == [K]  # the model saw the K candidates only
    assert order_of(v) == expected  # the simulator's order with the same cut
    fcfs = [str(jobs.ids[q]) for q in queued]
    assert order_of(v)[K:] == [j for j in fcfs if j not in expected[:K]]  # the rest in base order
    assert sum(s is not None for s in v.scores) == K  # raw scores for the candidates, null elsewhere
    assert order_of(v)[:K] != fcfs[:K]  # the model did reorder its candidates

    # 0: the model's own window (256 here: the whole queue, its rows taken from the matrix)
    whole = PrioritizerStage("fcfs", holder=holder, specs={"embedded": spec}, snapshots=source)
    model.sizes.clear()
    v_all = asyncio.run(whole.handle(m))
    assert model.sizes == [len(queued)] and all(s is not None for s in v_all.scores)


def test_a_long_queue_costs_the_model_k_jobs() -> None:
    """2,000 queued jobs, K = 16: the model scores 16; the vector ranks all 2,000."""
    spec, _, _, sim, queued, now = simulated(2000, running_count=100, seed=3)
    snapshot = snapshot_of(sim, queued.tolist(), now, cluster="embedded")
    m = FeaturizerStage({"embedded": spec}).handle(snapshot)
    model = Counting(ModelConfig(max_queue=256, top_k=8))
    holder = ModelHolder()
    holder.install("v", model, base_policy="fcfs")

    async def source(_: FeatureMatrix) -> QueueSnapshot | None:
        return snapshot

    stage = PrioritizerStage("fcfs", holder=holder, specs={"embedded": spec}, snapshots=source, candidates=K)
    stage.prepare(snapshot)  # the window's features ahead, as the service does
    v = asyncio.run(stage.handle(m))
    assert v.policy == "model" and model.sizes == [K]
    assert len(v.priorities) == len(m.job_ids) == 2000 and len(set(v.priorities)) == 2000


def test_the_candidate_count_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PrioritizerSettings().model_candidates == 0
    monkeypatch.setenv("HYLO_MODEL_CANDIDATES", "512")
    assert PrioritizerSettings().model_candidates == 512
    with pytest.raises(ValueError, match="candidates must be >= 0"):
        PrioritizerStage("fcfs", candidates=-1)
