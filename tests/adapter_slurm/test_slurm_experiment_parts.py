"""The Slurm experiment's pieces that need no cluster: the makespan bound, the spread over
repetitions, the tuned weights (parsing, ``up`` options, Slurm's job-size factor in the simulator)
and the path profile read from the adapter's timing lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.support.multifactor_tuning import (
    Scored,
    SlurmLikeMultifactor,
    SlurmWeights,
    choose,
    parse_weights,
)
from bench.support.slurm_path import job_paths, profile
from bench.support.slurm_summary import makespan_lower_bound, summarize


def _job(submit: float, gpu_type: str, gpus: int, runtime: float) -> dict[str, object]:
    return {"submit": submit, "gpu_type": gpu_type, "gpus": gpus, "runtime_s": runtime}


def test_lower_bound_takes_the_busiest_type_from_each_arrival() -> None:
    jobs = [_job(0, "p100", 4, 10), _job(5, "p100", 4, 10), _job(5, "p100", 4, 10), _job(0, "m40", 1, 3)]
    # 8 P100s: from t = 5, 80 GPU-s of work need 10 s more -> 15; from t = 0, 120 GPU-s -> 15
    assert makespan_lower_bound(jobs, {"p100": 8, "m40": 1}) == pytest.approx(15.0)
    # one M40: from t = 0 its two jobs need 3 + 40 s, more than the long job's own end (2 + 40)
    assert makespan_lower_bound([*jobs, _job(2, "m40", 1, 40)], {"p100": 8, "m40": 1}) == pytest.approx(43.0)


def test_summary_pairs_arms_by_repetition() -> None:
    def run(arm: str, repeat: int, wait: float, makespan: float) -> dict[str, object]:
        m = {"mean_wait_s": wait, "makespan_s": makespan, "gpu_utilization": 0.8, "mean_jct_s": wait + 10}
        return {"arm": arm, "repeat": repeat, "metrics": m}

    runs = [
        run("slurm", 1, 100, 300),
        run("hylo", 1, 50, 330),
        run("slurm", 2, 200, 300),
        run("hylo", 2, 150, 300),
    ]
    s = summarize(runs)
    wait = s["arms"]["hylo"]["mean_wait_s"]
    assert (wait["mean"], wait["min"], wait["max"], wait["n"]) == (100, 50, 150, 2)
    assert wait["ci95"][0] < 100 < wait["ci95"][1]
    change = s["paired_change_pct"]["hylo vs slurm"]
    assert change["mean_wait_s"]["values"] == [-50.0, -25.0]
    assert change["makespan_s"]["values"] == [pytest.approx(10.0), 0.0]


def test_tuned_weights_parse_and_become_up_options() -> None:
    w = parse_weights("age=20000,job_size=1000,max_age_s=300,calc_period_s=60,favor_small=1")
    assert w == SlurmWeights(age=20000, job_size=1000, max_age_s=300, calc_period_s=60, favor_small=True)
    assert w.up_args() == [
        "--priority-weights",
        "age=20000,jobsize=1000,partition=1000,qos=1000",
        "--priority-max-age",
        "5",
        "--priority-calc-period",
        "1",
        "--priority-favor-small",
    ]
    for bad in ("age", "speed=3", "age=x", "age=-1", "max_age_s=30"):
        with pytest.raises(SystemExit):
            parse_weights(bad)


def test_the_admin_rule_keeps_the_makespan_then_lowers_the_wait() -> None:
    fast_long_wait = Scored(SlurmWeights(age=1), 100.0, 50.0, 0.9)
    short_wait_longer = Scored(SlurmWeights(age=2), 102.0, 10.0, 0.88)
    within = Scored(SlurmWeights(age=3), 100.5, 40.0, 0.9)
    assert choose([fast_long_wait, short_wait_longer, within]) is within


def test_slurm_job_size_factor_orders_wide_jobs_first_unless_small_is_favoured(tmp_path: Path) -> None:
    from shared.domain.cluster import load_cluster_spec
    from shared.policies.base import PolicyContext
    from shared.scheduling.binding import bind_jobs
    from shared.traces.slurm_workload import parse_slurm_workload

    trace = tmp_path / "slurm_workloads_small.csv"
    header = "model,GPU type,Num of GPUs,batch_size,dataset,epochs,mode\n"
    trace.write_text(header + "a,p100,1,8,x,2,train\nb,p100,4,8,x,2,train\n", encoding="utf-8")
    table = parse_slurm_workload(trace, span_s=0.0).table
    workload = bind_jobs(table, load_cluster_spec("slurm-testbed"))
    ctx = PolicyContext(workload=workload, estimate=table.runtime, capacity_gpus=13)
    idx = np.arange(2)
    for small, first in ((False, 1), (True, 0)):
        policy = SlurmLikeMultifactor(SlurmWeights(favor_small=small))
        policy.bind(ctx)
        assert int(np.argmin(policy.keys(idx, 0.0))) == first
    # with equal weights Slurm's factor separates a 1- and a 4-GPU job by ~33 points, not ~231
    policy = SlurmLikeMultifactor(SlurmWeights())
    policy.bind(ctx)
    prio = policy.priority(idx, 0.0)
    assert 25 <= prio[1] - prio[0] <= 40


def test_path_profile_from_the_adapter_log(tmp_path: Path) -> None:
    log = tmp_path / "adapter_slurm.log"
    log.write_text(
        "x adapter_slurm INFO timing snapshot c1 event=100.0100 poll_start=100.0200 poll_end=100.0600 "
        "published=100.0700\n"
        "x adapter_slurm INFO timing decision c1 received=100.1700 start=100.1800 lease=100.1900 "
        "end=100.2500 updates=3 first=7:100.2100\n",
        encoding="utf-8",
    )
    jobs = [
        {"job_id": "7", "sbatch_returned": 100.0, "hylo_priority_seen": 100.24},
        {"job_id": "8", "sbatch_returned": 100.0, "hylo_priority_seen": None},
    ]
    rows = job_paths(log, jobs)
    assert len(rows) == 1
    r = rows[0]
    assert r["total"] == pytest.approx(0.24) and r["pipeline"] == pytest.approx(0.1)
    assert r["scontrol"] == pytest.approx(0.02) and r["seen"] == pytest.approx(0.03)
    assert sum(
        r[k] for k in ("to_poll", "poll", "publish", "pipeline", "lock", "lease", "scontrol", "seen")
    ) == (pytest.approx(r["total"]))
    assert profile(rows)["pipeline"]["p50"] == pytest.approx(0.1)
