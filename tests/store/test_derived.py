"""The decision's facts kept where long reads look (migration 0008, ``shared.store.derived``): each
outcome's copy of the decision that started it and ``decision_snapshots`` agree with the decision rows,
whichever of decision and outcome is recorded first, after redeliveries, after migration 0008 filled
them in an existing store (and back), and after retention removed raw rows. Both databases.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.store import create_engine, current_revision, downgrade, record_decision, record_outcome, upgrade
from tests.store.analyst_seed import seed_history
from tests.store.conftest import DIALECTS
from tests.store.derived_check import copies, disagreements
from tests.store.store_helpers import migrated, url_for


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.mark.asyncio
@pytest.mark.parametrize("outcomes_first", [False, True], ids=["decisions-first", "outcomes-first"])
async def test_the_copies_agree_with_the_decision_rows(store_url: str, outcomes_first: bool) -> None:
    engine = await migrated(store_url)
    cluster = f"d-{uuid.uuid4().hex[:10]}"
    try:
        history = await seed_history(engine, cluster, outcomes_first=outcomes_first)
        async with engine.connect() as conn:
            assert await disagreements(conn, cluster=cluster) == []
            started = (
                await conn.execute(
                    text(
                        "SELECT job_id, decision_model_version, decision_policy, decision_rank FROM outcomes "
                        "WHERE cluster = :c ORDER BY job_id"
                    ),
                    {"c": cluster},
                )
            ).all()
            snapshots = (
                await conn.execute(
                    text(
                        "SELECT correlation_id, decision_rows, placed_rows FROM decision_snapshots "
                        "WHERE cluster = :c ORDER BY snapshot_time"
                    ),
                    {"c": cluster},
                )
            ).all()
            before = await copies(conn, cluster)
        # what the seed says (tests/store/analyst_seed.py): j4, j7 and j9 were started by s4, which
        # has no stored decision; j3 ranked first by the registered model in s1, j1 first in s3
        assert [tuple(r) for r in started] == [
            ("j0", f"m-{cluster}", "model", 2),
            ("j1", None, "fcfs", 0),
            ("j2", f"file-{cluster}", "model", 0),
            ("j3", f"m-{cluster}", "model", 0),
            ("j4", None, None, None),
            ("j5", f"file-{cluster}", "model", 3),
            ("j6", None, "fcfs", 2),
            ("j7", None, None, None),
            ("j9", None, None, None),
        ]
        assert [tuple(r) for r in snapshots] == [
            (history.corr("s1"), 4, 2),
            (history.corr("s2"), 4, 2),
            (history.corr("s3"), 5, 2),
        ]
        # every message again (a redelivery): nothing new, nothing changed
        async with engine.begin() as conn:
            for d in history.decisions.values():
                assert await record_decision(conn, d) == 0
            for o in history.outcomes.values():
                assert not await record_outcome(conn, o)
        async with engine.connect() as conn:
            assert await copies(conn, cluster) == before
    finally:
        await engine.dispose()


@pytest.mark.asyncio
async def test_migration_0008_fills_an_existing_store_and_goes_back(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade(engine)
        await seed_history(engine, "migrated-first")
        await seed_history(engine, "migrated-second", outcomes_first=True)
        async with engine.connect() as conn:
            written = await copies(conn)
        await downgrade(engine, "0007")
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda c: c.dialect.get_table_names(c))
            columns = await conn.run_sync(lambda c: [x["name"] for x in c.dialect.get_columns(c, "outcomes")])
        assert "decision_snapshots" not in tables and "decision_time" not in columns
        await upgrade(engine)  # a store of 0007 with rows: the migration computes what the writes wrote
        assert await current_revision(engine) == "0008"
        async with engine.connect() as conn:
            assert await copies(conn) == written
            assert await disagreements(conn) == []
            assert len(written[1]) == 6 and sum(r[2] is not None for r in written[0]) == 12
    finally:
        await engine.dispose()
