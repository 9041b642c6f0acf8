"""Policy keys against values computed by hand from the formulas in the policy docstrings.

Smaller key = starts first. Each expected value is written out with its arithmetic; the
logarithms are the usual ones (log10 2 = 0.30103, log2 3 = 1.58496, log2 5 = 2.32193).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from shared.domain.cluster import ClusterSpec, parse_cluster_spec
from shared.domain.jobs import JobTable, build_table
from shared.policies import POLICY_NAMES, PolicyContext, make_policy
from shared.policies.base import Policy
from shared.policies.capabilities import TracksJobs
from shared.policies.classic import SJF_MAX_GPUS, SJF_MAX_SECONDS, sjf_keys
from shared.policies.multifactor import MultifactorWeights, SlurmMultifactor
from shared.scheduling.binding import bind_jobs

ALL = np.arange(4)


def spec(total_gpus_per_node: int = 16, **extra: Any) -> ClusterSpec:
    group = {
        "name": "g",
        "gpu_type": "V100",
        "count": 1,
        "gpus": total_gpus_per_node,
        "cpus": 256,
        "mem_gib": 4096,
    }
    return parse_cluster_spec({"name": "t", "node_groups": [group], **extra}, "test")


def context(jobs: JobTable, cluster: ClusterSpec, estimate: list[float] | None = None) -> PolicyContext:
    bound = bind_jobs(jobs, cluster)
    assert bound.exclusions == []
    est = bound.jobs.estimate if estimate is None else np.asarray(estimate, dtype=float)
    return PolicyContext(workload=bound, estimate=est, capacity_gpus=cluster.total_gpus)


def bound_policy(name_or_policy: str | Policy, ctx: PolicyContext) -> Policy:
    p = make_policy(name_or_policy) if isinstance(name_or_policy, str) else name_or_policy
    p.bind(ctx)
    return p


# The 4-job queue used by the classic policies (one 16-GPU node, GPU jobs only):
#   job  submit  estimate  runtime  GPUs
#   0    0       100.7     500      2
#   1    100     100.2     20       1
#   2    400     1000      1000     4
#   3    900     0.5       60       1
def queue() -> PolicyContext:
    jobs = build_table(
        ids=["j0", "j1", "j2", "j3"],
        submit=[0.0, 100.0, 400.0, 900.0],
        runtime=[500.0, 20.0, 1000.0, 60.0],
        estimate=[100.7, 100.2, 1000.0, 0.5],
        gpus=[2, 1, 4, 1],
    )
    return context(jobs, spec())


def order(keys: np.ndarray) -> list[int]:
    return np.argsort(keys, kind="stable").tolist()


def test_registry() -> None:
    assert set(POLICY_NAMES) == {
        "fcfs",
        "sjf",
        "sjf-oracle",
        "wfp3",
        "unicep",
        "f1",
        "multifactor",
        "sjf-pred",
        "wfp3-pred",
        "unicep-pred",
        "f1-pred",
        "small-first",
    }
    for name in POLICY_NAMES:
        assert make_policy(name).name == name
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("lifo")
    dynamic = {n for n in POLICY_NAMES if make_policy(n).dynamic}
    assert dynamic == {"wfp3", "unicep", "multifactor", "wfp3-pred", "unicep-pred"}
    assert {n for n in POLICY_NAMES if isinstance(make_policy(n), TracksJobs)} == {"multifactor"}


def test_fcfs_keys_are_submit_times() -> None:
    p = bound_policy("fcfs", queue())
    np.testing.assert_array_equal(p.keys(ALL, 5000.0), [0.0, 100.0, 400.0, 900.0])


# SJF: floor(estimate) x 2^20 + GPUs (2^20 = 1,048,576), an exact integer
#   j0 100 x 2^20 + 2 = 104,857,602;   j1 100 x 2^20 + 1 = 104,857,601
#   j2 1000 x 2^20 + 4 = 1,048,576,004; j3 0 x 2^20 + 1 = 1
# j0 and j1 tie on the floored estimate: the 1-GPU job (j1) goes first although it came later.
def test_sjf_keys_and_gpu_tie_break() -> None:
    p = bound_policy("sjf", queue())
    keys = p.keys(ALL, 0.0)
    np.testing.assert_array_equal(keys, [104_857_602.0, 104_857_601.0, 1_048_576_004.0, 1.0])
    assert order(keys) == [3, 1, 0, 2]


# sjf-oracle: floor(runtime) x 2^20 + GPUs: 500 -> 524,288,002; 20 -> 20,971,521;
# 1000 -> 1,048,576,004; 60 -> 62,914,561 -> order 1, 3, 0, 2
def test_sjf_oracle_uses_true_runtimes() -> None:
    p = bound_policy("sjf-oracle", queue())
    keys = p.keys(ALL, 0.0)
    np.testing.assert_array_equal(keys, [524_288_002.0, 20_971_521.0, 1_048_576_004.0, 62_914_561.0])
    assert order(keys) == [1, 3, 0, 2]


# The old key floor(estimate) + GPUs / 1000 put a 101 s job on 53 GPUs (101.053) before a 100 s
# job on 1,100 (100 + 1.1 = 101.1): a width of 1,000 GPUs or more spilled into the seconds.
#   a 101 s, 53 GPUs:    101 x 2^20 + 53    = 105,906,229
#   b 100 s, 1,100 GPUs: 100 x 2^20 + 1,100 = 104,858,700 -> b first
#   c 100.9 s, 4 GPUs:   100 x 2^20 + 4     = 104,857,604 -> before b (same second, fewer GPUs)
#   d 100.2 s, 4 GPUs:   the same key as c -> after c (arrival)
def test_sjf_never_mixes_width_into_seconds() -> None:
    jobs = build_table(
        ids=["a", "b", "c", "d"],
        submit=[0.0, 1.0, 2.0, 3.0],
        runtime=[101.0, 100.0, 100.9, 100.2],
        estimate=[101.0, 100.0, 100.9, 100.2],
        gpus=[53, 1100, 4, 4],
    )
    group = {"name": "g", "gpu_type": "V100", "count": 32, "gpus": 64, "cpus": 256, "mem_gib": 4096}
    big = parse_cluster_spec({"name": "big", "node_groups": [group]}, "test")  # 2,048 GPUs
    p = bound_policy("sjf", context(jobs, big))
    keys = p.keys(ALL, 0.0)
    np.testing.assert_array_equal(keys, [105_906_229.0, 104_858_700.0, 104_857_604.0, 104_857_604.0])
    assert order(keys) == [2, 3, 1, 0]
    classes = p.order_classes()
    assert classes is not None and classes[2] == classes[3] and len(set(classes.tolist())) == 3


# The bounds: floor(runtime) is clamped to 0 .. 2^33 - 1 s and GPUs to 0 .. 2^20 - 1, so every key
# is an integer below 2^53, exact in a float64 (neighbours stay one apart at the top).
def test_sjf_keys_are_exact_at_their_bounds() -> None:
    runtime = np.array([2.0**33 - 1, 2.0**33 - 1, 2.0**40, np.inf, -5.0, 0.99, np.nan])
    gpus = np.array([2**20 - 2, 2**20 - 1, 2**21, 3, 3, 3, 1], dtype=np.int64)
    keys = sjf_keys(runtime, gpus)
    top = 2**53 - 1
    assert keys[:4].tolist() == [top - 1, top, top, (2**33 - 1) * 2**20 + 3]
    assert keys[4:6].tolist() == [3.0, 3.0]  # negative and sub-second runtimes count as 0 s
    assert np.isnan(keys[6])  # no runtime, no key (as before)
    assert (SJF_MAX_SECONDS, SJF_MAX_GPUS) == (2**33 - 1, 2**20 - 1)


# WFP3: key = -(wait / max(estimate, 1))^3 x max(GPUs, 1), with the wait at the current time.
# now = 1000: waits 1000, 900, 600, 100
#   j0 (1000/100.7)^3 x 2 = 9.930487^3 x 2 = 979.2906 x 2 = 1958.581
#   j1 (900/100.2)^3 x 1  = 8.982036^3     = 724.6434
#   j2 (600/1000)^3 x 4   = 0.216 x 4     = 0.864
#   j3 (100/1)^3 x 1      = 1,000,000     (the 0.5 s estimate is floored at 1 s)
# now = 2000: waits 2000, 1900, 1600, 1100
#   j0 (2000/100.7)^3 x 2 = 19.860973^3 x 2 = 7834.325 x 2 = 15668.65
#   j1 (1900/100.2)^3     = 18.962076^3     = 6818.010
#   j2 (1.6)^3 x 4        = 4.096 x 4      = 16.384
#   j3 1100^3             = 1.331e9
# now = 50: j0 waited 50, the others have not arrived yet (wait clamped at 0)
#   j0 (50/100.7)^3 x 2 = 0.49652^3 x 2 = 0.24481
def test_wfp3_keys_use_the_current_wait() -> None:
    p = bound_policy("wfp3", queue())
    np.testing.assert_allclose(p.keys(ALL, 1000.0), [-1958.581, -724.6434, -0.864, -1e6], rtol=1e-6)
    np.testing.assert_allclose(p.keys(ALL, 2000.0), [-15668.65, -6818.010, -16.384, -1.331e9], rtol=1e-6)
    np.testing.assert_allclose(p.keys(ALL, 50.0), [-0.24481, 0.0, 0.0, 0.0], rtol=2e-4, atol=0)
    assert order(p.keys(ALL, 1000.0)) == [3, 0, 1, 2]


# UNICEP: key = -wait / (log2(max(GPUs, 1) + 1) x max(estimate, 1)); now = 1000
#   j0 1000 / (log2 3 x 100.7) = 1000 / 159.6058 = 6.265439
#   j1  900 / (log2 2 x 100.2) =  900 / 100.2   = 8.98204
#   j2  600 / (log2 5 x 1000)  =  600 / 2321.93 = 0.258406
#   j3  100 / (log2 2 x 1)     = 100            (log2(1 + 1) = 1: a 1-GPU job stays finite)
def test_unicep_keys_use_log2_n_plus_1() -> None:
    p = bound_policy("unicep", queue())
    keys = p.keys(ALL, 1000.0)
    np.testing.assert_allclose(keys, [-6.265439, -8.982036, -0.258406, -100.0], rtol=1e-6)
    assert np.isfinite(keys).all()
    assert order(keys) == [3, 1, 0, 2]


# F1: key = log10(max(estimate, 1)) x max(GPUs, 1) + 870 x log10(max(submit, 1))
#   j0 log10(100.7) x 2 + 870 x log10(1)   = 2.003029 x 2 + 0       = 4.006059
#   j1 log10(100.2) x 1 + 870 x log10(100) = 2.000868 + 1740        = 1742.000868
#   j2 log10(1000) x 4 + 870 x log10(400)  = 12 + 870 x 2.6020600    = 2275.79219
#   j3 log10(1) x 1 + 870 x log10(900)     = 0 + 870 x 2.9542425    = 2570.19098
# j0 was submitted at 0 (the trace start): its submit is floored at 1 s, so the key stays finite.
def test_f1_keys() -> None:
    p = bound_policy("f1", queue())
    keys = p.keys(ALL, 0.0)
    np.testing.assert_allclose(keys, [4.006059, 1742.000868, 2275.79219, 2570.19098], rtol=1e-7)
    assert order(keys) == [0, 1, 2, 3]


# F1 on a trace whose timestamps start at an epoch: once rebased (t = 0 at the first job) the keys
# are those above, whatever the origin. Submit 0 and 0.5 both count as 1 s (log10 1 = 0).
def test_f1_rebased_submit_with_floor() -> None:
    origin = 1.6e9
    jobs = build_table(
        ids=["a", "b", "c"],
        submit=[origin, origin + 0.5, origin + 10],
        runtime=[1.0, 1.0, 1.0],
        estimate=[10.0, 10.0, 10.0],
        gpus=[1, 1, 1],
    )
    rebased, offset = jobs.rebased()
    assert offset == origin
    p = bound_policy("f1", context(rebased, spec()))
    # a: log10 10 x 1 + 870 log10 1 = 1;  b: the same (0.5 s floored to 1 s);  c: 1 + 870 x 1 = 871
    np.testing.assert_allclose(p.keys(np.arange(3), 0.0), [1.0, 1.0, 871.0], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Slurm multifactor
#
# priority = floor(W_age age + W_size size + W_fs fairshare + W_part partition + W_qos qos), key = -priority.


def mf(weights: dict[str, Any], ctx: PolicyContext) -> SlurmMultifactor:
    p = SlurmMultifactor(MultifactorWeights(**weights))
    p.bind(ctx)
    return p


ONLY_AGE = {"job_size": 0, "fairshare": 0, "partition": 0, "qos": 0}


# age = min(wait, max_age) / max_age, weight 1000, max_age 1000 s; now = 2000:
#   waits 2000, 1500, 800, 100 -> factors 1 (capped), 1 (capped), 0.8, 0.1 -> 1000, 1000, 800, 100
def test_multifactor_age_is_capped() -> None:
    jobs = build_table(
        ids=list("abcd"), submit=[0.0, 500.0, 1200.0, 1900.0], runtime=[1.0] * 4, gpus=[1, 1, 1, 1]
    )
    p = mf({**ONLY_AGE, "max_age_s": 1000.0}, context(jobs, spec(), [1.0] * 4))
    np.testing.assert_array_equal(p.priority(ALL, 2000.0), [1000, 1000, 800, 100])
    np.testing.assert_array_equal(p.keys(ALL, 2000.0), [-1000, -1000, -800, -100])


# size = GPUs / cluster GPUs (16), or 1 - that with favor_small; weight 1000.
#   GPUs 1, 4, 16 and a half GPU (0.5):
#   favor_small off: 1000/16 = 62.5 -> 62;  250;  1000;  31.25 -> 31
#   favor_small on:  1000 - 62.5 = 937.5 -> 937;  750;  0;  968.75 -> 968
@pytest.mark.parametrize(
    ("favor_small", "expected"), [(False, [62, 250, 1000, 31]), (True, [937, 750, 0, 968])]
)
def test_multifactor_job_size(favor_small: bool, expected: list[int]) -> None:
    jobs = build_table(
        ids=list("abcd"),
        submit=[0.0] * 4,
        runtime=[1.0] * 4,
        gpus=[1, 4, 16, 1],
        gpu_milli=[1000, 1000, 1000, 500],
    )
    w = {"age": 0, "fairshare": 0, "partition": 0, "qos": 0, "favor_small": favor_small}
    p = mf(w, context(jobs, spec(), [1.0] * 4))
    np.testing.assert_array_equal(p.priority(ALL, 0.0), expected)


# partition = PriorityJobFactor / the largest (2 and 4 -> 0.5, 1; an undeclared partition counts 1
# -> 0.25); qos = priority / the largest (0 and 10 -> 0, 1; undeclared -> 0).
def test_multifactor_partition_and_qos() -> None:
    cluster = spec(
        partitions={"cheap": {"priority_job_factor": 2}, "prio": {"priority_job_factor": 4}},
        qos={"normal": {"priority": 0}, "high": {"priority": 10}},
    )
    jobs = build_table(
        ids=list("abcd"),
        submit=[0.0] * 4,
        runtime=[1.0] * 4,
        gpus=[1] * 4,
        vc=[0, 1, 2, 1],
        qos=[0, 1, 2, 0],
        vcs=["cheap", "prio", "other"],
        qoses=["normal", "high", "other"],
    )
    ctx = context(jobs, cluster, [1.0] * 4)
    part = mf({"age": 0, "job_size": 0, "fairshare": 0, "qos": 0}, ctx)
    np.testing.assert_array_equal(part.priority(ALL, 0.0), [500, 1000, 250, 1000])
    q = mf({"age": 0, "job_size": 0, "fairshare": 0, "partition": 0}, ctx)
    np.testing.assert_array_equal(q.priority(ALL, 0.0), [0, 1000, 0, 0])


# Fair-share, classic: 2^(-(U/total)/S) with equal shares S = 1/2 for two users.
# Half-life H = 1000 s, lambda = ln 2 / H. Alice runs 2 GPUs from 0 to H; Bob runs nothing.
#   decayed usage at H: 2 x (1 - e^{-lambda H}) / lambda = 2 x (1/2) x H / ln 2 = 1442.695 GPU-s
#   Alice: U/total = 1 -> 2^(-1/0.5) = 0.25;  Bob: U = 0 -> 2^0 = 1
# Nothing runs from H to 2H: usage halves (721.35), the shares of the total do not change.
# Before anything ran, total usage is 0 and every user has factor 1.
def test_multifactor_fair_share_decay() -> None:
    jobs = build_table(
        ids=["a1", "b1", "a2", "b2"],
        submit=[0.0, 0.0, 10.0, 10.0],
        runtime=[1000.0] * 4,
        gpus=[2, 1, 1, 1],
        user=[0, 1, 0, 1],
        users=["alice", "bob"],
    )
    ctx = context(jobs, spec(), [1000.0] * 4)
    p = mf({"age": 0, "job_size": 0, "partition": 0, "qos": 0, "decay_half_life_s": 1000.0}, ctx)
    waiting = np.array([2, 3])  # alice's a2, bob's b2
    np.testing.assert_array_equal(p.fairshare(np.array([0, 1])), [1.0, 1.0])
    np.testing.assert_array_equal(p.priority(waiting, 0.0), [1000, 1000])

    p.on_start(0, 0.0)  # a1: alice, 2 GPUs
    prio = p.priority(waiting, 1000.0)
    assert p.usage[0] == pytest.approx(1000.0 / math.log(2.0), rel=1e-12)
    assert p.usage[1] == 0.0
    np.testing.assert_allclose(p.fairshare(np.array([0, 1])), [0.25, 1.0], rtol=1e-12)
    np.testing.assert_array_equal(prio, [250, 1000])
    assert order(p.keys(waiting, 1000.0)) == [1, 0]  # bob's job first

    p.on_end(0, 1000.0)
    used = p.usage[0]
    p.priority(waiting, 2000.0)
    assert p.usage[0] == pytest.approx(used / 2.0, rel=1e-12)
    assert p.usage[0] == pytest.approx(500.0 / math.log(2.0), rel=1e-12)
    np.testing.assert_allclose(p.fairshare(np.array([0, 1])), [0.25, 1.0], rtol=1e-12)


# Usage accrues in closed form: one call at 2H gives the same usage as calls at H/2, H, 3H/2, 2H.
#   2 GPUs for 2H: 2 (1 - e^{-2 ln 2}) / lambda = 2 x 3/4 x H / ln 2 = 1.5 H / ln 2
def test_multifactor_usage_does_not_depend_on_call_frequency() -> None:
    jobs = build_table(ids=["a", "b"], submit=[0.0, 0.0], runtime=[1.0, 1.0], gpus=[2, 1], user=[0, 0])
    ctx = context(jobs, spec(), [1.0, 1.0])
    w = {"decay_half_life_s": 1000.0}
    once, often = mf(w, ctx), mf(w, ctx)
    for p in (once, often):
        p.on_start(0, 0.0)
    for t in (500.0, 1000.0, 1500.0):
        often.priority(np.array([1]), t)
    once.priority(np.array([1]), 2000.0)
    often.priority(np.array([1]), 2000.0)
    assert once.usage[0] == pytest.approx(1500.0 / math.log(2.0), rel=1e-12)
    assert often.usage[0] == pytest.approx(once.usage[0], rel=1e-12)


# The weighted sum is truncated as a whole (Slurm casts it to an integer), not term by term.
# Weights age 1 and job size 1, max_age 1000 s, 10 GPUs in the cluster, now = 600:
#   job a: 6 GPUs, submitted at 0, waited 600 s -> 0.6 + 0.6 = 1.2 -> 1 (term by term: 0 + 0 = 0)
#   job c: 3 GPUs, submitted at 267, waited 333 s -> 0.333 + 0.3 = 0.633 -> 0
# Default weights (1000 each), max_age 1800 s, job b: 1 GPU submitted at 0, so it waited 1/3 of
# max_age; one user without usage (fair-share 1), no partition declared (factor 1), no QOS (0):
#   1000/3 + 1000 x 1/10 + 1000 + 1000 = 2433.33 -> 2433
def test_multifactor_integer_truncation() -> None:
    cluster = spec(10)
    jobs = build_table(ids=["a", "b", "c"], submit=[0.0, 0.0, 267.0], runtime=[1.0] * 3, gpus=[6, 1, 3])
    ctx = context(jobs, cluster, [1.0] * 3)
    assert ctx.workload.jobs.ids.tolist() == ["a", "b", "c"]
    small = mf({"age": 1, "job_size": 1, "fairshare": 0, "partition": 0, "qos": 0, "max_age_s": 1000.0}, ctx)
    np.testing.assert_array_equal(small.priority(np.array([0, 2]), 600.0), [1, 0])
    default = mf({"max_age_s": 1800.0}, ctx)
    prio = default.priority(np.array([1]), 600.0)
    np.testing.assert_array_equal(prio, [2433])
    assert float(prio[0]).is_integer()


def test_multifactor_default_weights() -> None:
    w = MultifactorWeights()
    assert (w.age, w.job_size, w.fairshare, w.partition, w.qos) == (1000,) * 5
    assert w.max_age_s == w.decay_half_life_s == 7 * 86400
    assert w.favor_small is False


def test_attach_gives_the_live_state_and_allocations() -> None:
    """A policy that observes the cluster sees the simulator's live state at every decision: the
    running jobs' allocations and the free GPUs match what has started by then."""
    from shared.policies.classic import FCFS
    from shared.sim.config import SimConfig
    from shared.sim.simulator import Simulator

    class Spy(FCFS):
        dynamic = True

        def attach(self, state, allocs):  # type: ignore[no-untyped-def]
            self.state, self.allocs = state, allocs
            self.seen: list[tuple[float, list[int], int]] = []

        def keys(self, idx, now):  # type: ignore[no-untyped-def]
            running = sorted(self.allocs)
            self.seen.append((now, running, int(self.state.groups[0].whole.sum())))
            return super().keys(idx, now)

    spec = parse_cluster_spec(
        {
            "name": "t",
            "node_groups": [
                {"name": "g", "gpu_type": "A", "count": 1, "gpus": 4, "cpus": 64, "mem_gib": 512}
            ],
        },
        "t",
    )
    jobs = build_table(
        ids=["a", "b", "c"], submit=[0, 1, 2], runtime=[10, 10, 10], gpus=[2, 2, 2], estimate=[10, 10, 10]
    )
    spy = Spy()
    Simulator(bind_jobs(jobs, spec), spy, SimConfig(backfill="greedy")).run()
    # t=0: nothing runs, 4 free; t=1: a runs, 2 free; t=2: a and b run and c does not fit, so
    # no decision is asked for (the idle cycle is skipped); t=10: a ended, b runs, 2 free
    assert spy.seen == [(0.0, [], 4), (1.0, [0], 2), (10.0, [1], 2)]
