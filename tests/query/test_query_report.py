"""``GET /v1/report`` on real PostgreSQL and SQLite stores: the HTML page, its errors, its OpenAPI entry.

The store is filled by ``tests/report/report_helpers.seed``; its docstring works out the numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.query.query_helpers import client
from tests.report.report_helpers import decode_png, migrated, read_page, seed, unique_cluster

pytestmark = pytest.mark.asyncio


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


async def test_the_report_is_served_as_html(store_url: str) -> None:
    engine = await migrated(store_url)
    c = unique_cluster()
    await seed(engine, c)
    await engine.dispose()
    async with client(store_url) as http:
        response = await http.get("/v1/report", params={"cluster": c, "since": 300, "until": 600})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/html")
        p = read_page(response.text)
        assert p.number("snapshots") == 3 and p.number("jobs-finished") == 3
        assert p.number("mean-busy-gpus") == pytest.approx(1600 / 300)
        assert "fig-utilization" in p.images and decode_png(p.images["fig-utilization"])[0] > 0

        whole = read_page((await http.get("/v1/report", params={"cluster": c})).text)
        assert whole.number("snapshots") == 10 and whole.number("fallbacks") == 4

        metrics = (await http.get("/metrics")).text
        assert 'route="/v1/report",status="200"' in metrics


async def test_report_errors_name_the_parameter(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    engine = await migrated(url)
    a, b = unique_cluster(), unique_cluster()
    await seed(engine, a)
    await seed(engine, b)
    await engine.dispose()
    async with client(url) as http:
        unknown = await http.get("/v1/report", params={"cluster": "nope"})
        assert unknown.status_code == 404
        assert unknown.json()["detail"].startswith("unknown cluster 'nope' (known: ")

        several = await http.get("/v1/report")
        assert several.status_code == 422
        body = several.json()
        assert body["errors"][0]["parameter"] == "cluster" and "several clusters" in body["detail"]

        backwards = await http.get("/v1/report", params={"cluster": a, "since": 10, "until": 5})
        assert backwards.status_code == 422 and backwards.json()["errors"][0]["parameter"] == "until"

        pattern = await http.get("/v1/report", params={"cluster": "bad name"})
        assert pattern.status_code == 422 and "expected a cluster name" in pattern.json()["detail"]

        nan = await http.get("/v1/report", params={"cluster": a, "since": "nan"})
        assert nan.status_code == 422 and nan.json()["errors"][0]["parameter"] == "since"


async def test_an_empty_store_is_a_page_and_an_unmigrated_one_a_503(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    async with client(url) as http:
        unmigrated = await http.get("/v1/report")
        assert unmigrated.status_code == 503 and "not migrated" in unmigrated.json()["detail"]
    engine = await migrated(url)
    await engine.dispose()
    async with client(url) as http:
        empty = await http.get("/v1/report")
        assert empty.status_code == 200
        assert "no-data" in read_page(empty.text).ids


async def test_the_report_is_in_the_openapi_document(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    async with client(url) as http:
        doc = (await http.get("/openapi.json")).json()
    op = doc["paths"]["/v1/report"]["get"]
    assert op["tags"] == ["reports"]
    assert "text/html" in op["responses"]["200"]["content"]
    assert {"404", "422", "503"} <= set(op["responses"])
    assert {p["name"] for p in op["parameters"]} == {"cluster", "since", "until"}
