"""Every SQL example of docs/analysts.md runs, on SQLite and PostgreSQL, and returns rows."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import text

from shared.config import PROJECT_ROOT
from tests.store.store_helpers import migrated, seed

#: the queries before "Months of data", whose roll-up and partition queries need a store with roll-ups
#: and PostgreSQL (``tests/store/test_partitions.py`` runs them)
PAGE = (PROJECT_ROOT / "docs" / "analysts.md").read_text().split("\n## Months of data", 1)[0]
QUERIES = re.findall(r"```sql\n(.*?)```", PAGE, re.S)


def test_the_document_has_queries() -> None:
    assert len(QUERIES) >= 6


@pytest.mark.asyncio
async def test_every_documented_query_runs(store_url: str) -> None:
    engine = await migrated(store_url)
    cluster = f"a-{uuid.uuid4().hex[:10]}"
    await seed(engine, cluster)
    values = {"cluster": cluster, "job_id": "j2", "since": 0.0, "until": 1e12}
    async with engine.connect() as conn:
        for sql in QUERIES:
            params = {k: v for k, v in values.items() if f":{k}" in sql}
            rows = (await conn.execute(text(sql), params)).all()
            assert rows, f"no rows from:\n{sql}"
    await engine.dispose()
