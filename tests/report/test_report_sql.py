"""The database's aggregates equal the numpy reference, on a random history (SQLite and PostgreSQL).

The report reads counts, means and percentiles from SQL (``shared.report.sql``) instead of every row;
its meaning must not change. A seeded random history (``history``: snapshots with one to eight jobs,
decided by two model versions or by the base policy with fallbacks, stage latencies with a stage
missing now and then, jobs started by the decisions or by nothing stored, zero-GPU jobs, jobs ending
exactly when others start, two shadow versions, one shadow-ranked snapshot with no decision) is written
through ``shared.store.writes``; the same history in memory goes through the numpy reference
(``reference.py``: how the report computed everything before). Every number must agree up to
floating-point rounding (relative 1e-9), over the whole range and over a cut range.

Percentiles are exact in both (numpy's linear interpolation); the one approximation is the GPU
timeline of more than ``MOST_STEPS`` changes, drawn as bins: events are put in bins by
``floor((t - start) / width)``, so an event within rounding of a bin edge may land in the bin beside
it; the last test checks the bins against ``BusyTimeline.resample`` on a history whose times are not
on edges.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.report import load_report_data
from shared.report import sql as report_sql
from shared.report.aggregates import METRICS, MOST_GROUPS, Distribution
from shared.report.data import decided_by
from shared.schemas import JobOutcome, JobPlacement, PlacementDecision, Placements, ShadowPriorities
from shared.store import ensure_cluster, record_decision, record_outcome, record_shadow, shadow_ranks
from tests.report import reference as ref
from tests.report.report_helpers import migrated, unique_cluster

pytestmark = pytest.mark.asyncio

STAGES = ("featurize_wait", "featurize", "prioritize", "place")
REL = 1e-9


@dataclass
class History:
    """What was written, in memory."""

    cluster: str
    decisions: list[PlacementDecision] = field(default_factory=list)
    outcomes: list[JobOutcome] = field(default_factory=list)
    shadows: list[ShadowPriorities] = field(default_factory=list)


def history(c: str, seed: int = 7, snapshots: int = 60) -> History:
    rng = random.Random(seed)
    h = History(c)
    pending: list[str] = []
    next_job = 0
    version: str | None = None
    for k in range(1, snapshots + 1):
        t = 1000.0 * k + rng.uniform(0, 100)
        for _ in range(rng.randint(0 if pending else 1, 4)):
            pending.append(f"j{next_job}")
            next_job += 1
        jobs = pending[: rng.randint(1, 8)]
        if k in (10, 35):
            version = f"{c}-m{1 if k == 10 else 2}"
        if version is None:
            policy, model, fallback = "fcfs", None, "no model loaded"
        elif rng.random() < 0.25:
            policy, model, fallback = "fcfs", None, rng.choice(("deadline", "error <x>"))
        else:
            policy, model, fallback = "model", version, None
        started = [j for j in jobs if rng.random() < 0.3][:2]
        placements = Placements.of(
            JobPlacement(
                job_id=j, rank=r, priority=float(len(jobs) - r), nodes=("n0",) if j in started else ()
            )
            for r, j in enumerate(jobs)
        )
        stages = [s for s in STAGES if rng.random() > 0.15]
        latencies = {s: round(rng.lognormvariate(0, 1), 3) for s in stages} if rng.random() > 0.1 else {}
        h.decisions.append(
            PlacementDecision(
                cluster=c,
                correlation_id=f"{c}-s{k}",
                snapshot_time=t,
                sequence=k,
                policy=policy,
                model_version=model,
                fallback=fallback,
                placements=placements,
                latencies_ms=latencies,
            )
        )
        for j in started:
            pending.remove(j)
            start = t + rng.choice((0.0, rng.uniform(0, 50)))
            runtime = rng.choice((rng.uniform(10, 5000), 1000.0 - (start - t)))  # some end on another's start
            corr = f"{c}-s{k}" if rng.random() > 0.1 else f"{c}-elsewhere"
            h.outcomes.append(
                JobOutcome(
                    cluster=c,
                    correlation_id=corr,
                    job_id=j,
                    submit_s=t - rng.uniform(0, 3000),
                    start_s=start,
                    end_s=start + runtime,
                    gpus=rng.choice((0, 1, 2, 4, 8)),
                )
            )
        for shadow_version in (f"{c}-sh1", f"{c}-sh2"):
            if rng.random() < 0.4:
                h.shadows.append(
                    ShadowPriorities(
                        cluster=c,
                        correlation_id=f"{c}-s{k}",
                        snapshot_time=t,
                        sequence=k,
                        model_version=shadow_version,
                        applied_policy=h.decisions[-1].policy,
                        applied_model_version=h.decisions[-1].model_version,
                        job_ids=tuple(jobs),
                        priorities=tuple(rng.random() for _ in jobs),
                    )
                )
    # a snapshot the shadow ranked but no decision was stored for (its vector was stale)
    h.shadows.append(
        ShadowPriorities(
            cluster=c, correlation_id=f"{c}-stale", snapshot_time=1000.0 * snapshots + 500, sequence=snapshots + 1,
            model_version=f"{c}-sh1", applied_policy="model", applied_model_version=version,
            job_ids=("j0", "j1"), priorities=(1.0, 2.0),
        )
    )  # fmt: skip
    return h


async def write(url: str, h: History) -> None:
    engine = await migrated(url)
    async with engine.begin() as conn:
        await ensure_cluster(conn, h.cluster)
        for d in h.decisions:
            await record_decision(conn, d)
        for o in h.outcomes:
            await record_outcome(conn, o)
        for s in h.shadows:
            await record_shadow(conn, s)
    await engine.dispose()


# --- the reference, from the history in memory ----------------------------------------------------


def records(h: History, since: float | None, until: float | None, jsonb: bool) -> list[ref.SnapshotRecord]:
    """The snapshots as the report read them before: latencies as the database hands the JSON back
    (PostgreSQL's JSONB keeps keys by length, then bytes; SQLite keeps the text's order)."""
    out = []
    for d in sorted(h.decisions, key=lambda d: (d.sequence, d.snapshot_time)):
        if (since is not None and d.snapshot_time < since) or (
            until is not None and d.snapshot_time >= until
        ):
            continue
        total = sum(d.latencies_ms.values()) if d.latencies_ms else None
        placed = sum(1 for n in d.placements.node_lists() if n)
        out.append(
            ref.SnapshotRecord(
                d.correlation_id, d.snapshot_time, d.sequence, d.policy, d.model_version, d.fallback,
                dict(sorted(d.latencies_ms.items(), key=lambda kv: (len(kv[0]), kv[0])) if jsonb else d.latencies_ms),
                total, len(d.placements), placed,
            )
        )  # fmt: skip
    return out


def started_in(h: History, since: float | None, until: float | None) -> list[JobOutcome]:
    return [
        o
        for o in h.outcomes
        if (since is None or o.start_s >= since) and (until is None or o.start_s < until)
    ]


def group_of(h: History, o: JobOutcome) -> str:
    for d in h.decisions:
        if d.correlation_id == o.correlation_id and o.job_id in d.placements.job_id:
            return decided_by(d.policy, d.model_version)
    return report_sql.UNATTRIBUTED


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=REL, abs=1e-9)


def same_distribution(a: Distribution, b: Distribution) -> None:
    assert a.n == b.n
    for f in ("mean", "p50", "p90", "p99", "max", "p5", "p25", "p75", "p95"):
        assert close(getattr(a, f), getattr(b, f)), (f, getattr(a, f), getattr(b, f))


def same_array(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape
    assert np.allclose(a, b, rtol=REL, atol=1e-9, equal_nan=True), (a, b)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.mark.parametrize("window", [(None, None), (12_500.0, 41_000.0)], ids=["whole", "cut"])
async def test_the_database_gives_the_numbers_of_the_numpy_reference(
    store_url: str, window: tuple[float | None, float | None]
) -> None:
    since, until = window
    h = history(unique_cluster())
    await write(store_url, h)
    engine = await migrated(store_url)
    async with engine.connect() as conn:
        data = await load_report_data(conn, cluster=h.cluster, since=since, until=until)
    await engine.dispose()

    snaps = records(h, since, until, jsonb=store_url.startswith("postgresql"))
    jobs = started_in(h, since, until)
    times = np.array([s.snapshot_time for s in snaps] + [o.start_s for o in jobs])
    edges = ref.time_edges(times, since, until)
    same_array(data.edges, edges)

    # the history covers what it is meant to
    if since is None:
        assert {report_sql.UNATTRIBUTED, "policy:fcfs", f"{h.cluster}-m1", f"{h.cluster}-m2"} <= {
            g.decided_by for g in data.outcomes.groups
        }
        assert any(o.gpus == 0 for o in h.outcomes) and len(data.snapshots.fallbacks) >= 3
        assert all(sh.compared for sh in data.shadows) and len(data.shadows) == 2

    # snapshots: counts per decider, fallbacks per model in charge, latency per stage and per bin
    s = data.snapshots
    assert (
        len(s) == len(snaps)
        and s.rows == sum(r.rows for r in snaps)
        and s.placed == sum(r.placed for r in snaps)
    )
    assert list(s.decided) == ref.decision_counts(snaps)
    assert list(s.fallbacks) == ref.fallback_counts(snaps)
    assert s.model_versions == {r.model_version for r in snaps if r.model_version}
    expected_latency = ref.latency_summary(snaps)
    assert list(s.latency) == list(expected_latency)  # the total first, then the pipeline's order
    for stage, dist in expected_latency.items():
        same_distribution(s.latency[stage], dist)
        times_s, values = ref.stage_values(snaps, stage)
        if len(values):
            same_array(s.latency_bins[stage], ref.binned_percentiles(times_s, values, edges, (50, 99))[1])
        else:
            assert stage not in s.latency_bins

    # finished jobs: per group, the distributions, the units' medians, and p50/p90 per bin
    labels = [group_of(h, o) for o in jobs]
    values = {m: np.array([getattr(o, m) if m != "bsld" else o.bsld() for o in jobs]) for m in METRICS}
    order = sorted(set(labels), key=lambda g: (-labels.count(g), g))
    assert [g.decided_by for g in data.outcomes.groups] == order
    starts = np.array([o.start_s for o in jobs])
    for g in data.outcomes.groups:
        mask = np.array([label == g.decided_by for label in labels])
        assert g.n == int(mask.sum())
        for m in METRICS:
            same_distribution(g.metrics[m], Distribution.of(values[m][mask]))
    for m in METRICS:
        assert close(data.outcomes.medians[m], float(np.median(np.abs(values[m]))))
    assert list(data.outcomes.over_time) == order[:MOST_GROUPS]
    for group, series in data.outcomes.over_time.items():
        mask = np.array([label == group for label in labels])
        for m in METRICS:
            same_array(series[m], ref.binned_percentiles(starts[mask], values[m][mask], edges, (50, 90))[1])

    # the GPU timeline: the same step function
    ran = [
        o for o in h.outcomes if (until is None or o.start_s < until) and (since is None or o.end_s > since)
    ]
    expected = ref.busy_timeline(
        ref.Jobs(
            np.array([o.start_s for o in ran]),
            np.array([o.end_s for o in ran]),
            np.array([float(o.gpus) for o in ran]),
        ),
        since,
        until,
    )
    assert data.running_jobs == len(ran)
    assert expected is not None and isinstance(data.busy, ref.BusyTimeline)
    same_array(data.busy.times, expected.times)
    same_array(data.busy.busy, expected.busy)
    assert (data.busy.start, data.busy.end) == (expected.start, expected.end)

    # shadow models
    assert_same_shadows(data.shadows, ref.shadow_summaries(shadow_records(h, since, until)))


def shadow_records(h: History, since: float | None, until: float | None) -> list[ref.ShadowSnapshot]:
    applied = {
        d.correlation_id: dict(zip(d.placements.job_id, d.placements.rank, strict=True)) for d in h.decisions
    }
    waits = {o.job_id: o.wait_s for o in h.outcomes}
    out = []
    for s in sorted(h.shadows, key=lambda s: (s.model_version, s.snapshot_time, s.correlation_id)):
        if (since is not None and s.snapshot_time < since) or (
            until is not None and s.snapshot_time >= until
        ):
            continue
        ranks = dict(zip(s.job_ids, shadow_ranks(s.priorities), strict=True))
        jobs = sorted(s.job_ids, key=lambda j: ranks[j])
        nan = float("nan")
        out.append(
            ref.ShadowSnapshot(
                s.model_version, s.correlation_id, s.snapshot_time,
                decided_by(s.applied_policy, s.applied_model_version), tuple(jobs),
                np.array([float(ranks[j]) for j in jobs]),
                np.array([float(applied.get(s.correlation_id, {}).get(j, nan)) for j in jobs]),
                np.array([waits.get(j, nan) for j in jobs]),
            )
        )  # fmt: skip
    return out


def assert_same_shadows(got: Any, expected: list[Any]) -> None:
    assert [s.model_version for s in got] == [s.model_version for s in expected]
    for a, b in zip(got, expected, strict=True):
        assert (a.applied_by, a.snapshots, a.compared) == (b.applied_by, b.snapshots, b.compared)
        same_array(np.sort(a.rho), np.sort(b.rho))  # one per compared snapshot, in any order
        same_array(np.sort(a.top_overlap), np.sort(b.top_overlap))
        assert (a.shadow_top_jobs, a.applied_top_jobs) == (b.shadow_top_jobs, b.applied_top_jobs)
        assert close(a.shadow_top_wait, b.shadow_top_wait) and close(a.applied_top_wait, b.applied_top_wait)


async def test_a_long_timeline_is_binned_as_resample_bins_it(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more changes than ``MOST_STEPS``, the database's bins equal ``BusyTimeline.resample``."""
    monkeypatch.setattr(report_sql, "MOST_STEPS", 20)
    monkeypatch.setattr(report_sql, "STEP_BINS", 16)
    h = history(unique_cluster(), seed=11)
    await write(store_url, h)
    engine = await migrated(store_url)
    async with engine.connect() as conn:
        data = await load_report_data(conn, cluster=h.cluster)
    await engine.dispose()
    jobs = ref.Jobs(
        np.array([o.start_s for o in h.outcomes]),
        np.array([o.end_s for o in h.outcomes]),
        np.array([float(o.gpus) for o in h.outcomes]),
    )
    expected = ref.busy_timeline(jobs, None, None)
    assert expected is not None and expected.changes > 20
    binned = data.busy
    assert isinstance(binned, report_sql.BinnedBusy)
    edges, mean, peak = expected.resample(16)
    same_array(binned.edges, edges)
    assert np.allclose(binned.bin_mean, mean, rtol=1e-9, atol=1e-6)
    same_array(binned.bin_peak, peak)
    assert binned.changes == expected.changes
    assert binned.mean == pytest.approx(expected.mean, rel=1e-9)
    assert binned.peak == expected.peak
