"""Policies that order the queue in Python (``ExternalCompiled``) on the compiled core.

The core stops at every cycle that orders the queue and asks the policy for the keys of the whole
queue (``shared.sim.compiled.run.run_external``). The bar is the Python loop's run, call for call:
the same cycles asked (time and queue), the same live state seen there (free resources per node,
the running jobs told through ``on_start``/``on_end`` or read from the state), the same answers
(the probe draws its keys from a seeded stream, so a call asked in one loop and not in the other
shifts every later answer) and the same schedule. The learned policy's own equivalence is tested in
``tests/rl``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain.jobs import FloatArray, IntArray
from shared.features import RunningJobs
from shared.policies.base import Policy
from shared.policies.capabilities import ExternalCompiled
from shared.scheduling.state import Alloc, ClusterState
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.test_compiled import assert_same, whole_gpus
from tests.sim.test_properties import Scenario, scenarios


class Undeclared(Policy):
    """Random keys from a seeded stream, drawn only for queues of two jobs or more (the core does
    not ask about a lone job), recording what each call saw; not ``ExternalCompiled`` (``Probe``
    is)."""

    name = "probe"
    dynamic = True

    def __init__(self, seed: int, hint_until: float | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.hint_until = hint_until
        self.calls: list[
            tuple[float, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]
        ] = []

    def attach(self, state: ClusterState, allocs: Mapping[int, Alloc]) -> None:
        self.state = state
        self.allocs = allocs
        self.running = RunningJobs()

    def on_start(self, j: int, now: float) -> None:
        self.running.add(j, self.allocs[j].group, now + float(self.ctx.estimate[j]))

    def on_end(self, j: int, now: float) -> None:
        self.running.remove(j)

    def _static(self, idx: IntArray) -> FloatArray:
        return np.asarray(self.ctx.workload.jobs.submit[idx], dtype=np.float64)

    def keys(self, idx: IntArray, now: float) -> FloatArray:
        if len(idx) < 2 or (self.hint_until is not None and now < self.hint_until):
            return self._static(idx)
        groups = self.state.groups
        shared = getattr(self.state, "running", None)
        if shared is not None:  # the compiled core's own list: the same as the one told
            np.testing.assert_array_equal(shared.jobs, self.running.jobs)
            np.testing.assert_array_equal(shared.group, self.running.group)
            np.testing.assert_array_equal(shared.est_end, self.running.est_end)
        self.calls.append(
            (
                now,
                tuple(idx.tolist()),
                tuple(int(x) for g in groups for x in g.whole),
                tuple(int(x) for g in groups for x in g.cpu),
                tuple(self.running.jobs.tolist()),
            )
        )
        return self.rng.random(len(idx))


class Probe(Undeclared):
    """The probe, ``ExternalCompiled``: hint keys before ``hint_until`` (when given), and every
    start and end told."""

    def external_hints(self, jobs: IntArray) -> tuple[float, FloatArray | None]:
        if self.hint_until is None:
            return -math.inf, None
        return self.hint_until, self._static(jobs)

    def external_changed(self, n_events: int) -> bool:
        return True


def run_probe(
    scenario: Scenario, cfg: SimConfig, core: str, seed: int, hinted: bool
) -> tuple[Simulator, Probe, object]:
    bound = scenario.bind()
    until = float(np.median(bound.jobs.submit)) if hinted and len(bound.jobs) else None
    probe = Probe(seed, until)
    sim = Simulator(bound, probe, cfg)
    sim.core = core
    sim.record_allocations = True
    res = sim.run()
    assert sim.last_core == core, sim.core_reason
    return sim, probe, res


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenario=st.one_of(scenarios(), scenarios().map(whole_gpus)),
    backfill=st.sampled_from(["easy", "greedy", "none"]),
    placement=st.sampled_from(["first-fit", "best-fit"]),
    oracle=st.booleans(),
    seed=st.integers(0, 2**16),
    hinted=st.booleans(),
)
def test_external_policy_sees_and_gets_what_the_python_loop_gives(
    scenario: Scenario, backfill: str, placement: str, oracle: bool, seed: int, hinted: bool
) -> None:
    cfg = SimConfig(
        backfill=backfill,  # type: ignore[arg-type]
        placement=placement,
        oracle_runtimes=oracle,
        node_slack=scenario.node_slack,
    )
    sa, pa, ra = run_probe(scenario, cfg, "python", seed, hinted)
    sb, pb, rb = run_probe(scenario, cfg, "compiled", seed, hinted)
    assert pa.calls == pb.calls
    assert_same((sa, ra), (sb, rb))  # type: ignore[arg-type]


def test_external_policy_runs_compiled_by_default() -> None:
    """An ``ExternalCompiled`` policy goes to the compiled core without being forced there;
    one that is not stays on the Python loop and says why."""
    from tests.sim.test_compiled import small_bound

    bound = small_bound()
    sim = Simulator(bound, Probe(0), SimConfig())
    sim.run()
    assert sim.last_core == "compiled" and sim.core_reason is None

    assert isinstance(Probe(0), ExternalCompiled) and not isinstance(Undeclared(0), ExternalCompiled)
    sim = Simulator(bound, Undeclared(0), SimConfig())
    sim.run()
    assert sim.last_core == "python"
    assert sim.core_reason is not None and "Undeclared" in sim.core_reason
