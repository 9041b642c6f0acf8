"""A new policy is one class and one registry line (issue 18, item 4).

The class below is everything a new base policy writes: ``keys``, the order-class promise and the
snapshot form. Registered under a name (as ``registry.py``'s lines do), it runs in the simulator on
the Python loop and on the compiled core with the same schedule (static keys need no compiled
form), its snapshot form gives ``keys``' values on the same jobs, and the prioritizer service takes
it as its base policy. Nothing else names it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from services.featurizer.stage import FeaturizerStage
from services.prioritizer.stage import PrioritizerStage
from shared.domain.jobs import FloatArray, IntArray
from shared.policies import PolicyContext, make_policy
from shared.policies.base import Policy
from shared.policies.capabilities import (
    CompiledForm,
    PendingColumns,
    SnapshotContext,
    SnapshotForm,
    float_column,
)
from shared.policies.registry import policy_names, register, unregister
from shared.policies.snapshot_keys import SNAPSHOT_POLICIES, snapshot_keys, snapshot_policies
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.scheduling.partition import row_classes
from shared.scheduling.result import SimResult
from shared.schemas import PendingJobs
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from shared.workload import generate_for_cluster
from tests.sim.sim_helpers import one_group_spec
from tests.sim.test_compiled import assert_same
from tests.stages.simsnap import pending_job
from tests.stages.stage_helpers import node, pend, snap, two_group_spec


class LJF(Policy):
    """Longest (estimated) job first."""

    name = "ljf"

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        return -self.ctx.estimate[idx]

    def order_classes(self) -> IntArray | None:
        # jobs with equal keys: ties go to the earlier arrival
        return row_classes(self.keys(np.arange(len(self.ctx.submit)), 0.0))

    def snapshot_keys(self, jobs: PendingColumns, now: float, ctx: SnapshotContext) -> FloatArray:
        return -float_column(jobs.est_runtime_s, len(jobs))


class LongestWaitPerGpu(Policy):
    """A clock-dependent policy with no compiled form and no snapshot form: minus the wait per GPU."""

    name = "wait-per-gpu"
    dynamic = True

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        key: FloatArray = -np.maximum(now - self.ctx.submit[idx], 0.0) / np.maximum(self.ctx.gpus[idx], 1)
        return key


@pytest.fixture
def ljf() -> Iterator[str]:
    """``ljf`` registered for the test (the line ``registry.py`` would hold), then removed."""
    register("ljf", LJF)
    try:
        yield "ljf"
    finally:
        unregister("ljf")


def test_registration_reaches_every_name_list(ljf: str) -> None:
    assert ljf in policy_names() and ljf in snapshot_policies()
    assert isinstance(make_policy(ljf), LJF)
    assert ljf not in SNAPSHOT_POLICIES  # the built-in list, fixed at import
    with pytest.raises(ValueError, match="already registered"):
        register(ljf, LJF)


def test_capabilities_are_structural() -> None:
    assert isinstance(LJF(), SnapshotForm) and not isinstance(LJF(), CompiledForm)
    assert not isinstance(LongestWaitPerGpu(), SnapshotForm)
    for name in ("wfp3", "unicep", "multifactor"):
        assert isinstance(make_policy(name), CompiledForm), name
    for name in ("fcfs", "sjf", "f1"):  # static keys: the compiled core takes them up front
        assert not isinstance(make_policy(name), CompiledForm), name


def bound_workload(n: int = 400, seed: int = 3) -> BoundWorkload:
    """Jobs for four 8-GPU nodes at 1.5 x their capacity: queues form, so the order matters."""
    spec = one_group_spec(4, 8)
    return bind_jobs(generate_for_cluster(spec, n, seed=seed, load=1.5), spec)


def simulate(policy: Policy, cfg: SimConfig, core: str) -> tuple[Simulator, SimResult]:
    sim = Simulator(bound_workload(), policy, cfg)
    sim.core = core
    sim.record_allocations = True
    res = sim.run()
    return sim, res


@pytest.mark.parametrize("backfill", ["easy", "greedy", "none"])
@pytest.mark.parametrize("placement", ["first-fit", "best-fit"])
def test_a_static_policy_runs_compiled_with_the_python_schedule(
    ljf: str, backfill: str, placement: str
) -> None:
    cfg = SimConfig(backfill=backfill, placement=placement)
    py = simulate(make_policy(ljf), cfg, "python")
    sim = Simulator(bound_workload(), make_policy(ljf), cfg)  # "auto": compiled where supported
    sim.record_allocations = True
    res = sim.run()
    assert sim.last_core == "compiled" and sim.core_reason is None
    assert_same(py, (sim, res))
    # the keys are used: the schedule is not FCFS's
    assert not np.array_equal(res.start, simulate(make_policy("fcfs"), cfg, "python")[1].start)


def test_a_policy_without_a_compiled_form_runs_on_the_python_loop() -> None:
    sim = Simulator(bound_workload(120), LongestWaitPerGpu(), SimConfig())
    sim.run()
    assert sim.last_core == "python"
    assert sim.core_reason is not None and "no compiled form" in sim.core_reason


def test_the_snapshot_form_gives_the_simulators_keys(ljf: str) -> None:
    bound = bound_workload(300, seed=1)
    est = np.nan_to_num(bound.jobs.estimate, nan=3600.0)
    idx = np.arange(100, len(bound.jobs))
    now = float(bound.jobs.submit[idx].max()) + 100.0
    policy = make_policy(ljf)
    policy.bind(PolicyContext(workload=bound, estimate=est, capacity_gpus=bound.spec.total_gpus))
    pending = PendingJobs.of(pending_job(bound, int(j), est) for j in idx)
    np.testing.assert_array_equal(snapshot_keys(ljf, pending, now, bound.spec), policy.keys(idx, now))


def test_the_prioritizer_takes_it_as_its_base_policy(ljf: str) -> None:
    spec = two_group_spec()
    jobs = [pend(f"j{i}", 1, submit=float(i), est=60.0 * (i + 1)) for i in range(4)]
    matrix = FeaturizerStage({"two": spec}).handle(snap(jobs, [node("a-0", "a"), node("b-0", "b")]))
    vector = asyncio.run(PrioritizerStage(ljf).handle(matrix))
    assert (vector.policy, vector.model_version) == (ljf, None)
    ids = vector.matrix.job_ids
    order = [ids[k] for k in np.argsort(-np.asarray(vector.priorities), kind="stable")]
    assert order == ["j3", "j2", "j1", "j0"]  # longest estimate first


def test_the_prioritizer_refuses_a_policy_without_a_snapshot_form() -> None:
    register("wait-per-gpu", LongestWaitPerGpu)
    try:
        with pytest.raises(ValueError, match="no snapshot form"):
            PrioritizerStage("wait-per-gpu")
    finally:
        unregister("wait-per-gpu")
