"""After a ``hylo run``/``hylo up`` replay: did the store get every row the pipeline sent it?

Why checked against the bus and not the services' counters: a recorder that gave up, a write that
failed silently or a service that died after acking would all leave its own counters looking fine.
What must be stored is read from what was published: every decision on this run's cluster
``placements`` subject since the replay began (one ``decisions`` row per job it ranks, a ``jobs``
row for each of those jobs: the recorder stores a queue's jobs from the same matrix the decision
ranked), and the outcomes the simulated cluster published (one ``outcomes`` row each). Rows are
counted per run (``hylo up`` prefixes a run's job ids), so earlier runs on the same cluster do not
hide a loss.

The recorders retry while the database is unavailable, so the check waits: it is repeated until
nothing is missing, for ``wait_s`` after the last row arrived. A run with rows still missing then
says how many and exits non-zero (``shared.cli.run``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text

from shared.bus import BusSettings, connect, stream_name
from shared.bus.browse import read_stream
from shared.bus.consumer import short
from shared.bus.settings import message_limits
from shared.schemas.messages import PlacementDecision
from shared.schemas.subjects import Subjects

__all__ = ["Expected", "StoreCheck", "expected_rows", "placements_mark", "store_check", "wait_for_store"]


@dataclass(frozen=True)
class Expected:
    """What the store must hold after a run: decisions (correlation id -> rows), their jobs, outcomes."""

    decisions: dict[str, int]
    jobs: frozenset[str]
    outcomes: int


@dataclass(frozen=True)
class StoreCheck:
    """What the store holds of what it was sent."""

    expected: Expected
    #: correlation id -> rows stored, for this run's jobs
    decision_rows: dict[str, int]
    outcomes_stored: int
    jobs_missing: int

    @property
    def decisions_missing(self) -> int:
        """Decisions with fewer rows stored than jobs ranked (a decision is stored whole or not at all)."""
        return sum(1 for c, n in self.expected.decisions.items() if self.decision_rows.get(c, 0) < n)

    @property
    def decision_rows_missing(self) -> int:
        return sum(max(0, n - self.decision_rows.get(c, 0)) for c, n in self.expected.decisions.items())

    @property
    def outcomes_missing(self) -> int:
        return max(0, self.expected.outcomes - self.outcomes_stored)

    @property
    def lost_rows(self) -> int:
        """Rows the store was sent and does not hold (decisions, outcomes and jobs rows)."""
        return self.decision_rows_missing + self.outcomes_missing + self.jobs_missing

    def progress(self) -> tuple[int, int, int]:
        """Grows while the recorders store rows (the wait restarts on it)."""
        return (sum(self.decision_rows.values()), self.outcomes_stored, -self.jobs_missing)

    def stored_line(self) -> str:
        """What the store holds (the line ``hylo run`` has always printed)."""
        decided, outcomes = len(self.decision_rows), self.outcomes_stored
        return f"{decided:,} decisions and {outcomes:,} of {self.expected.outcomes:,} outcomes recorded"

    def lost_line(self) -> str:
        e = self.expected
        return (
            f"lost {self.lost_rows:,} rows: {self.decisions_missing:,} of {len(e.decisions):,} decisions "
            f"({self.decision_rows_missing:,} rows), {self.outcomes_missing:,} of {e.outcomes:,} outcomes "
            f"and {self.jobs_missing:,} of {len(e.jobs):,} jobs rows are not in the store"
        )

    def to_json(self) -> dict[str, int]:
        e = self.expected
        return {
            "lost_rows": self.lost_rows,
            "decisions_expected": len(e.decisions),
            "decisions_missing": self.decisions_missing,
            "decision_rows_expected": sum(e.decisions.values()),
            "decision_rows_missing": self.decision_rows_missing,
            "outcomes_expected": e.outcomes,
            "outcomes_missing": self.outcomes_missing,
            "jobs_expected": len(e.jobs),
            "jobs_missing": self.jobs_missing,
        }


async def placements_mark(bus: BusSettings) -> int:
    """The placements stream's last sequence now: the run's decisions are the ones after it."""
    nc = await connect(bus)
    try:
        info = await nc.jetstream().stream_info(stream_name(Subjects(bus.subject_root), "placements"))
        return int(info.state.last_seq or 0)
    finally:
        await nc.close()


async def expected_rows(
    bus: BusSettings, cluster: str, after_seq: int, prefix: str, outcomes: int
) -> Expected:
    """The decisions published on ``cluster``'s placements subject after ``after_seq`` whose jobs are
    this run's (ids starting with ``prefix``), read back from the stream; a decision that ranks no
    job stores no row and is left out."""
    subjects = Subjects(bus.subject_root)
    nc = await connect(bus)
    decisions: dict[str, int] = {}
    jobs: set[str] = set()
    try:
        js = nc.jetstream()
        limits = message_limits(bus, nc.max_payload)
        stream = stream_name(subjects, "placements")
        subject = subjects.of(cluster, "placements")
        # a decision that does not decode was dead-lettered by the recorder too
        for _, decision in await read_stream(
            js, subject, stream, PlacementDecision, limits, start_seq=after_seq + 1
        ):
            ids = [j for j in decision.placements.job_id if j.startswith(prefix)]
            if ids:
                decisions[decision.correlation_id] = len(ids)
                jobs.update(ids)
    finally:
        await nc.close()
    return Expected(decisions=decisions, jobs=frozenset(jobs), outcomes=outcomes)


async def store_check(database_url: str, cluster: str, prefix: str, expected: Expected) -> StoreCheck:
    """Count what the store holds of ``expected`` (this run's rows: job ids starting with ``prefix``)."""
    from shared.store import create_engine

    engine = create_engine(database_url)
    like = {"c": cluster, "p": prefix + "%"}
    try:
        async with engine.connect() as conn:
            per = await conn.execute(
                text(
                    "SELECT correlation_id, COUNT(*) FROM decisions "
                    "WHERE cluster = :c AND job_id LIKE :p GROUP BY correlation_id"
                ),
                like,
            )
            rows = {str(c): int(n) for c, n in per.all()}
            outcomes = await conn.scalar(
                text("SELECT COUNT(*) FROM outcomes WHERE cluster = :c AND job_id LIKE :p"), like
            )
            stored = await conn.execute(
                text("SELECT job_id FROM jobs WHERE cluster = :c AND job_id LIKE :p"), like
            )
            jobs = {str(j) for (j,) in stored.all()}
        missing = len(expected.jobs - jobs)
        return StoreCheck(expected, rows, int(outcomes or 0), missing)
    finally:
        await engine.dispose()


def wait_for_store(
    check: Callable[[], StoreCheck], alive: Callable[[], None], wait_s: float, sleep_s: float = 0.5
) -> StoreCheck | str:
    """Repeat ``check`` until nothing is missing, or ``wait_s`` passed since rows last arrived (or
    since the start); ``alive`` raises if a service died meanwhile. The last check, or why the store
    could not be read at all."""
    deadline = time.monotonic() + wait_s
    last: StoreCheck | None = None
    error = "not checked"
    while True:
        try:
            now = check()
        except Exception as err:  # the store is still unavailable: the recorders are retrying
            error = f"could not read the store: {short(err)}"
        else:
            if now.lost_rows == 0:
                return now
            if last is None or now.progress() != last.progress():
                deadline = time.monotonic() + wait_s
            last = now
        if time.monotonic() > deadline:
            return last if last is not None else error
        alive()
        time.sleep(sleep_s)


def run_check(
    bus: BusSettings, database_url: str, cluster: str, prefix: str, after_seq: int, outcomes: int
) -> Callable[[], StoreCheck]:
    """``wait_for_store``'s check for one run: the expected rows read once, the store each time."""
    expected = asyncio.run(expected_rows(bus, cluster, after_seq, prefix, outcomes))
    return lambda: asyncio.run(store_check(database_url, cluster, prefix, expected))
