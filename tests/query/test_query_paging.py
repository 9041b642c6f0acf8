"""The short lists page too (issue 20, item 4): clusters by name, model versions newest first, at
most ``HYLO_QUERY_LIST_MAX`` per page, with keyset cursors like decisions'. Real PostgreSQL and
SQLite stores, rows written through shared.store.writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.query import QuerySettings
from shared.query.cursor import encode_after
from shared.store import record_model_version
from tests.query.query_helpers import client, migrated, seed, unique_cluster
from tests.schemas.message_factories import model_version

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


async def pages(http: httpx.AsyncClient, path: str, key: str, **params: Any) -> list[list[Any]]:
    """Every page of a list, following ``next_cursor``."""
    out: list[list[Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await http.get(path, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        out.append(body[key])
        cursor = body["next_cursor"]
        if cursor is None:
            return out


async def test_models_page_newest_first_with_ties_by_version(store_url: str) -> None:
    c = unique_cluster()
    engine = await migrated(store_url)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    # five versions: two share a creation time (the tie is broken by version)
    created = [
        start,
        start + timedelta(hours=1),
        start + timedelta(hours=1),
        start + timedelta(hours=2),
        start,
    ]
    async with engine.begin() as conn:
        for k, at in enumerate(created):
            message = model_version(cluster=c, version=f"{c}-m{k}").model_copy(update={"created_at": at})
            await record_model_version(conn, message)
    await engine.dispose()
    async with client(store_url, QuerySettings(query_list_max=4)) as http:
        got = await pages(http, "/v1/models", "models", cluster=c, limit=2)
        assert [[m["version"] for m in page] for page in got] == [
            [f"{c}-m3", f"{c}-m1"],
            [f"{c}-m2", f"{c}-m0"],
            [f"{c}-m4"],
        ]
        whole = (await http.get("/v1/models", params={"cluster": c})).json()
        assert (whole["limit"], len(whole["models"])) == (4, 4) and whole["next_cursor"] is not None
        too_big = await http.get("/v1/models", params={"limit": 5})
        assert too_big.status_code == 422 and "less than or equal to 4" in too_big.json()["detail"]
        for bad in ("not-a-cursor", encode_after(["x"]), encode_after(["yesterday", "m"])):
            body = (await http.get("/v1/models", params={"cursor": bad})).json()
            assert body["errors"][0]["parameter"] == "cursor", body


async def test_clusters_page_by_name(store_url: str) -> None:
    engine = await migrated(store_url)
    names = sorted(unique_cluster() for _ in range(3))
    for name in names:
        await seed(engine, name)
    await engine.dispose()
    async with client(store_url) as http:
        got = [c for page in await pages(http, "/v1/clusters", "clusters", limit=1) for c in page]
        ours = [c for c in got if c["name"] in names]
        assert [c["name"] for c in ours] == names
        assert all(c["last_snapshot_time"] == 103.0 and c["last_sequence"] == 3 for c in ours)
        assert [c["name"] for c in got] == sorted(c["name"] for c in got)
        first = (await http.get("/v1/clusters", params={"limit": 1})).json()
        assert first["limit"] == 1 and len(first["clusters"]) == 1 and first["next_cursor"]
        default = (await http.get("/v1/clusters")).json()
        assert default["limit"] == 1000 and default["next_cursor"] is None
