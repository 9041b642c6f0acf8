"""Hylo's EASY backfilling against a textbook reference (issue 18, part 2).

``tests/sim/textbook_easy.py`` is EASY as Mu'alem and Feitelson (2001) describe it: one pool of
processors, one reservation, extra processors counted at the shadow time. It shares no code with
``shared.sim``. The first part of this file checks the reference itself on small cases worked out
by hand; the second requires Hylo's simulator, on a flat cluster of single-slot nodes (one GPU
each, so a job's processors are its GPUs), to start every job at the time the reference does: in
its textbook count-based mode (``SimConfig.reservation="count"``) and in its node-pinned mode
(``"nodes"``), on both event loops (the Python loop and the compiled core), under FCFS and SJF.

Workloads: the hand-made examples, seeded random workloads (runtime <= estimate throughout), and
the first jobs of two public traces from ``../shared/traces`` (relative to the repository root;
a missing folder fails the trace cases, it does not skip them):

- HPC2N (``swf/HPC2N-2002-2.2-cln.swf.gz``) on 240 x 1, the users' requested times as estimates.
  The loader keeps a requested time only when it is > 0 (else NaN); 14,817 of the 202,871 jobs
  ran longer than they asked for (no job lacks a requested time). Both sides get
  ``estimate = max(requested, runtime)``, the runtime where no time was requested, so no job
  overruns its estimate. Hylo itself would take an estimate below the runtime as it is (only
  negative values are raised to 0): the job runs its full runtime and its estimated end, in the
  past, counts as "now" in a reservation, which the reference also does.
- Lublin-256 (``swf/lublin_256.swf.gz``, no requested times) on 256 x 1, estimate = runtime.

Both sides read the same arrays (the bound workload's, in its submit order), so the reference's
FCFS tie-break (submit, index) and SJF key (floor(estimate), procs, submit, index) are the ones
Hylo's policies use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from shared.domain.jobs import JobTable, build_table
from shared.policies import make_policy
from shared.scheduling.binding import BoundWorkload, bind_jobs
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from shared.traces.swf import load_swf
from tests.sim.sim_helpers import one_group_spec
from tests.sim.textbook_easy import easy_starts

ROOT = Path(__file__).resolve().parents[2]
TRACES = (ROOT / ".." / "shared" / "traces").resolve()
HPC2N, LUBLIN = "swf/HPC2N-2002-2.2-cln.swf.gz", "swf/lublin_256.swf.gz"
#: jobs of each trace's prefix per event loop: the Python loop takes about 3 s per 1,000 Lublin
#: jobs (long queues), and test_compiled.py holds the two loops to the same schedule
TRACE_JOBS = {
    ("python", HPC2N): 3_000,
    ("python", LUBLIN): 1_000,
    ("compiled", HPC2N): 3_000,
    ("compiled", LUBLIN): 3_000,
}
#: (reservation mode, event loop): the compiled core runs node-pinned reservations only
#: (``test_compiled_core_refuses_count_mode``), so count mode is held to the reference on the
#: Python loop
LOOPS = [("nodes", "python"), ("nodes", "compiled"), ("count", "python")]
ORDERS = ("fcfs", "sjf")

# ---------------------------------------------------------------------------------------------
# the reference on hand-made cases
#
# Rows are (submit, runtime = estimate unless said, procs); starts are listed in job order.

# The known bug. 4 processors.
#   job  submit  runtime  procs
#   0    0       1        2
#   1    0       10       2
#   2    2       5        3
#   3    3       100      1
# t=0: 0 and 1 start, free 0. t=1: 0 ends, free 2. t=2: 2 needs 3 > 2: head; running 1 ends (est.)
# at 10 -> free 4 >= 3: shadow 10, extra 4 - 3 = 1. t=3: 3 arrives; 3 + 100 > 10, but 1 proc <=
# extra 1 and <= free 2: starts at 3 (extra 0). t=10: 1 ends, free 4 - 1 = 3: 2 starts at 10.
KNOWN_BUG = ([0, 0, 2, 3], [1, 10, 5, 100], [2, 2, 3, 1], 4)
KNOWN_BUG_STARTS = [0, 0, 10, 3]


def test_reference_known_bug() -> None:
    submit, runtime, procs, total = KNOWN_BUG
    got = easy_starts(submit, runtime, runtime, procs, total, "fcfs")
    assert got.tolist() == KNOWN_BUG_STARTS


# A short job backfills before the shadow, a long one does not. 4 processors.
#   job  submit  runtime  procs
#   0    0       10       3
#   1    1       5        4
#   2    2       9        1
#   3    2       8        1
# t=0: 0 starts, free 1. t=1: 1 needs 4: head; 0 ends at 10 -> free 4: shadow 10, extra 0.
# t=2: 2 runs to 11 > 10 and extra is 0: waits. 3 ends at 2 + 8 = 10 <= 10 (ending exactly at the
# shadow counts as ending by it) and 1 <= free 1: starts at 2. t=10: 0 and 3 end, free 4: 1 starts
# (ends 15); 2 needs 1 > free 0. t=15: 2 starts.
def test_reference_short_job_backfills_before_the_shadow() -> None:
    got = easy_starts([0, 1, 2, 2], [10, 5, 9, 8], [10, 5, 9, 8], [3, 4, 1, 1], 4)
    assert got.tolist() == [0, 10, 15, 2]


# The extra processors are used up. 6 processors.
#   job  submit  runtime  procs
#   0    0       10       4
#   1    1       10       5
#   2    2       50       1
#   3    2       50       1
#   4    2       5        1
# t=0: 0 starts, free 2. t=1: 1 needs 5: head; 0 ends at 10 -> free 6: shadow 10, extra 1.
# t=2: 2 runs past the shadow, 1 <= extra 1: starts (extra 0, free 1). 3 runs past it and extra
# is 0: waits. 4 ends at 7 <= 10: starts (free 0). t=7: 4 ends, free 1; 1 is head again: 0 at 10
# -> free 5: shadow 10, extra 1 + 4 - 5 = 0 (2 holds the other processor): 3 waits.
# t=10: 0 ends, free 5: 1 starts (to 20), free 0; 3 is head. t=20: 1 ends: 3 starts.
def test_reference_extra_processors_used_up() -> None:
    got = easy_starts([0, 1, 2, 2, 2], [10, 10, 50, 50, 5], [10, 10, 50, 50, 5], [4, 5, 1, 1, 1], 6)
    assert got.tolist() == [0, 10, 2, 20, 2]


# Extra counts every job that ends by the shadow, not only those needed to reach it. 4 processors.
#   job  submit  runtime  procs
#   0    0       10       1
#   1    0       10       1
#   2    1       5        3
#   3    2       100      1
# t=0: 0 and 1 start, free 2. t=1: 2 needs 3: head; releases in (estimated end, job) order: 0 at
# 10 -> free 3 >= 3: shadow 10; 1 also ends at 10, so 4 processors are free then: extra 1.
# t=2: 3 runs past the shadow, 1 <= extra: starts at 2. t=10: 0 and 1 end, free 3: 2 starts.
# (Counting only job 0, extra would be 0, and 3 would wait until 2 ends at 15.)
def test_reference_extra_counts_ties_at_the_shadow() -> None:
    got = easy_starts([0, 0, 1, 2], [10, 10, 5, 100], [10, 10, 5, 100], [1, 1, 3, 1], 4)
    assert got.tolist() == [0, 0, 10, 2]


# SJF: (floor(estimate), procs, submit, index). 2 processors.
#   job  submit  runtime  procs  SJF key
#   0    0       10       2      (10, 2, 0)
#   1    1       50       2      (50, 2, 1)
#   2    2       20       1      (20, 1, 2)
#   3    3       20       2      (20, 2, 3)
#   4    4       20.5     1      (20, 1, 4)   floor(20.5) = 20: ahead of 3 (fewer procs)
# t=10: 0 ends, free 2; queue in key order 2, 4, 3, 1: 2 and 4 start (free 0), 3 is head.
# t=30: 2 ends, free 1; 3 needs 2: head; 4 ends at 30.5 -> free 2: shadow 30.5, extra 0; 1 needs
# 2 > free. t=30.5: 4 ends: 3 starts (to 50.5). t=50.5: 1 starts.
# FCFS instead: t=10: 1 starts (to 60). t=60: 2 starts, 3 needs 2: head; 2 ends at 80: shadow 80,
# extra 0; 4 would end at 80.5 > 80: waits. t=80: 3 starts (to 100). t=100: 4 starts.
SJF_CASE = ([0, 1, 2, 3, 4], [10, 50, 20, 20, 20.5], [2, 2, 1, 2, 1], 2)


@pytest.mark.parametrize(
    ("order", "expected"), [("sjf", [0, 50.5, 10, 30.5, 10]), ("fcfs", [0, 10, 60, 80, 100])]
)
def test_reference_order(order: str, expected: list[float]) -> None:
    submit, runtime, procs, total = SJF_CASE
    assert easy_starts(submit, runtime, runtime, procs, total, order).tolist() == expected


# A job that overruns its estimate still runs its full runtime; its estimated end, once past,
# counts as now. 2 processors.
#   job  submit  runtime  estimate  procs
#   0    0       20       5         1
#   1    1       10       10        2
#   2    6       1        0         1
# t=1: 1 is head; 0 ends (est.) at 5: shadow 5, extra 0. t=6: 0 still runs, its estimated end 5 is
# clamped to 6: shadow 6, extra 0; 2 ends at 6 + 0 <= 6 (by its estimate): starts at 6.
# t=20: 0 ends: 1 starts.
def test_reference_overrun_estimate_counts_as_now() -> None:
    got = easy_starts([0, 1, 6], [20, 10, 1], [5, 10, 0], [1, 2, 1], 2)
    assert got.tolist() == [0, 20, 6]


@pytest.mark.parametrize(
    "bad",
    [
        {"procs": [1, 5]},  # wider than the machine: the caller excludes such jobs
        {"procs": [1, 0]},
        {"procs": [1, 1.5]},
        {"runtime": [1, -1]},
        {"estimate": [1, float("nan")]},
        {"submit": [0]},
        {"order": "lifo"},
        {"total": 0},
    ],
)
def test_reference_rejects_bad_input(bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "submit": [0, 1],
        "runtime": [1, 1],
        "estimate": [1, 1],
        "procs": [1, 1],
        "total": 4,
        "order": "fcfs",
    }
    with pytest.raises(ValueError):
        easy_starts(**(args | bad))


# ---------------------------------------------------------------------------------------------
# Hylo against the reference


@dataclass(frozen=True, eq=False)
class Case:
    """A workload bound to a flat cluster of ``total`` single-slot nodes (hashed by identity)."""

    name: str
    bound: BoundWorkload
    total: int


def flat_case(name: str, jobs: JobTable, total: int) -> Case:
    bound = bind_jobs(jobs, one_group_spec(total, 1))
    assert bound.exclusions == [], [str(e) for e in bound.exclusions]
    return Case(name, bound, total)


def array_case(
    name: str,
    submit: npt.ArrayLike,
    runtime: npt.ArrayLike,
    estimate: npt.ArrayLike,
    procs: npt.ArrayLike,
    total: int,
) -> Case:
    n = len(np.asarray(submit))
    jobs = build_table(
        ids=[str(k) for k in range(n)],
        submit=np.asarray(submit, dtype=np.float64).tolist(),
        runtime=np.asarray(runtime, dtype=np.float64).tolist(),
        estimate=np.asarray(estimate, dtype=np.float64).tolist(),
        gpus=np.asarray(procs, dtype=np.int64).tolist(),
    )
    return flat_case(name, jobs, total)


def random_case(seed: int, n: int = 200, total: int = 16) -> Case:
    """Bursty arrivals (often several at one second), small and wide jobs, integer runtimes and
    estimates of runtime x 1 to 5 (some x.25 or x.5), so that ties and backfilling both happen."""
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.integers(0, 11, size=n)).astype(np.float64)
    procs = rng.choice([1, 1, 1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16], size=n)
    runtime = np.round(np.exp(rng.uniform(0, np.log(60), size=n))).astype(np.float64)
    estimate = runtime * rng.choice([1.0, 1.0, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0], size=n)
    return array_case(f"random seed {seed}", submit, runtime, estimate, procs, total)


@functools.cache
def trace_case(relpath: str, total: int, n_jobs: int | None) -> Case:
    """The first ``n_jobs`` jobs (all with None) of an SWF trace on ``total`` x 1, with
    estimate = max(requested time, runtime) (the runtime where none was requested)."""
    path = TRACES / relpath
    if not path.is_file():
        pytest.fail(
            f"trace {path} is missing: the EASY parity cases need the public traces in "
            f"{TRACES} (../shared/traces beside the repository; CI has them)"
        )
    jobs = load_swf(path)
    if n_jobs is not None:
        jobs = jobs.take(np.arange(min(n_jobs, len(jobs))))
    estimate = np.fmax(jobs.estimate, jobs.runtime)  # fmax: a NaN estimate gives the runtime
    return flat_case(
        f"{Path(relpath).name} x {len(jobs)} on {total} x 1", jobs.with_fields(estimate=estimate), total
    )


@functools.cache
def reference_starts(case: Case, order: str) -> npt.NDArray[np.float64]:
    j = case.bound.jobs
    return easy_starts(j.submit, j.runtime, j.estimate, j.gpus, case.total, order)


def hylo_starts(case: Case, order: str, mode: str | None, core: str) -> npt.NDArray[np.float64]:
    """Hylo's start times with EASY backfill; ``mode`` None = the default config (no
    ``reservation`` argument). ``core``: "python", "compiled" or "auto"."""
    cfg = SimConfig(backfill="easy") if mode is None else SimConfig(backfill="easy", reservation=mode)
    sim = Simulator(case.bound, make_policy(order), cfg)
    sim.core = core
    res = sim.run()
    if core != "auto":
        assert sim.last_core == core, sim.core_reason
    return res.start


def differences(case: Case, ref: npt.NDArray[np.float64], got: npt.NDArray[np.float64]) -> str:
    """'' when every start matches, else the share that matches and the first differing jobs."""
    diff = np.flatnonzero(~(ref == got))
    if len(diff) == 0:
        return ""
    j = case.bound.jobs
    rows = [
        f"  job {j.ids[k]} (index {k}): submit {j.submit[k]:g}, procs {j.gpus[k]}, runtime "
        f"{j.runtime[k]:g}, estimate {j.estimate[k]:g}: reference {ref[k]:g}, Hylo {got[k]:g}"
        for k in diff[:5]
    ]
    share = 1 - len(diff) / len(ref)
    return f"{case.name}: {share:.2%} of {len(ref)} jobs start as in the reference\n" + "\n".join(rows)


def check(case: Case, order: str, mode: str, core: str) -> None:
    msg = differences(case, reference_starts(case, order), hylo_starts(case, order, mode, core))
    assert not msg, msg


def test_compiled_core_refuses_count_mode() -> None:
    """Count mode is the Python loop's: asking the compiled core for it is an error that says so,
    and the default core falls back to the Python loop."""
    submit, runtime, procs, total = KNOWN_BUG
    case = array_case("known bug", submit, runtime, runtime, procs, total)
    with pytest.raises(ValueError, match="reservation='count'"):
        hylo_starts(case, "fcfs", "count", "compiled")
    assert hylo_starts(case, "fcfs", "count", "auto").tolist() == KNOWN_BUG_STARTS


@pytest.mark.parametrize(("mode", "core"), LOOPS)
def test_hylo_known_bug(mode: str, core: str) -> None:
    submit, runtime, procs, total = KNOWN_BUG
    case = array_case("known bug", submit, runtime, runtime, procs, total)
    assert reference_starts(case, "fcfs").tolist() == KNOWN_BUG_STARTS
    check(case, "fcfs", mode, core)


@pytest.mark.parametrize(("mode", "core"), LOOPS)
@pytest.mark.parametrize("order", ORDERS)
def test_hylo_hand_cases(order: str, mode: str, core: str) -> None:
    """The reference's hand-made cases above, through Hylo."""
    cases: dict[str, tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[int], int]] = {
        "short job before the shadow": ([0, 1, 2, 2], [10, 5, 9, 8], [10, 5, 9, 8], [3, 4, 1, 1], 4),
        "extra used up": ([0, 1, 2, 2, 2], [10, 10, 50, 50, 5], [10, 10, 50, 50, 5], [4, 5, 1, 1, 1], 6),
        "ties at the shadow": ([0, 0, 1, 2], [10, 10, 5, 100], [10, 10, 5, 100], [1, 1, 3, 1], 4),
        "SJF order": (SJF_CASE[0], SJF_CASE[1], SJF_CASE[1], SJF_CASE[2], SJF_CASE[3]),
        "overrun estimate": ([0, 1, 6], [20, 10, 1], [5, 10, 0], [1, 2, 1], 2),
    }
    bad = []
    for name, (submit, runtime, estimate, procs, total) in cases.items():
        case = array_case(name, submit, runtime, estimate, procs, total)
        bad.append(differences(case, reference_starts(case, order), hylo_starts(case, order, mode, core)))
    bad = [m for m in bad if m]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("mode", "core"), LOOPS)
