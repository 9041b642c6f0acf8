"""PrioritizerStage and ModelHolder: fallbacks with reasons, hot swap, and LearnedPolicy's order."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from services.featurizer.stage import FeaturizerStage
from services.prioritizer.models import ModelHolder, ModelLoadError, checkpoint_sha256
from services.prioritizer.stage import PrioritizerStage
from shared.domain.cluster import load_cluster_spec
from shared.features import FeatureSampler, FeatureSchema, SamplingConfig
from shared.model import ActorCritic, CardFeatures, ModelCard, ModelConfig, TrainingInfo, save_checkpoint
from shared.model.checkpoint import WEIGHTS_FILE, file_sha256
from shared.policies import make_policy
from shared.rl.policy import LearnedPolicy
from shared.scheduling.binding import bind_jobs
from shared.schemas import FeatureMatrix, ModelVersion, PriorityVector, QueueSnapshot
from shared.schemas.stage_error import StageError
from shared.workload import generate_for_cluster
from tests.stages.simsnap import fill_cluster, simulator_order, snapshot_of
from tests.stages.stage_helpers import node, pend, snap, two_group_spec

SPEC = two_group_spec()


def matrix(n: int = 4) -> FeatureMatrix:
    jobs = [pend(f"j{i}", 1 + i % 3, submit=float(10 - i), est=60.0 * (i + 1)) for i in range(n)]
    s = snap(jobs, [node("a-0", "a"), node("a-1", "a", gpus=0), node("b-0", "b", gpus=2)])
    return FeaturizerStage({"two": SPEC}).handle(s)


def prioritize(stage: PrioritizerStage, m: FeatureMatrix) -> PriorityVector:
    return asyncio.run(stage.handle(m))


def order_of(v: PriorityVector) -> list[str]:
    """Job ids, highest priority first."""
    ids = v.matrix.job_ids
    return [ids[k] for k in np.argsort(-np.asarray(v.priorities), kind="stable")]


class Raising(ActorCritic):
    def priorities(self, obs: Tensor, mask: Tensor) -> Tensor:
        raise RuntimeError("boom")


class Slow(ActorCritic):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.done = threading.Event()

    def priorities(self, obs: Tensor, mask: Tensor) -> Tensor:
        time.sleep(self.seconds)
        self.done.set()
        return super().priorities(obs, mask)


class Shapeless(ActorCritic):
    def priorities(self, obs: Tensor, mask: Tensor) -> Tensor:
        return torch.zeros((1, 1), dtype=torch.int64)


# -- no model, broken models ------------------------------------------------------------------------


def test_base_policy_decides_without_a_model() -> None:
    m = matrix()
    v = prioritize(PrioritizerStage("fcfs"), m)
    assert (v.policy, v.model_version, v.fallback) == ("fcfs", None, "no model loaded")
    # submit times 10, 9, 8, 7: FCFS runs j3 first; priorities are Q..1
    assert order_of(v) == ["j3", "j2", "j1", "j0"] and sorted(v.priorities) == [1.0, 2.0, 3.0, 4.0]
    assert set(v.latencies_ms) == {"featurize", "prioritize"}
    v = prioritize(PrioritizerStage("sjf"), m)  # estimates 60, 120, 180, 240 s: j0 first
    assert v.policy == "sjf" and order_of(v) == ["j0", "j1", "j2", "j3"]


def test_fallback_reasons() -> None:
    m = matrix()
    holder = ModelHolder()
    stage = PrioritizerStage("fcfs", holder=holder)
    holder.install("v1", ActorCritic(), schema_hash="ab" * 32)
    v = prioritize(stage, m)
    assert v.policy == "fcfs" and v.model_version is None
    assert v.fallback is not None and v.fallback.startswith("feature schema mismatch")

    holder.install("v2", Raising())
    v = prioritize(stage, m)
    assert v.fallback == "model v2 failed: RuntimeError: boom" and v.policy == "fcfs"

    holder.install("v3", Shapeless())
    v = prioritize(stage, m)
    assert v.fallback is not None and "model v3 returned 1 priorities" in v.fallback

    lacking = m.model_copy(update={"columns": ("gpus", *m.columns[1:-1], "other")})
    holder.install("v4", ActorCritic())
    v = prioritize(stage, FeatureMatrix.model_validate(dict(lacking)))
    assert v.fallback is not None and "lacks columns the model needs: ways" in v.fallback
    assert order_of(v) == ["j3", "j2", "j1", "j0"]  # the base policy's order


def test_a_model_slower_than_the_deadline_falls_back_then_reports_busy() -> None:
    m = matrix()
    holder = ModelHolder()
    slow = Slow(1.0)
    holder.install("slow", slow)
    stage = PrioritizerStage("fcfs", deadline_ms=20.0, holder=holder)
    t0 = time.perf_counter()
    v = prioritize(stage, m)
    assert time.perf_counter() - t0 < 0.8  # did not wait for the model
    assert v.policy == "fcfs" and v.fallback == "model slow missed the 20 ms deadline"
    v = prioritize(stage, m)  # the first call still runs: no second thread piles up
    assert v.fallback == "model busy: an earlier call is still running past its deadline"
    assert slow.done.wait(5.0)
    inflight = stage._inflight
    assert inflight is not None
    inflight.result(timeout=5.0)  # the slow call finishes in its thread; then the model is free again
    holder.install("fast", ActorCritic())
    v = prioritize(stage, m)
    assert (v.policy, v.model_version, v.fallback) == ("model", "fast", None)
    stage.close()


def test_a_model_ranks_and_the_vector_says_so() -> None:
    m = matrix(6)
    holder = ModelHolder()
    torch.manual_seed(0)
    holder.install("v1", ActorCritic())
    v = prioritize(PrioritizerStage("fcfs", holder=holder), m)
    assert (v.policy, v.model_version, v.fallback) == ("model", "v1", None)
    assert sorted(v.priorities) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_multifactor_needs_the_spec_and_unknown_policies_are_refused() -> None:
    m = matrix()
    with pytest.raises(StageError, match="multifactor needs the cluster spec"):
        prioritize(PrioritizerStage("multifactor"), m)
    v = prioritize(PrioritizerStage("multifactor", specs={"two": SPEC}), m)
    assert v.policy == "multifactor" and len(v.priorities) == 4
    with pytest.raises(ValueError, match="true runtimes"):
        PrioritizerStage("sjf-oracle")


# -- loading and hot swap -----------------------------------------------------------------------------


def save(folder: Path, seed: int, sampling: SamplingConfig | None = None) -> Path:
    torch.manual_seed(seed)
    model = ActorCritic(ModelConfig())
    schema = FeatureSchema.current(sampling=sampling)
    fixed = FeatureSampler(schema.sampling).fixed()
    card = ModelCard(
        model=model.config,
        features=CardFeatures(
            obs=fixed.observation_names, critic=fixed.critic_names, schema_hash=schema.hash
        ),
        training=TrainingInfo(
            trace="t",
            cluster="two",
            base_policy="fcfs",
            metric="wait",
            seed=seed,
            epochs=0,
            extra={"feature_schema": schema.to_dict()},
        ),
    )
    save_checkpoint(folder, model, card)
    return folder


def announce(version: str, folder: Path | str, sha: str | None = None) -> ModelVersion:
    return ModelVersion(
        cluster="two",
        correlation_id=f"announce-{version}",
        version=version,
        sha256=sha or checkpoint_sha256(folder),
        uri=str(folder),
        status="current",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_hot_swap_and_a_failing_load_keeps_the_current_model(tmp_path: Path) -> None:
    m = matrix()
    holder = ModelHolder()
    stage = PrioritizerStage("fcfs", holder=holder)
    v1, v2 = save(tmp_path / "v1", 1), save(tmp_path / "v2", 2)

    holder.load(announce("v1", v1))
    assert holder.current is not None and holder.current[0] == "v1"
    assert prioritize(stage, m).model_version == "v1"
    # the weights' sha256 pins a checkpoint too, and file:// and a file of the checkpoint are accepted
    holder.load(announce("v2", f"file://{v2 / 'card.json'}", sha=file_sha256(v2 / WEIGHTS_FILE)))
    first = holder.loaded
    assert prioritize(stage, m).model_version == "v2"
    holder.load(announce("v2", f"file://{v2 / 'card.json'}", sha=file_sha256(v2 / WEIGHTS_FILE)))
    assert holder.loaded is first  # a redelivered announcement changes nothing

    bad = [
        (announce("v3", v1, sha="0" * 64), "matches neither"),
        (announce("v4", tmp_path / "nowhere", sha="0" * 64), "does not exist"),
        (announce("v5", "https://models.example/v5", sha="0" * 64), "only local paths"),
        (announce("v6", save(tmp_path / "v6", 6, SamplingConfig(mode="fixed"))), "the featurizer computes"),
    ]
    for version, message in bad:
        with pytest.raises(ModelLoadError, match=message):
            holder.load(version)
        assert holder.current is not None and holder.current[0] == "v2"
        assert holder.last_error is not None and message in holder.last_error
        assert prioritize(stage, m).model_version == "v2"

    (v1 / WEIGHTS_FILE).write_bytes(b"not torch")  # tampered after its card was written
    with pytest.raises(ModelLoadError, match="sha256"):
        holder.load(announce("v7", v1))
    assert holder.current is not None and holder.current[0] == "v2"

    holder.clear()
    assert holder.current is None and prioritize(stage, m).fallback == "no model loaded"


def test_a_checkpoint_trained_on_fixed_sampling_loads_for_a_matching_featurizer(tmp_path: Path) -> None:
    fixed = SamplingConfig(mode="fixed")
    folder = save(tmp_path / "fixed", 3, fixed)
    holder = ModelHolder(FeatureSchema.current(sampling=fixed))
    holder.load(announce("fixed", folder))
    s = snap([pend("a", 1), pend("b", 2, submit=1.0)], [node("a-0", "a"), node("b-0", "b")])
    m = FeaturizerStage({"two": SPEC}, sampling=fixed).handle(s)
    v = prioritize(PrioritizerStage("fcfs", holder=holder), m)
    assert (v.policy, v.model_version) == ("model", "fixed")
    # a default featurizer's matrix is not fed to it
    m2 = FeaturizerStage({"two": SPEC}).handle(s)
    assert prioritize(PrioritizerStage("fcfs", holder=holder), m2).fallback.startswith(
        "feature schema mismatch"
    )  # type: ignore[union-attr]


# -- the same order as in training ---------------------------------------------------------------------


@pytest.mark.parametrize(("max_queue", "with_spec"), [(16, True), (256, False)])
def test_model_order_equals_learned_policy_in_the_simulator(max_queue: int, with_spec: bool) -> None:
    """The stage on a snapshot of a simulated decision orders the queue as ``LearnedPolicy`` (greedy)
    does in the simulator: the model's window in base order (truncated at 16 of 60 jobs, features
    recomputed over the window) or the whole queue (the matrix rows)."""
    spec = load_cluster_spec("embedded")
    table = generate_for_cluster(spec, 300, seed=5)
    table = table.with_fields(vc=np.zeros(len(table), dtype=np.int64))
    table.vcs = ["default"]
    bound = bind_jobs(table, spec)
    jobs = bound.jobs
    est = np.nan_to_num(jobs.estimate, nan=3600.0)
    running = list(range(150))
    sim = fill_cluster(bound, running, start={j: float(jobs.submit[j]) for j in running}, estimate=est)
    queued = np.arange(150, 210)
    now = float(jobs.submit[queued].max()) + 5.0

    torch.manual_seed(7)
    model = ActorCritic(ModelConfig(max_queue=max_queue, top_k=8))
    expected = simulator_order(LearnedPolicy(model, make_policy("fcfs"), mode="greedy"), sim, queued, now)

    snapshot = snapshot_of(sim, queued.tolist(), now, cluster="embedded")
    m = FeaturizerStage({"embedded": spec}).handle(snapshot)
    holder = ModelHolder()
    holder.install("v", model, base_policy="fcfs")
    asked: list[str] = []

    async def source(matrix: FeatureMatrix) -> QueueSnapshot | None:
        asked.append(matrix.correlation_id)
        return snapshot

    specs = {"embedded": spec} if with_spec else None
    stage = PrioritizerStage("fcfs", holder=holder, specs=specs, snapshots=source)
    v = prioritize(stage, m)
    assert (v.policy, v.fallback) == ("model", None)
    assert asked == ([snapshot.correlation_id] if max_queue < len(queued) else [])
    assert order_of(v) == expected
    fcfs = [str(jobs.ids[q]) for q in queued]
    assert expected != fcfs  # the model did reorder
    if max_queue < len(queued):
        assert order_of(v)[max_queue:] == [j for j in fcfs if j not in expected[:max_queue]]
        # without its snapshot the window's features cannot be computed as in training: base policy
        blind = PrioritizerStage("fcfs", holder=holder, specs=specs)
        fallback = prioritize(blind, m)
        assert fallback.policy == "fcfs" and fallback.fallback is not None
        assert "unavailable" in fallback.fallback and order_of(fallback) == fcfs
        if with_spec:
            # the window prepared from the snapshot before the matrix gives the same order, once
            ahead = PrioritizerStage("fcfs", holder=holder, specs=specs, snapshots=source)
            computed: list[int] = []
            compute = ahead._window_from_snapshot

            def counted(*args: Any) -> Any:
                computed.append(1)
                return compute(*args)

            ahead._window_from_snapshot = counted  # type: ignore[method-assign]
            ahead.prepare(snapshot)
            window = ahead._windows[("embedded", snapshot.correlation_id)]
            assert window.job_ids == m.job_ids and len(window.head) == max_queue
            assert order_of(prioritize(ahead, m)) == expected and not ahead._windows
            assert len(computed) == 1  # by prepare only
            # prepared for another model version: not used (computed again, same order)
            ahead.prepare(snapshot)
            holder.install("v2", model, base_policy="fcfs")
            assert order_of(prioritize(ahead, m)) == expected and not ahead._windows
            assert len(computed) == 3
