"""Every recipe of docs/analysts.md gives, on SQLite and on PostgreSQL, the answer computed in Python.

The store is filled through the real writes (``tests/store/analyst_seed.py``); each recipe's SQL is
read from the page, run with its parameters, and its rows compared with what the same question asks
of the written messages, computed here without SQL. A recipe added to the page without a check here
fails ``test_every_recipe_is_checked``.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from statistics import fmean
from typing import Any

import pytest
from sqlalchemy import text

from shared.config import PROJECT_ROOT
from shared.schemas import JobOutcome, PlacementDecision
from shared.store import record_outcome
from tests.store.analyst_seed import DAY, JOBS, History, seed_history
from tests.store.store_helpers import migrated

Row = tuple[Any, ...]
Period = tuple[float, float]


def recipes() -> dict[str, str]:
    """Heading -> SQL of every recipe (the ``### `` sections of ``## Recipes``)."""
    page = (PROJECT_ROOT / "docs" / "analysts.md").read_text(encoding="utf-8")
    section = page.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for part in section.split("\n### ")[1:]:
        heading, body = part.split("\n", 1)
        blocks = re.findall(r"```sql\n(.*?)```", body, re.S)
        assert len(blocks) == 1, f"recipe {heading!r}: expected one SQL block, found {len(blocks)}"
        out[heading.strip()] = blocks[0]
    return out


# -- the answers, from the messages ------------------------------------------------------------------


def _day(t: float) -> int:
    return math.floor(t / DAY)


def per_day_and_gpu_type(h: History, _job: str, period: Period) -> list[Row]:
    waits: dict[tuple[int, str], list[float]] = defaultdict(list)
    for o in h.outcomes.values():
        if not period[0] <= o.submit_s < period[1]:
            continue
        waits[(_day(o.submit_s), o.gpu_type or "unknown")].append(o.wait_s)
    return [(day, kind, len(w), fmean(w), max(w)) for (day, kind), w in sorted(waits.items())]


def _starting_decision(h: History, o: JobOutcome) -> PlacementDecision | None:
    for d in h.decisions.values():
        if d.correlation_id == o.correlation_id and o.job_id in d.placements.job_id:
            return d
    return None


def per_model_version(h: History, _job: str, period: Period) -> list[Row]:
    started: dict[tuple[str, str | None], list[tuple[JobOutcome, PlacementDecision]]] = defaultdict(list)
    for o in h.outcomes.values():
        d = _starting_decision(h, o)
        if d is None:  # started by the cluster's own cycle: no stored decision
            continue
        if not period[0] <= d.snapshot_time < period[1]:  # the period of the decisions
            continue
        who = d.model_version or f"policy:{d.policy}"
        started[(who, h.model_status.get(d.model_version or ""))].append((o, d))
    return [
        (
            who,
            status,
            len(pairs),
            fmean(o.wait_s for o, _ in pairs),
            fmean(o.bsld() for o, _ in pairs),
            sum(d.fallback is not None for _, d in pairs),
        )
        for (who, status), pairs in sorted(started.items())
    ]


def per_user_and_partition(h: History, _job: str, period: Period) -> list[Row]:
    groups: dict[tuple[str, str], list[JobOutcome]] = defaultdict(list)
    for o in h.outcomes.values():
        if not period[0] <= o.start_s < period[1]:
            continue
        if o.job_id not in JOBS:  # never seen pending: no job row, so no user (the join left it out)
            continue
        _, _, user, partition = JOBS[o.job_id]
        groups[(user, partition)].append(o)
    return [
        (
            user,
            partition,
            len(os),
            fmean(o.wait_s for o in os),
            max(o.wait_s for o in os),
            sum(o.gpus * (o.end_s - o.start_s) for o in os) / 3600.0,
        )
        for (user, partition), os in sorted(groups.items())
    ]


def why_did_it_wait(h: History, job: str, _period: Period) -> list[Row]:
    submit = JOBS[job][0]
    o = h.outcomes.get(job)
    rows = []
    for d in sorted(h.decisions.values(), key=lambda d: d.sequence):
        p = next((p for p in d.placements if p.job_id == job), None)
        if p is None:
            continue
        status = "placed" if p.nodes else ("waiting" if p.reserved_s is None else "reserved")
        started = o is not None and o.correlation_id == d.correlation_id
        rows.append(
            (
                d.sequence,
                d.snapshot_time,
                d.snapshot_time - submit,
                p.rank,
                len(d.placements),
                p.priority,
                p.score,
                status,
                p.reserved_s,
                list(p.nodes),
                d.policy,
                d.model_version,
                h.model_status.get(d.model_version or ""),
                d.fallback,
                int(started),
                None if o is None else o.start_s,
                list(o.nodes) if o is not None and o.nodes else None,
                None if o is None else o.gpu_type,
            )
        )
    return rows


CHECKS: dict[str, Callable[[History, str, Period], list[Row]]] = {
    "Mean wait per day and GPU type": per_day_and_gpu_type,
    "Waits per model version": per_model_version,
    "Waits per user and virtual cluster (partition)": per_user_and_partition,
    "Why did job X wait?": why_did_it_wait,
}

#: jobs asked about: started by a later decision; reserved, then started by the cluster's own cycle
#: (nodes not reported); still waiting
JOBS_ASKED = ("j1", "j4", "j8")
#: periods asked about (``:since``, ``:until``): all of it, and one that leaves out the jobs submitted
#: on the first day but one (j3, a quarter second before midnight), the last job started (j9) and the
#: first and last decisions (s1, s3)
PERIODS: tuple[Period, ...] = ((0.0, 1e12), (DAY - 1.0, DAY + 5100.0), (DAY + 500.0, DAY + 2000.0))


def _plain(value: Any) -> Any:
    """A value as the test compares it: JSON text parsed (drivers return JSON columns as text)."""
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def same_rows(got: Sequence[Row], want: Sequence[Row]) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if len(g) != len(w):
            return False
        for a, b in zip(g, w, strict=True):
            a = _plain(a)
            if isinstance(b, float) and isinstance(a, int | float):
                if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif a != b:
                return False
    return True


def test_every_recipe_is_checked() -> None:
    assert set(recipes()) == set(CHECKS)


#: a job the cluster started before any snapshot saw it pending: an outcome without a job row
UNSEEN = "jx"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("outcomes_first", "jobs_last"),
    [(False, False), (True, False), (True, True)],
    ids=["decisions-first", "outcomes-first", "jobs-last"],
)
async def test_every_recipe_gives_the_answer_computed_in_python(
    store_url: str, outcomes_first: bool, jobs_last: bool
) -> None:
    """Also when each outcome was recorded before the decision that started it, and before its job's
    row: "Waits per model version" reads the outcome's copy of that decision (migration 0008), "Waits per
    user and virtual cluster" its copy of the job's user and partition (migration 0009), which the later
    writes fill. An outcome of a job never seen pending (no job row) counts where the recipes read
    outcomes alone, not per user."""
    engine = await migrated(store_url)
    cluster = f"r-{uuid.uuid4().hex[:10]}"
    history = await seed_history(engine, cluster, outcomes_first=outcomes_first, jobs_last=jobs_last)
    unseen = JobOutcome(
        cluster=cluster,
        correlation_id=history.corr("s4"),
        job_id=UNSEEN,
        submit_s=DAY + 1000.0,
        start_s=DAY + 1500.0,
        end_s=DAY + 1800.0,
        gpus=2,
        gpu_type="T4",
    )
    async with engine.begin() as conn:
        assert await record_outcome(conn, unseen)
    history.outcomes[UNSEEN] = unseen
    # another cluster's rows must not leak into the answers
    await seed_history(engine, f"r-{uuid.uuid4().hex[:10]}")
    try:
        async with engine.connect() as conn:
            for heading, sql in recipes().items():
                for job in JOBS_ASKED if ":job_id" in sql else ("-",):
                    for period in PERIODS if ":since" in sql else ((0.0, 1e12),):
                        params: dict[str, Any] = {"cluster": cluster, "since": period[0], "until": period[1]}
                        params = {k: v for k, v in {**params, "job_id": job}.items() if f":{k}" in sql}
                        got = [tuple(r) for r in (await conn.execute(text(sql), params)).all()]
                        want = CHECKS[heading](history, job, period)
                        assert want or period != PERIODS[0], f"{heading}: the seed gives no answer to check"
                        assert same_rows(got, want), (
                            f"{heading} ({job}, {period}):\n got  {got}\n want {want}"
                        )
    finally:
        await engine.dispose()
