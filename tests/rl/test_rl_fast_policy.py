"""The trained checkpoints give the same priorities through the fast decision path, and blocked
cycles are skipped without changing a schedule.

1. ``data/recorded_decisions.npz``: ten decisions recorded with the code before the fast path
   (commit 229f20b: ``compute_features``, ``FeatureSampler.select``, ``ActorCritic.priorities``)
   on Philly, the RLTune synthetic trace and the 85%-filled Philly and Alibaba clusters of
   ``bench/features_cost.py``: their views, observation, critic features and priorities, with the
   checkpoint that ranked them. The fast path must reproduce all three exactly.
2. Every checkpoint of ``docs/results/runs`` schedules a window of the embedded workload greedily;
   at each decision the fast path's priorities are compared with the batch path's on the same
   state.
3. Skipping blocked cycles leaves greedy schedules unchanged, records no blocked decision, and
   training episodes stay reproducible from their seed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shared.features import ClusterView, FeatureSampler, QueueView, SamplingState, compute_features
from shared.features.catalog import DEFAULT_FEATURE_SET
from shared.features.fast import WorkloadFeaturizer
from shared.metrics import chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.model.fast import FastActor, greedy_priorities
from shared.policies import make_policy
from shared.rl.episodes import EpisodeRunner
from shared.rl.policy import LearnedPolicy
from shared.rl.setup import RunSetup, load_runner, load_trained
from shared.scheduling.binding import BoundWorkload
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "results" / "runs"
RECORDED = Path(__file__).resolve().parent / "data" / "recorded_decisions.npz"
CHECKPOINTS = sorted(p.parent.parent.name for p in RUNS.glob("*/checkpoint/card.json"))


def test_recorded_decisions_get_the_same_priorities() -> None:
    data = np.load(RECORDED)
    meta = json.loads(str(data["meta"]))
    models: dict[str, ActorCritic] = {}
    assert len(meta) == 10
    for k, m in enumerate(meta):
        if m["checkpoint"] not in models:
            models[m["checkpoint"]] = load_trained(RUNS / m["checkpoint"] / "checkpoint")[0]
        model = models[m["checkpoint"]]
        qv = QueueView(
            **{
                name: data[f"{k}/queue/{name}"]
                for name in QueueView.__dataclass_fields__
                if f"{k}/queue/{name}" in data
            },
            n_vcs=m["n_vcs"],
        )
        cv = ClusterView(
            **{
                name: data[f"{k}/cluster/{name}"]
                for name in ClusterView.__dataclass_fields__
                if f"{k}/cluster/{name}" in data
            },
            node_slack=m["node_slack"],
        )
        featurizer = WorkloadFeaturizer(qv, cv.emptied())  # the queue's jobs as the workload
        o = featurizer.observe(np.arange(len(qv)), m["now"], cv, FeatureSampler())
        assert np.array_equal(o.obs, data[f"{k}/obs"]), m["tag"]
        assert np.array_equal(o.critic, data[f"{k}/critic"]), m["tag"]
        priorities = greedy_priorities(FastActor(model).scores(o.obs), model.config.top_k)
        assert np.array_equal(priorities, data[f"{k}/priorities"]), m["tag"]
        assert sorted(priorities.tolist()) == list(range(1, len(qv) + 1))


class _Checked(LearnedPolicy):
    """A greedy policy that also ranks every decision through the batch path and compares."""

    checked = 0

    def _decide(
        self,
        jobs: np.ndarray,
        now: float,
        may_skip: bool,
        base_order: np.ndarray | None = None,
        keys: np.ndarray | None = None,
    ) -> tuple[np.ndarray, bool] | None:
        decided = super()._decide(jobs, now, may_skip, base_order, keys)
        queue, cluster = self.builder.views(self.state, jobs, self.running)
        values = compute_features(queue, cluster, now, self.feature_config, self.sampler.pool)
        obs, _ = self.sampler.select(values).apply(values)
        assert self.model is not None
        with torch.no_grad():
            expected = self.model.priorities(
                torch.from_numpy(obs.astype(np.float32))[None], torch.ones(1, len(jobs), dtype=torch.bool)
            )[0].numpy()
        if decided is None:
            assert may_skip and not values.column("can_schedule_now").any()
        else:
            assert np.array_equal(decided[0], expected)
            self.checked += 1
        return decided


@pytest.fixture(scope="module")
def embedded() -> tuple[BoundWorkload, EpisodeRunner]:
    work, runner = load_runner(None, None, RunSetup(n_jobs=1500, target_load=1.1, warmup=64))
    return work.bound, runner


@pytest.mark.parametrize("run", CHECKPOINTS)
def test_checkpoints_rank_simulated_decisions_as_the_batch_path(
    run: str, embedded: tuple[BoundWorkload, EpisodeRunner]
) -> None:
    bound, runner = embedded
    model, _, schema = load_trained(RUNS / run / "checkpoint")
    if schema.feature_set != DEFAULT_FEATURE_SET:  # the model's own pool, predictions attached
        setup = RunSetup(n_jobs=1500, target_load=1.1, warmup=64, feature_set=schema.feature_set)
        work, runner = load_runner(None, None, setup)
        bound = work.bound
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=3)[0]
    policy = _Checked(
        model,
        make_policy("fcfs"),
        warm_until=float(bound.jobs.submit[window.start]),
        sampler=FeatureSampler(schema.sampling),
    )
    runner.simulate(policy, window)
    assert policy.checked >= 20


def test_blocked_skip_keeps_greedy_schedules(embedded: tuple[BoundWorkload, EpisodeRunner]) -> None:
    bound, runner = embedded
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig()).eval()
    with torch.no_grad():  # scores far apart, so orders differ from the base order
        model.actor[-1].weight.mul_(300.0)
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=2)[0]
    for config in (SimConfig(), SimConfig(backfill="greedy"), SimConfig.paper()):
        starts, skipped = [], []
        for skip in (True, False):
            policy = LearnedPolicy(
                model,
                make_policy("fcfs"),
                warm_until=float(bound.jobs.submit[window.start]),
                skip_blocked=skip,
            )
            sim = Simulator(bound, policy, config)
            result = sim.run(runner.job_range(window), (window.start, window.stop))
            starts.append(result.start)
            skipped.append(policy.skipped)
        np.testing.assert_array_equal(starts[0], starts[1])
        assert skipped[0] > 0 and skipped[1] == 0, config


def test_blocked_decisions_are_not_recorded_and_episodes_repeat(
    embedded: tuple[BoundWorkload, EpisodeRunner],
) -> None:
    """Skipped cycles are not actions: every recorded decision has a job that fits now (its
    critic's ``runnable``, the mean of ``can_schedule_now``, is > 0), and the same seed gives the
    same decisions, orders and reward."""
    bound, runner = embedded
    torch.manual_seed(0)
    model = ActorCritic(ModelConfig()).eval()
    train, _ = chronological_split(len(bound.jobs), 0.8)
    window = make_windows(train, 256, 1, seed=3)[0]
    a = runner.run(model, window, "sample", seed=5)
    b = runner.run(model, window, "sample", seed=5)
    assert a.skipped > 0 and len(a.decisions) > 20
    # the critic's "runnable" sits in the same column whatever the state
    sampler = FeatureSampler()
    columns = {
        sampler.select_state(SamplingState(frag, multi)).critic_names.index("runnable")
        for frag in (0.0, 1.0)
        for multi in (0.0, 1.0)
    }
    assert len(columns) == 1
    runnable = columns.pop()
    for d in a.decisions:
        assert d.critic[runnable] > 0 or len(d.obs) >= model.config.max_queue
    assert a.reward == b.reward and len(a.decisions) == len(b.decisions)
    for x, y in zip(a.decisions, b.decisions, strict=True):
        assert np.array_equal(x.obs, y.obs) and np.array_equal(x.order, y.order) and x.time == y.time


def test_skip_defaults() -> None:
    """Skipped by default: greedy and numpy-sampled runs; not: a controller (it sees every cycle)
    and torch-sampled runs (``hylo evaluate`` repeats its earlier random draws)."""
    model = ActorCritic(ModelConfig()).eval()
    fcfs = make_policy("fcfs")
    assert LearnedPolicy(model, fcfs).skip_blocked
    assert LearnedPolicy(model, fcfs, mode="sample", generator=np.random.default_rng(0)).skip_blocked
    assert not LearnedPolicy(model, fcfs, mode="sample", generator=torch.Generator()).skip_blocked
    assert not LearnedPolicy(model, fcfs, mode="sample").skip_blocked
    assert not LearnedPolicy(None, fcfs, controller=lambda o, c, t: np.arange(len(o))).skip_blocked
