"""The query API on real PostgreSQL and SQLite stores, rows written through shared.store.writes.

Expected values are worked out from the seed in ``query_helpers.seed`` (see its docstring).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from shared.query import QuerySettings
from shared.query.cursor import Cursor
from shared.store import record_decision
from tests.query.query_helpers import BSLD, client, migrated, promote, seed, unique_cluster
from tests.schemas.message_factories import decision

pytestmark = pytest.mark.asyncio

LATENCIES = {"featurizer": 0.8, "prioritizer": 2.0, "placer": 1.2}


@dataclass
class Seeded:
    url: str
    cluster: str
    http: httpx.AsyncClient


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hylo.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest_asyncio.fixture
async def seeded(store_url: str) -> AsyncIterator[Seeded]:
    engine = await migrated(store_url)
    cluster = unique_cluster()
    await seed(engine, cluster)
    await engine.dispose()
    async with client(
        store_url, QuerySettings(query_page_default=20, query_page_max=50, query_history_max=20)
    ) as http:
        yield Seeded(store_url, cluster, http)


async def get(http: httpx.AsyncClient, path: str, expect: int = 200, /, **params: Any) -> Any:
    response = await http.get(path, params=params)
    assert response.status_code == expect, response.text
    return response.json()


# --- clusters ------------------------------------------------------------------------------------


async def test_clusters_list_the_newest_decided_snapshot(seeded: Seeded) -> None:
    body = await get(seeded.http, "/v1/clusters")
    ours = [c for c in body["clusters"] if c["name"] == seeded.cluster]
    assert len(ours) == 1
    row = ours[0]
    assert set(row) == {"name", "created_at", "spec", "last_snapshot_time", "last_sequence"}
    assert row["spec"] is None
    assert row["last_snapshot_time"] == 103.0 and row["last_sequence"] == 3
    assert row["created_at"].endswith("Z")  # UTC on both stores
    names = [c["name"] for c in body["clusters"]]
    assert names == sorted(names)


# --- decisions -----------------------------------------------------------------------------------


async def test_decision_rows_field_by_field(seeded: Seeded) -> None:
    c = seeded.cluster
    body = await get(seeded.http, "/v1/decisions", cluster=c, correlation_id=f"{c}-s1", order="asc")
    assert body["next_cursor"] is None and body["limit"] == 20
    rows = sorted(body["items"], key=lambda r: r["rank"])
    assert [r["job_id"] for r in rows] == ["j0", "j1", "j2", "j3"]
    first = rows[0]
    decided_at = first.pop("decided_at")
    assert decided_at.endswith("Z")
    assert first == {
        "cluster": c,
        "job_id": "j0",
        "correlation_id": f"{c}-s1",
        "snapshot_time": 101.0,
        "sequence": 1,
        "rank": 0,
        "priority": 4.0,
        "placed": True,
        "nodes": ["v0"],
        "mode": "pack",
        "policy": "model",
        "model_version": f"{c}-m1",
        "fallback": None,
        "features": {"wait": 0.0, "gpus": 0.5},
        "latencies_ms": LATENCIES,
        "latency_ms": 4.0,
        # what the placer knew (store revision 0006): the seed's decisions carry no score or raw values
        "score": None,
        "placer_status": "placed",
        "reserved_s": None,
        "placer": None,
        "solver_status": None,
        "raw_features": None,
    }
    last = rows[3]
    assert (last["rank"], last["priority"], last["placed"], last["nodes"], last["mode"]) == (
        3,
        1.0,
        False,
        [],
        None,
    )
    assert last["features"] == {"wait": 0.1 * 3, "gpus": 0.5}


async def test_filters_by_job_and_time_window(seeded: Seeded) -> None:
    c = seeded.cluster
    j3 = await get(seeded.http, "/v1/decisions", cluster=c, job_id="j3")
    assert [(r["correlation_id"], r["rank"]) for r in j3["items"]] == [
        (f"{c}-s3", 0),
        (f"{c}-s2", 1),
        (f"{c}-s1", 3),
    ]
    # since inclusive, until exclusive: [102, 103) is snapshot s2 only
    window = await get(seeded.http, "/v1/decisions", cluster=c, since=102, until=103, order="asc")
    assert [(r["job_id"], r["policy"], r["fallback"]) for r in window["items"]] == [
        ("j2", "fcfs", "no model"),
        ("j3", "fcfs", "no model"),
    ]
    recent = await get(seeded.http, "/v1/decisions", cluster=c, since=101.5)
    assert len(recent["items"]) == 3
    assert (await get(seeded.http, "/v1/decisions", cluster=c, until=101))["items"] == []


async def test_pages_cover_every_row_once_in_order(seeded: Seeded) -> None:
    c = seeded.cluster
    everything = (await get(seeded.http, "/v1/decisions", cluster=c, limit=50))["items"]
    assert [r["sequence"] for r in everything] == [3, 2, 2, 1, 1, 1, 1]
    for order in ("desc", "asc"):
        seen: list[tuple[str, str]] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"cluster": c, "limit": 3, "order": order}
            if cursor:
                params["cursor"] = cursor
            page = await get(seeded.http, "/v1/decisions", **params)
            pages += 1
            assert len(page["items"]) <= 3
            seen += [(r["correlation_id"], r["job_id"]) for r in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == 3  # 3 + 3 + 1 rows
        expected = [(r["correlation_id"], r["job_id"]) for r in everything]
        assert seen == (expected if order == "desc" else expected[::-1])


async def test_rows_arriving_between_pages_do_not_shift_the_next_page(seeded: Seeded) -> None:
    c = seeded.cluster
    first = await get(seeded.http, "/v1/decisions", cluster=c, limit=2)
    assert [r["correlation_id"] for r in first["items"]] == [f"{c}-s3", f"{c}-s2"]
    engine = await migrated(seeded.url)
    async with engine.begin() as conn:  # a newer snapshot is decided meanwhile
        await record_decision(conn, decision(c, f"{c}-s4", ("j3",), None, 4))
    await engine.dispose()
    second = await get(seeded.http, "/v1/decisions", cluster=c, limit=2, cursor=first["next_cursor"])
    assert [r["correlation_id"] for r in second["items"]] == [f"{c}-s2", f"{c}-s1"]
    assert {r["job_id"] for r in first["items"] + second["items"] if r["correlation_id"] == f"{c}-s2"} == {
        "j2",
        "j3",
    }


async def test_unknown_cluster_is_404_naming_it(seeded: Seeded) -> None:
    body = await get(seeded.http, "/v1/decisions", 404, cluster="no-such-cluster")
    assert body["detail"].startswith("unknown cluster 'no-such-cluster' (known: ")
    assert body["errors"] == []


@pytest.mark.parametrize(
    ("params", "parameter", "fragment"),
    [
        ({"limit": "0"}, "limit", "greater than or equal to 1"),
        ({"limit": "51"}, "limit", "less than or equal to 50"),
        ({"limit": "ten"}, "limit", "valid integer"),
        ({"since": "yesterday"}, "since", "valid number"),
        ({"until": "nan"}, "until", "finite number"),
        ({"cluster": "a.b"}, "cluster", "expected a cluster name: 1-63 letters"),
        ({"order": "sideways"}, "order", "'asc' or 'desc'"),
        ({"since": "200", "until": "100"}, "until", "expected a time after since=200.0"),
        ({"cursor": "not-a-cursor"}, "cursor", "expected a next_cursor value returned by this API"),
        (
            {"cursor": Cursor(101.0, 3, "asc").encode()},
            "cursor",
            "issued for order=asc; repeat the request with order=asc",
        ),
    ],
)
async def test_bad_decision_parameters_are_422_naming_the_parameter(
    seeded: Seeded, params: dict[str, str], parameter: str, fragment: str
) -> None:
    body = await get(seeded.http, "/v1/decisions", 422, **params)
    assert f"query parameter '{parameter}'" in body["detail"]
    assert fragment in body["detail"]
    assert [e["parameter"] for e in body["errors"]] == [parameter]
    assert body["errors"][0]["location"] == "query"
    assert "Traceback" not in body["detail"]


# --- jobs ----------------------------------------------------------------------------------------


async def test_job_detail_explains_each_priority(seeded: Seeded) -> None:
    c = seeded.cluster
    body = await get(seeded.http, f"/v1/jobs/{c}/j2")
    assert (body["cluster"], body["job_id"], body["decision_count"], body["truncated"]) == (c, "j2", 2, False)
    job = body["job"]
    assert job.pop("first_seen_at").endswith("Z")
    assert job == {
        "submit_s": 2.0,
        "gpus": 3,
        "gpu_milli": 1000,
        "cpus_milli": -1,
        "mem_mib": -1,
        "est_runtime_s": 1800.0,
        "user": "u0",
        "partition": "a",
        "qos": "normal",
    }
    out = body["outcome"]
    assert out.pop("recorded_at").endswith("Z")
    assert out == {
        "correlation_id": f"{c}-s2",
        "submit_s": 0.0,
        "start_s": 101.0,
        "end_s": 701.0,
        "wait_s": 101.0,
        "jct_s": 701.0,
        "bsld": pytest.approx(BSLD, rel=1e-12),
        "gpus": 1,
        "status": "completed",
        "nodes": None,  # the seed's outcomes do not say where they ran
        "node_gpus": None,
        "gpu_type": None,
    }
    history = body["decisions"]
    for h in history:
        h.pop("decided_at")
    assert history == [
        {
            "cluster": c,
            "job_id": "j2",
            "correlation_id": f"{c}-s1",
            "snapshot_time": 101.0,
            "sequence": 1,
            "rank": 2,
            "priority": 2.0,
            "placed": False,
            "nodes": [],
            "mode": None,
            "policy": "model",
            "model_version": f"{c}-m1",
            "fallback": None,
            "features": {"wait": 0.2, "gpus": 0.5},
            "latencies_ms": LATENCIES,
            "latency_ms": 4.0,
            "score": None,
            "placer_status": "waiting",
            "reserved_s": None,
            "placer": None,
            "solver_status": None,
            "raw_features": None,
            "started_job": False,
        },
        {
            "cluster": c,
            "job_id": "j2",
            "correlation_id": f"{c}-s2",
            "snapshot_time": 102.0,
            "sequence": 2,
            "rank": 0,
            "priority": 2.0,
            "placed": True,
            "nodes": ["v0"],
            "mode": "pack",
            "policy": "fcfs",
            "model_version": None,
            "fallback": "no model",
            "features": {"wait": 0.0, "gpus": 0.5},
            "latencies_ms": LATENCIES,
            "latency_ms": 4.0,
            "score": None,
            "placer_status": "placed",
            "reserved_s": None,
            "placer": None,
            "solver_status": None,
            "raw_features": None,
            "started_job": True,
        },
    ]


async def test_waiting_job_and_truncated_history(seeded: Seeded) -> None:
    c = seeded.cluster
    body = await get(seeded.http, f"/v1/jobs/{c}/j3")
    assert body["outcome"] is None
    assert [(d["sequence"], d["rank"], d["started_job"]) for d in body["decisions"]] == [
        (1, 3, False),
        (2, 1, False),
        (3, 0, False),
    ]
    newest = await get(seeded.http, f"/v1/jobs/{c}/j3", history=2)
    assert (newest["decision_count"], newest["truncated"]) == (3, True)
    assert [d["sequence"] for d in newest["decisions"]] == [2, 3]  # the newest two, oldest first
    body = await get(seeded.http, f"/v1/jobs/{c}/j3", 422, history=21)
    assert "query parameter 'history': Input should be less than or equal to 20" in body["detail"]


async def test_unknown_job_or_cluster_is_404_and_bad_path_is_422(seeded: Seeded) -> None:
    c = seeded.cluster
    body = await get(seeded.http, f"/v1/jobs/{c}/j99", 404)
    assert body == {"detail": f"no job 'j99' in cluster '{c}'", "errors": []}
    body = await get(seeded.http, "/v1/jobs/nowhere/j0", 404)
    assert body["detail"].startswith("unknown cluster 'nowhere'")
    body = await get(seeded.http, "/v1/jobs/bad.name/j0", 422)
    assert body["errors"][0]["parameter"] == "cluster" and body["errors"][0]["location"] == "path"
    assert "path parameter 'cluster': expected a cluster name" in body["detail"]


# --- models --------------------------------------------------------------------------------------


async def test_models_list_and_detail_with_outcomes(seeded: Seeded) -> None:
    c = seeded.cluster
    listing = await get(seeded.http, "/v1/models", cluster=c)
    assert listing == {
        "models": [
            {
                "version": f"{c}-m1",
                "cluster": c,
                "sha256": "0" * 64,
                "uri": "/models/m-1.pt",
                "status": "candidate",
                "created_at": "2026-11-01T00:00:00Z",
                "promoted_at": None,
            }
        ],
        "limit": 1000,
        "next_cursor": None,
    }
    assert (await get(seeded.http, "/v1/models", cluster=c, status="current"))["models"] == []

    engine = await migrated(seeded.url)
    await promote(engine, c)
    await engine.dispose()
    detail = await get(seeded.http, f"/v1/models/{c}-m1")
    assert (detail["status"], detail["promoted_at"]) == ("current", "2026-11-02T12:30:00Z")
    assert detail["card"] == {"features": {"hash": "ab"}, "reward": "bsld"}
    assert detail["decision_count"] == 4  # the four rows of s1
    # j0 and j1 were started by s1 (the model's decision): wait 101, JCT 701 each
    assert detail["outcomes"] == {
        "jobs": 2,
        "mean_wait_s": 101.0,
        "mean_jct_s": 701.0,
        "mean_bsld": pytest.approx(BSLD, rel=1e-12),
        "max_bsld": pytest.approx(BSLD, rel=1e-12),
        "fallbacks": 0,
    }
    current = await get(seeded.http, "/v1/models", cluster=c, status="current")
    assert [m["version"] for m in current["models"]] == [f"{c}-m1"]


async def test_unknown_model_is_404_bad_status_is_422(seeded: Seeded) -> None:
    body = await get(seeded.http, "/v1/models/m-unknown", 404)
    assert body["detail"] == "no model version 'm-unknown'"
    body = await get(seeded.http, "/v1/models", 422, status="live")
    assert body["errors"][0]["parameter"] == "status"
    assert "'current', 'retired' or 'external'" in body["detail"] and "(got 'live')" in body["detail"]
    body = await get(seeded.http, "/v1/models/-bad", 422)
    assert "path parameter 'version': expected a model version" in body["detail"]


# --- operations ----------------------------------------------------------------------------------


async def test_health_ready_and_metrics(seeded: Seeded) -> None:
    assert await get(seeded.http, "/healthz") == {"status": "ok"}
    ready = await get(seeded.http, "/readyz")
    assert ready["status"] == "ready" and ready["database"] == "reachable"
    assert ready["revision"] == ready["head"]
    await get(seeded.http, "/v1/decisions", cluster=seeded.cluster)
    await get(seeded.http, "/v1/decisions", 422, limit=0)
    text = (await seeded.http.get("/metrics")).text
    assert 'hylo_query_requests_total{method="GET",route="/v1/decisions",status="200"} 1.0' in text
    assert 'hylo_query_requests_total{method="GET",route="/v1/decisions",status="422"} 1.0' in text


async def test_openapi_documents_responses_and_errors(seeded: Seeded) -> None:
    doc = await get(seeded.http, "/openapi.json")
    paths = doc["paths"]
    assert set(paths) >= {
        "/v1/clusters",
        "/v1/decisions",
        "/v1/jobs/{cluster}/{job_id}",
        "/v1/models",
        "/v1/models/{version}",
        "/healthz",
        "/readyz",
    }
    job = paths["/v1/jobs/{cluster}/{job_id}"]["get"]
    assert job["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobDetail")
    assert job["responses"]["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert job["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    features = doc["components"]["schemas"]["DecisionOut"]["properties"]["features"]
    assert "why it got that priority" in features["description"] and features["examples"]


async def test_job_ids_with_slashes_and_underscores_are_reachable(seeded: Seeded) -> None:
    c = seeded.cluster
    engine = await migrated(seeded.url)
    async with engine.begin() as conn:
        await record_decision(conn, decision(c, f"{c}-s9", ("array/7", "81234_7"), None, 9))
    await engine.dispose()
    body = await get(seeded.http, f"/v1/jobs/{c}/array/7")
    assert (body["job_id"], body["job"], body["decision_count"]) == ("array/7", None, 1)
    assert body["decisions"][0]["rank"] == 0 and body["decisions"][0]["nodes"] == ["v0"]
    assert (await get(seeded.http, f"/v1/jobs/{c}/81234_7"))["decisions"][0]["rank"] == 1
    filtered = await get(seeded.http, "/v1/decisions", cluster=c, job_id="array/7")
    assert [r["correlation_id"] for r in filtered["items"]] == [f"{c}-s9"]
