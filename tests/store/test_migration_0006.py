"""Revision 0006 moves a store with rows forward: every old row reads back as it was written, the new
columns read as NULL ("not recorded"), the views still answer, and the new writes work at once; on
SQLite and PostgreSQL, each on a database of its own.

The rows at 0005 are inserted with exactly the columns the writes of that revision filled (the
current writes fill columns 0005 does not have), model versions with their history included: on
SQLite the migration copies ``model_versions``, which that history references.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.schemas import JobOutcome
from shared.store import (
    create_engine,
    current_revision,
    downgrade,
    record_external_model,
    record_outcome,
    upgrade,
)
from shared.store.models import (
    Cluster,
    Decision,
    Job,
    ModelVersionEvent,
    ModelVersionRow,
    Outcome,
    table_of,
)
from tests.schemas.message_factories import model_version
from tests.store.conftest import DIALECTS
from tests.store.store_helpers import url_for

AT = datetime(2026, 11, 20, tzinfo=UTC)
SHA = "ab" * 32

#: rows as revision 0005's writes stored them
OLD: dict[Any, list[dict[str, Any]]] = {
    Cluster: [{"name": "old"}],
    Job: [
        {
            "cluster": "old",
            "job_id": f"j{i}",
            "submit_s": 10.0 * i,
            "gpus": 1 + i,
            "gpu_milli": 1000,
            "cpus_milli": -1,
            "mem_mib": -1,
            "est_runtime_s": 600.0,
            "user_name": "u0",
            "partition": "a",
            "qos": "normal",
            "gpu_types": [],
        }
        for i in range(3)
    ],
    Decision: [
        {
            "correlation_id": "c1",
            "cluster": "old",
            "job_id": f"j{i}",
            "snapshot_time": 50.0,
            "sequence": 1,
            "rank": i,
            "priority": 3.0 - i,
            "nodes": ["n0"] if i == 0 else [],
            "placed": i == 0,
            "mode": "pack" if i == 0 else None,
            "policy": "model",
            "model_version": "v-old",
            "fallback": None,
            "features": {"wait": 0.5, "gpus": 0.25 * i},
            "latencies_ms": {"place": 1.0},
            "latency_ms": 1.0,
        }
        for i in range(3)
    ],
    Outcome: [
        {
            "cluster": "old",
            "job_id": "j0",
            "correlation_id": "c1",
            "submit_s": 0.0,
            "start_s": 50.0,
            "end_s": 650.0,
            "wait_s": 50.0,
            "jct_s": 650.0,
            "bsld": 650.0 / 600.0,
            "gpus": 1,
            "status": "completed",
        }
    ],
    ModelVersionRow: [
        {
            "version": "v-old",
            "cluster": "old",
            "sha256": SHA,
            "uri": "/m/old",
            "card": {"reward": "bsld"},
            "status": "current",
            "created_at": AT,
            "promoted_at": AT,
        }
    ],
    ModelVersionEvent: [
        {
            "version": "v-old",
            "cluster": "old",
            "event": event,
            "from_status": before,
            "to_status": after,
            "actor": "tester",
            "forced": False,
            "at": AT,
        }
        for event, before, after in (("registered", None, "candidate"), ("promoted", "candidate", "current"))
    ],
}
NEW_DECISION_COLUMNS = ("score", "placer_status", "reserved_s", "placer", "solver_status", "raw_features")
NEW_OUTCOME_COLUMNS = ("nodes", "node_gpus", "gpu_type")


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return url_for("sqlite", tmp_path, "")
    return str(request.getfixturevalue("fresh_postgres_url"))


async def _rows(conn: AsyncConnection, model: Any, columns: list[str]) -> list[dict[str, Any]]:
    table = table_of(model)
    pk = list(table.primary_key.columns)
    result = await conn.execute(select(*(table.c[c] for c in columns)).order_by(*pk))
    return [dict(r._mapping) for r in result]


def _same(stored: dict[str, Any], written: dict[str, Any]) -> bool:
    """Equal column by column; timestamps compared as instants (SQLite gives them back naive)."""
    for key, value in written.items():
        got = stored[key]
        if isinstance(value, datetime) and isinstance(got, datetime):
            got = got if got.tzinfo else got.replace(tzinfo=UTC)
        if got != value:
            return False
    return True


async def _old_rows_read_back(conn: AsyncConnection, only: bool = True) -> None:
    """Every old row is stored as written (and, with ``only``, no other row)."""
    for model, rows in OLD.items():
        stored = await _rows(conn, model, list(rows[0]))
        if only:
            assert len(stored) == len(rows), model.__tablename__
        for w in rows:
            assert any(_same(s, w) for s in stored), f"{model.__tablename__}: {w} not in {stored}"


@pytest.mark.asyncio
async def test_a_store_at_0005_with_rows_moves_forward(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade(engine, "0005")
        async with engine.begin() as conn:
            for model, rows in OLD.items():
                await conn.execute(table_of(model).insert(), rows)
        await upgrade(engine, "0006")
        assert await current_revision(engine) == "0006"
        async with engine.connect() as conn:
            await _old_rows_read_back(conn)
            new = await _rows(conn, Decision, list(NEW_DECISION_COLUMNS))
            assert all(v is None for row in new for v in row.values())
            new = await _rows(conn, Outcome, list(NEW_OUTCOME_COLUMNS))
            assert all(v is None for row in new for v in row.values())
            view = (
                await conn.execute(
                    text(
                        "SELECT job_id, started_job, placer_status, ran_on FROM decision_outcomes "
                        "WHERE cluster = 'old' ORDER BY job_id"
                    )
                )
            ).all()
            assert [tuple(r) for r in view] == [
                ("j0", 1, None, None),
                ("j1", 0, None, None),
                ("j2", 0, None, None),
            ]
        # the new writes, at once: an outcome with where it ran, a model given by path (today's writes
        # fill columns of later revisions too: the store moves to the newest first, as a service's start does)
        await upgrade(engine)
        async with engine.begin() as conn:
            await record_outcome(
                conn,
                JobOutcome(
                    cluster="old",
                    correlation_id="c1",
                    job_id="j1",
                    submit_s=10.0,
                    start_s=60.0,
                    end_s=70.0,
                    gpus=2,
                    nodes=("n0", "n1"),
                    node_gpus=(1, 1),
                    gpu_type="V100",
                ),
            )
            assert await record_external_model(conn, model_version(cluster="old", version="file-abc"))
        async with engine.connect() as conn:
            ran = (await conn.execute(text("SELECT gpu_type FROM outcomes WHERE job_id = 'j1'"))).scalar_one()
            status = (
                await conn.execute(text("SELECT status FROM model_versions WHERE version = 'file-abc'"))
            ).scalar_one()
            assert (ran, status) == ("V100", "external")
            await _old_rows_read_back(conn, only=False)
        # and back: 0005 takes the rows it knows, an external version as a candidate
        await downgrade(engine, "0005")
        async with engine.connect() as conn:
            await _old_rows_read_back(conn, only=False)
            status = (
                await conn.execute(text("SELECT status FROM model_versions WHERE version = 'file-abc'"))
            ).scalar_one()
            assert status == "candidate"
    finally:
        await engine.dispose()
