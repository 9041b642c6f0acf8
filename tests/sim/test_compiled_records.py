"""The compiled core's named records (``shared.sim.compiled.records``) and how ``run`` fills them.

Why: the core reads jobs, settings and its counters by field name (issue 18, item 4), so a field
that ``run`` forgets to fill reads as 0 without any error. These tests pin what each policy kind
gets in the JOB records, that the loop's counters come back into the result, and that ``Core``
stays a structref (a tuple of the loop's ~120 arrays made it 5x slower: see ``kernels``).
"""

from __future__ import annotations

import numpy as np
import pytest

from shared.policies import POLICY_NAMES, make_policy
from shared.sim.compiled import records
from shared.sim.compiled.run import HEAD_CHUNK, _Prepared
from shared.sim.config import SimConfig
from shared.sim.simulator import Simulator
from tests.sim.test_compiled import small_bound

#: the policy kind each base policy is simulated as, and the JOB columns only it reads
KINDS = {
    "fcfs": (records.P_STATIC, ("key",)),
    "sjf": (records.P_STATIC, ("key",)),
    "f1": (records.P_STATIC, ("key",)),
    "wfp3": (records.P_WFP3, ("wfp3_est", "wfp3_width")),
    "unicep": (records.P_UNICEP, ("unicep_denom",)),
    "multifactor": (records.P_MULTIFACTOR, ("mf_static", "mf_demand")),
    # the same kinds on predicted runtimes, and the static small/large split
    "sjf-pred": (records.P_STATIC, ("key",)),
    "f1-pred": (records.P_STATIC, ("key",)),
    "small-first": (records.P_STATIC, ("key",)),
    "wfp3-pred": (records.P_WFP3, ("wfp3_est", "wfp3_width")),
    "unicep-pred": (records.P_UNICEP, ("unicep_denom",)),
}


def prepared(policy: str, cfg: SimConfig | None = None, rng: tuple[int, int] | None = None) -> _Prepared:
    sim = Simulator(small_bound(), make_policy(policy), cfg or SimConfig())
    return _Prepared(sim, rng, external=False)


def test_every_base_policy_has_a_kind() -> None:
    assert set(KINDS) == set(POLICY_NAMES) - {"sjf-oracle"}  # sjf's keys from true runtimes


@pytest.mark.parametrize("policy", sorted(KINDS))
def test_job_records_hold_the_columns_of_the_policy_kind(policy: str) -> None:
    run = prepared(policy, rng=(1, 5))
    sim, jobs = run.sim, run.sim.w.jobs
    kind, columns = KINDS[policy]
    rec = run.jobs
    assert rec.dtype == records.JOB and len(rec) == 4
    # the run's jobs, numbered from 0
    np.testing.assert_array_equal(rec["submit"], jobs.submit[1:5])
    np.testing.assert_array_equal(rec["runtime"], jobs.runtime[1:5])
    np.testing.assert_array_equal(rec["est"], sim.est[1:5])
    np.testing.assert_array_equal(rec["gpus"], jobs.gpus[1:5])
    np.testing.assert_array_equal(rec["milli"], jobs.gpu_milli[1:5])
    np.testing.assert_array_equal(rec["shape"], sim.w.shape[1:5])
    cfg = run._args[4]
    assert isinstance(cfg, records.Config)
    assert cfg.kind == kind and cfg.head_chunk == HEAD_CHUNK and cfg.best_fit
    others = {c for _, cs in KINDS.values() for c in cs} - set(columns)
    for column in columns:
        assert rec[column].any(), column
    for column in others:
        assert not rec[column].any(), column
    if kind == records.P_MULTIFACTOR:
        params = run._args[5].params[0]
        assert params["two"] == 2.0 and params["weight_version"] == -1.0 and params["lam"] > 0


def test_order_classes_list_each_job_once_in_arrival_order() -> None:
    run = prepared("sjf")
    orders = run._args[3]
    assert isinstance(orders, records.Orders)
    seen = []
    for b in range(len(orders.ptr) - 1):
        members = orders.jobs[orders.ptr[b] : orders.ptr[b + 1]]
        assert (np.diff(members) > 0).all()
        assert (run.jobs["order"][members] == b).all()
        seen += members.tolist()
    assert sorted(seen) == list(range(len(run.jobs)))
    np.testing.assert_array_equal(orders.jobs[orders.pos], np.arange(len(run.jobs)))


@pytest.mark.parametrize("backfill", ["easy", "none"])
def test_the_loop_counters_come_back_in_the_result(backfill: str) -> None:
    run = prepared("wfp3", SimConfig(backfill=backfill))
    run.simulate(0)
    res = run.result(None, 0.0)
    counts = run.out.counts[0]
    assert int(counts["cycles"]) == res.cycles > 0
    assert int(counts["n_timeline"]) == len(res.timeline_t) > 0
    assert int(counts["error"]) == 0
    # every job started and ended: nothing left queued, running or busy
    assert int(counts["n_queued"]) == int(counts["n_running"]) == int(counts["n_ends"]) == 0
    assert int(counts["busy_milli"]) == 0 and int(counts["next_job"]) == len(run.jobs)
    assert not np.isnan(res.start).any()
    # the idle cluster again
    np.testing.assert_array_equal(run.free.whole, run.cluster.gpus[0])


def test_core_is_a_structref() -> None:
    from numba.experimental import structref

    from shared.sim.compiled import kernels

    assert issubclass(kernels.Core, structref.StructRefProxy)
    assert records.CORE_FIELDS[0] == "jobs" and len(set(records.CORE_FIELDS)) == len(records.CORE_FIELDS)
