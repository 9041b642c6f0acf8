"""The database goes down mid-run: nothing the recorder was sent is lost, nothing is stored twice.

A throwaway PostgreSQL (``pg_outage.py``) is stopped while decisions, feature matrices (jobs),
outcomes and a model version are published, and started again seconds later. The placer's recorder
(its ``record`` role, the real service runtime) must retry every write with back-off while the
database is away (its ``/readyz`` saying so, with how many messages wait), store every row once it is
back, and dead-letter nothing.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from shared.store import create_engine, upgrade
from tests.conftest_services import Bus
from tests.outage.outage_helpers import counts, expected, recorder, recorder_stats, round_of
from tests.outage.pg_outage import outage_postgres
from tests.schemas.message_factories import model_version

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


async def _until(cond_url: str, rows: object, timeout_s: float) -> float:
    """Seconds until the store holds ``rows`` (fails after ``timeout_s``)."""
    t0 = time.monotonic()
    while True:
        try:
            now = await counts(cond_url)
        except Exception:  # still coming back
            now = None
        if now == rows:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"store holds {now}, expected {rows}")
        await asyncio.sleep(0.1)


async def test_rows_sent_during_a_database_outage_are_all_stored_after_it(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = bus.settings.model_copy(
        update={
            "subject_root": bus.subjects.root,
            "retry_window_s": 120.0,  # minutes in production; long enough here for the outage below
            "retry_backoff_s": 0.1,
            "retry_backoff_max_s": 1.0,
        }
    )
    with outage_postgres() as pg:
        engine = create_engine(pg.url)
        await upgrade(engine)
        await engine.dispose()
        async with recorder(settings, pg.url, tmp_path, monkeypatch) as rec:
            for i in range(5):  # before: stored as they come
                for m in round_of(f"before{i}"):
                    await bus.publisher.publish(m)
            await _until(pg.url, expected(5), 20)

            pg.stop()
            t_down = time.monotonic()
            for i in range(30):
                for m in round_of(f"during{i}"):
                    await bus.publisher.publish(m)
            await bus.publisher.publish(model_version(cluster="c1", version="m-outage"))
            async with httpx.AsyncClient() as client:
                while True:  # the recorders try, fail and send the messages back with a delay
                    answer = await client.get(f"{rec.url}/readyz")
                    if answer.status_code == 503 and "messages waiting" in str(answer.json()["problems"]):
                        break
                    assert time.monotonic() - t_down < 10, answer.json()
                    await asyncio.sleep(0.1)
            (problem,) = answer.json()["problems"]
            assert problem.startswith("store unavailable (") and "0 messages waiting" not in problem, problem
            await asyncio.sleep(
                max(0.0, 4.0 - (time.monotonic() - t_down))
            )  # a 4 s outage, retried meanwhile
            stats = recorder_stats(rec)
            assert sum(retried for _, retried, _ in stats.values()) > 0, stats

            pg.start()
            took = await _until(pg.url, expected(35, models=1), 30)
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"{rec.url}/readyz")).status_code == 200
            stats = recorder_stats(rec)

    assert took < 10, f"stored {took:.1f} s after the database came back"
    assert all(dead == 0 for _, _, dead in stats.values()), stats
    # each table's unique key would have refused a duplicate; equal counts mean none was lost either
