"""The warm start on the ``predicted`` feature set, imitating a clairvoyant teacher: ``sjf-oracle``
orders by true runtimes while the student sees only what is known at decision time (estimates,
predictions and their band), which is what makes the prediction features worth learning from."""

from __future__ import annotations

import numpy as np
import torch

from shared.imitation import ImitationConfig, collect_base, imitate
from shared.metrics import chronological_split, make_windows
from shared.model import ActorCritic, ModelConfig
from shared.rl.episodes import EpisodeRunner
from shared.rl.setup import RunSetup
from shared.scheduling.binding import BoundWorkload, bind_jobs


def with_predictions(bound: BoundWorkload) -> BoundWorkload:
    """The workload with runtime predictions near the truth (banded; every fifth job without one)."""
    jobs = bound.jobs
    rng = np.random.default_rng(0)
    predicted = jobs.runtime * rng.uniform(0.8, 1.25, len(jobs))
    low, high = predicted / 1.5, predicted * 1.5
    predicted[::5] = low[::5] = high[::5] = np.nan
    table = jobs.with_fields(predicted=predicted, predicted_lo=low, predicted_hi=high)
    return bind_jobs(table, bound.spec)


def test_imitating_sjf_oracle_on_the_predicted_set(queued: BoundWorkload) -> None:
    workload = with_predictions(queued)
    setup = RunSetup(base_policy="fcfs", metric="wait", warmup=32, feature_set="predicted")
    runner = EpisodeRunner(workload, setup.episode_settings())
    windows = make_windows(chronological_split(len(workload.jobs), 0.7)[0], 64, 2, seed=1)
    demos = collect_base(runner, windows, teacher="sjf-oracle")
    assert demos and all(d.obs.shape[1] == 12 for d in demos)
    config = ModelConfig(obs_features=12, critic_features=5)
    res = imitate(runner, windows, config, ImitationConfig(epochs=2, seed=0, teacher="sjf-oracle"))
    model = ActorCritic(config)
    model.load_state_dict(res.state)
    assert res.demonstrations == len(demos)
    assert all(torch.isfinite(v).all() for v in res.state.values())