@pytest.mark.parametrize("order", ORDERS)
def test_hylo_random_workloads(order: str, mode: str, core: str) -> None:
    """20 seeded workloads of 200 jobs on 16 x 1: every job of every one starts as in the
    reference."""
    msgs, wrong, total = [], 0, 0
    for seed in range(20):
        case = random_case(seed)
        ref, got = reference_starts(case, order), hylo_starts(case, order, mode, core)
        wrong += int(np.count_nonzero(ref != got))
        total += len(ref)
        msgs.append(differences(case, ref, got))
    bad = [m for m in msgs if m]
    assert not bad, f"{wrong} of {total} jobs start elsewhere, in {len(bad)} of 20 workloads\n" + "\n".join(
        bad[:3]
    )


@pytest.mark.parametrize(("mode", "core"), LOOPS)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(("relpath", "total"), [(HPC2N, 240), (LUBLIN, 256)], ids=["hpc2n", "lublin256"])
def test_hylo_trace_prefix(relpath: str, total: int, order: str, mode: str, core: str) -> None:
    """The first 3,000 jobs of HPC2N (240 x 1) and of Lublin-256 (256 x 1; 1,000 on the Python
    loop)."""
    check(trace_case(relpath, total, TRACE_JOBS[(core, relpath)]), order, mode, core)
