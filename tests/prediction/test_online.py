"""The live predictor (``shared.prediction.online``): the offline predictor's results when fed a
trace as a live cluster would see it, no leak, cold start and the batch refits."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shared.domain.jobs import JobTable
from shared.prediction import SOURCES, PredictorSettings, fit_schedule, logged_finish, predict_runtimes
from shared.prediction.online import OnlinePredictor, Submissions
from tests.prediction.helpers import FAST, synthetic_jobs


def tuned(**changes: float) -> PredictorSettings:
    return FAST.model_copy(update=changes)


def submissions(table: JobTable, rows: list[int]) -> Submissions:
    """Rows of ``table`` as a snapshot would list them (the partition is the VC)."""
    est = [float(table.estimate[i]) if np.isfinite(table.estimate[i]) else 0.0 for i in rows]
    return Submissions(
        job_id=[str(table.ids[i]) for i in rows],
        submit_s=[float(table.submit[i]) for i in rows],
        gpus=[int(table.gpus[i]) for i in rows],
        gpu_milli=[int(table.gpu_milli[i]) for i in rows],
        gpu_types=[() for _ in rows],
        cpus_milli=[int(table.cpus_milli[i]) for i in rows],
        mem_mib=[int(table.mem_mib[i]) for i in rows],
        est_runtime_s=est,
        user=[table.users[table.user[i]] for i in rows],
        partition=[table.vcs[table.vc[i]] for i in rows],
        qos=["normal" for _ in rows],
    )


def live_trace(n: int) -> JobTable:
    """Synthetic jobs holding only what a snapshot can tell (no group column), on the clock origin 0."""
    table = synthetic_jobs(n)
    return replace(table, meta=replace(table.meta, origin=0.0), group=np.full(n, -1, dtype=np.int64))


def replay(table: JobTable, settings: PredictorSettings) -> tuple[np.ndarray, OnlinePredictor]:
    """Feed ``table`` to an OnlinePredictor in time order: each job is listed by a snapshot at its
    submit, its outcome arrives at its logged finish (then a due refit runs). Returns the rows
    (point, low, high, source) per job."""
    finish = logged_finish(table)
    events = sorted(
        [(float(s), 1, i) for i, s in enumerate(table.submit)]
        + [(float(f), 0, i) for i, f in enumerate(finish)]
    )
    predictor = OnlinePredictor(settings)
    out = np.full((4, len(table)), np.nan)
    batch: list[int] = []

    def flush() -> None:
        if batch:
            got = predictor.predict(submissions(table, batch))
            out[:, batch] = np.vstack([got.runtime, got.low, got.high, got.source])
            batch.clear()

    for at, kind, i in events:
        if kind == 1:
            batch.append(i)  # jobs submitted between two outcomes see the same state: one snapshot
            continue
        flush()
        assert predictor.record_outcome(str(table.ids[i]), at - float(table.runtime[i]), at)
        predictor.refit()
    flush()
    return out, predictor


def test_fed_a_trace_live_it_predicts_what_the_offline_predictor_does() -> None:
    table = live_trace(200)
    offline = predict_runtimes(table, FAST, use_cache=False)
    live, predictor = replay(table, FAST)
    np.testing.assert_array_equal(live[3], offline.source)
    np.testing.assert_array_equal(live[0], offline.runtime)
    np.testing.assert_array_equal(live[1], offline.low)
    np.testing.assert_array_equal(live[2], offline.high)
    assert offline.fits >= 2 and (offline.source == SOURCES.index("model")).any()
    # live, every due fit is made (offline skips a fit that no job would use): at least as many
    assert predictor.status()["fits"] >= offline.fits


def test_a_prediction_once_made_does_not_change_when_later_outcomes_arrive() -> None:
    table = live_trace(300)
    s = tuned(min_train=40, retrain_jobs=20)
    finish = logged_finish(table)
    by_finish = np.argsort(finish, kind="stable")
    first, later = by_finish[:150], by_finish[150:]
    fresh = [i for i in range(len(table)) if table.submit[i] > finish[first].max()][:10]

    def fed(outcomes: np.ndarray) -> OnlinePredictor:
        p = OnlinePredictor(s)
        # the jobs that finish are seen pending first (the fresh ones only after the outcomes)
        p.predict(submissions(table, sorted(set(first.tolist()) | (set(later.tolist()) - set(fresh)))))
        for i in outcomes.tolist():
            p.record_outcome(str(table.ids[i]), finish[i] - table.runtime[i], finish[i])
            p.refit()
        return p

    p = fed(first)
    before = p.predict(submissions(table, fresh))
    assert (before.source == SOURCES.index("model")).all()
    fits = p.status()["fits"]
    for i in later.tolist():  # every later outcome arrives, refits run
        p.record_outcome(str(table.ids[i]), finish[i] - table.runtime[i], finish[i])
        p.refit()
    assert p.status()["fits"] > fits
    after = p.predict(submissions(table, fresh))
    for name in ("runtime", "low", "high", "source"):
        np.testing.assert_array_equal(getattr(after, name), getattr(before, name))
    # and what it predicted used only what had arrived: a predictor that never got the later
    # outcomes predicts the same
    again = fed(first).predict(submissions(table, fresh))
    np.testing.assert_array_equal(again.runtime, before.runtime)


def test_cold_start_falls_back_like_the_offline_predictor() -> None:
    s = tuned(min_train=40)
    p = OnlinePredictor(s)

    def job(jid: str, submit: float, est: float, user: str, part: str = "p") -> Submissions:
        return Submissions([jid], [submit], [1], [1000], [()], [-1], [-1], [est], [user], [part], ["normal"])

    got = p.predict(job("a", 0.0, 900.0, "u1"))
    assert got.runtime[0] == 900.0 and SOURCES[got.source[0]] == "user estimate" and np.isnan(got.low[0])
    got = p.predict(job("b", 0.0, 0.0, "u1"))
    assert got.runtime[0] == s.default_runtime_s and SOURCES[got.source[0]] == "default"
    assert p.record_outcome("a", 10.0, 110.0) and p.record_outcome("b", 10.0, 310.0)
    got = p.predict(job("c", 500.0, 0.0, "u1"))  # the user's last two: (100 + 300) / 2 x safety
    assert SOURCES[got.source[0]] == "history" and got.runtime[0] == pytest.approx(200.0 * s.safety)
    got = p.predict(job("d", 500.0, 0.0, "u2", part="q"))  # no user or VC history: all finished
    assert SOURCES[got.source[0]] == "trace median" and got.runtime[0] == pytest.approx(200.0)
    assert p.status()["fits"] == 0 and not p.refit()


def test_refits_come_in_batches_by_the_offline_rule_and_only_from_received_outcomes() -> None:
    table = live_trace(300)
    s = tuned(min_train=40, retrain_jobs=50, retrain_growth=10.0)
    finish = logged_finish(table)
    p = OnlinePredictor(s)
    p.predict(submissions(table, list(range(len(table)))))
    assert not p.record_outcome("never-seen", 0.0, 1.0)
    for i in np.argsort(finish, kind="stable").tolist():
        p.record_outcome(str(table.ids[i]), finish[i] - table.runtime[i], finish[i])
        p.refit()
    times, counts = fit_schedule(finish, s)
    status = p.status()
    assert status["fits"] == len(times) == 6  # at 40, 90, 140, 190, 240, 290 finished jobs
    assert status["last_fit"]["finished"] == counts[-1] and status["last_fit"]["train_size"] == min(
        counts[-1], s.max_train
    )
    assert status["unmatched_outcomes"] == 1 and status["finished"] == len(table)


def test_memory_is_bounded() -> None:
    table = live_trace(120)
    s = tuned(min_train=10, max_train=20, live_memory=30)
    p = OnlinePredictor(s)
    p.predict(submissions(table, list(range(len(table)))))
    assert p.status()["remembered_pending"] == 30
    finish = logged_finish(table)
    for i in range(90, 120):
        p.record_outcome(str(table.ids[i]), finish[i] - table.runtime[i], finish[i])
    assert p.status()["remembered_finished"] == 30 and p.status()["unmatched_outcomes"] == 0
