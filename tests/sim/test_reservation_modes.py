"""``SimConfig.reservation`` on multi-GPU nodes, by a hand-worked case (the textbook reference in
``test_textbook_easy.py`` covers single-slot pools only).

Four 4-GPU nodes. A (8 GPUs, 10 s) starts at 0 on nodes 0-1. B (12 GPUs, 50 s) arrives at 1 and
blocks: it fits at 10, when A ends; then 16 GPUs are free, so 4 are extra. C (4 GPUs, 100 s, runs
past 10) arrives at 2: in count mode 4 <= 4 extra, it starts and uses them up; in node mode B's
plan pins nodes 0-2 (0 and 1 free by then, 2 is the least-overlapping third node), node 3 is free
and unpinned, so C starts there. D (4 GPUs, 100 s) arrives at 3: no extra left / only the pinned
node 2 free, so it waits; B starts at 10 on nodes 0-2 and ends at 60, when D starts.
"""

from __future__ import annotations

import pytest

from shared.domain.jobs import build_table
from shared.policies import make_policy
from shared.scheduling.binding import bind_jobs
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.sim_helpers import one_group_spec

EXPECTED = [0.0, 10.0, 2.0, 60.0]


@pytest.mark.parametrize(("mode", "core"), [("nodes", "python"), ("nodes", "compiled"), ("count", "python")])
def test_extra_gpus_admit_one_long_job_and_no_more(mode: str, core: str) -> None:
    n = 4
    jobs = build_table(
        ids=["A", "B", "C", "D"],
        submit=[0.0, 1.0, 2.0, 3.0],
        runtime=[10.0, 50.0, 100.0, 100.0],
        estimate=[10.0, 50.0, 100.0, 100.0],
        gpus=[8, 12, 4, 4],
        gpu_milli=[1000] * n,
        type_set=[0] * n,
        cpus_milli=[-1] * n,
        mem_mib=[-1] * n,
        user=[0] * n,
        users=["u"],
    )
    bound = bind_jobs(jobs, one_group_spec(4, 4))
    sim = Simulator(bound, make_policy("fcfs"), SimConfig(reservation=mode))  # type: ignore[arg-type]
    sim.core = core
    result = sim.run()
    assert sim.last_core == core
    assert result.start.tolist() == EXPECTED
