"""A second, different outcome of a job is recorded as a conflict (issue 20, item 2), real NATS and SQL.

Before: outcomes were insert-or-ignore with the message id ``outcomes.<cluster>.<job_id>``, so a
forged outcome sent first won and the real one was dropped by the stream or ignored by the store,
silently. Now the real one reaches the recorder, which keeps the first and dead-letters the second
with the fields that disagree (and logs it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from services.placer.service import DEFINITION as PLACER
from tests.bus.bus_helpers import dead_letters
from tests.conftest_services import Bus
from tests.registry.registry_helpers import migrated
from tests.schemas.message_factories import outcome
from tests.shadow.shadow_helpers import running, spec_file


@pytest.mark.asyncio
async def test_a_conflicting_outcome_is_dead_lettered_as_a_conflict_and_the_first_kept(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HYLO_PLACER_ROLE", "record")
    url = f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    engine = await migrated(url)
    try:
        async with running((PLACER,), bus.settings, bus.subjects, spec_file(tmp_path), database_url=url):
            first = outcome(job_id="j7")  # e.g. a forged one, sent first
            second = first.model_copy(update={"end_s": 9_999.0, "status": "failed"})
            await bus.publisher.publish(first)
            await bus.publisher.publish(first)  # a retry of the same report: no conflict
            await bus.publisher.publish(second)
            letters = await dead_letters(bus.js, bus.subjects.all_clusters("dead"), expected=1)
            assert [letter.stage for letter in letters] == ["recorder-outcomes"]
            reason = letters[0].reason
            assert "conflicts with the one stored" in reason and "end_s 9999.0 (stored 701.0)" in reason
            assert "status 'failed' (stored 'completed')" in reason
            assert any("conflicts with the one stored" in r.getMessage() for r in caplog.records)
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT job_id, end_s, status FROM outcomes"))).all()
        assert [tuple(r) for r in rows] == [("j7", 701.0, "completed")]
    finally:
        await engine.dispose()
