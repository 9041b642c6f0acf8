"""LearnedPolicy: valid orders, the base-order tail beyond max_queue, and the warm-up."""

from __future__ import annotations

import numpy as np
import torch

from shared.model import ActorCritic, ModelConfig, check_order
from shared.policies import PolicyContext, make_policy
from shared.rl.policy import LearnedPolicy
from shared.scheduling.binding import BoundWorkload
from shared.scheduling.state import ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator


def bound_policy(toy: BoundWorkload, policy: LearnedPolicy) -> LearnedPolicy:
    est = toy.jobs.runtime.copy()
    policy.bind(PolicyContext(workload=toy, estimate=est, capacity_gpus=toy.spec.total_gpus))
    policy.attach(ClusterState(toy.spec), {})
    return policy


def fixed_model(max_queue: int, top_k: int | None = None) -> ActorCritic:
    torch.manual_seed(3)
    model = ActorCritic(ModelConfig(max_queue=max_queue, top_k=top_k))
    with torch.no_grad():  # scores far from the near-zero init, so ties cannot hide a wrong order
        model.actor[-1].weight.mul_(300.0)
    return model.eval()


def test_greedy_keys_rank_head_by_score_and_keep_base_order_beyond_max_queue(toy: BoundWorkload) -> None:
    policy = bound_policy(toy, LearnedPolicy(fixed_model(max_queue=4), make_policy("sjf")))
    idx = np.arange(10, dtype=np.int64)
    now = float(toy.jobs.submit[9]) + 50.0
    keys = policy.keys(idx, now)
    assert len(np.unique(keys)) == len(idx)  # a strict order

    # SJF order of the 10 jobs (runtime, ties by arrival): the model's slots are its first 4
    sjf = sorted(idx.tolist(), key=lambda j: (toy.jobs.runtime[j], j))
    head, tail = sjf[:4], sjf[4:]
    assert max(keys[head]) < min(keys[tail])
    assert list(np.argsort(keys[tail])) == list(range(len(tail)))  # the tail keeps SJF order

    # within the head: descending model score
    obs, _ = policy.observe(np.array(head), now)
    scores = policy.model.scores(torch.from_numpy(obs)[None], torch.ones(1, 4, dtype=torch.bool))[0]  # type: ignore[union-attr]
    expected = [head[k] for k in torch.argsort(scores, descending=True, stable=True).tolist()]
    assert [head[k] for k in np.argsort(keys[head])] == expected


def test_sampled_decisions_are_recorded_valid_orderings(toy: BoundWorkload) -> None:
    gen = torch.Generator().manual_seed(0)
    policy = bound_policy(
        toy, LearnedPolicy(fixed_model(8, top_k=3), make_policy("fcfs"), mode="sample", generator=gen)
    )
    now = float(toy.jobs.submit[5]) + 1.0
    keys = policy.keys(np.arange(6, dtype=np.int64), now)
    assert sorted(keys.tolist()) == sorted(set(keys.tolist()))
    (decision,) = policy.log.decisions
    assert decision.obs.shape == (6, 8) and decision.critic.shape == (5,)
    assert len(decision.order) == 3
    check_order(torch.from_numpy(decision.order)[None], torch.ones(1, 6, dtype=torch.bool))
    # the three sampled picks start first, in the sampled order
    assert list(np.argsort(keys)[:3]) == decision.order.tolist()


def test_warm_up_is_the_base_policy(toy: BoundWorkload) -> None:
    """Before warm_until the schedule is FCFS's; after it a reversing controller changes it."""
    t0 = float(toy.jobs.submit[80])

    def reverse(obs: np.ndarray, critic: np.ndarray, now: float) -> np.ndarray:
        return np.arange(1, len(obs) + 1)  # last slot highest: reverse base order

    cfg = SimConfig.paper()
    fcfs = Simulator(toy, make_policy("fcfs"), cfg).run()
    learned = LearnedPolicy(None, make_policy("fcfs"), warm_until=t0, controller=reverse, max_queue=16)
    agent = Simulator(toy, learned, cfg).run()
    before = fcfs.start < t0
    assert before.sum() > 40
    np.testing.assert_array_equal(agent.start[before], fcfs.start[before])
    assert not np.array_equal(agent.start, fcfs.start)
